"""Outside attack on ``@record``'s stated parity with ``@dataclass(frozen=True,
slots=True)`` (decision 0136). Each test compares a record with the dataclass it
stands for; what held (validation through replace/copy/deepcopy/pickle, frozenness,
eq/hash, fields/asdict/astuple/replace, the lazy fields under threads,
get_type_hints) is not repeated here."""

from __future__ import annotations

import dataclasses

import pytest

from flux_system._values import field, record
from flux_system.process import Limits


def _fresh_record() -> type:
    @record
    class Base:
        a: int
        b: str = "x"

    return Base


@dataclasses.dataclass(frozen=True, slots=True)
class BaseDC:
    a: int
    b: str = "x"


def test_a_user_subclass_of_a_record_is_a_dataclass_as_one_of_a_dataclass_is() -> None:
    """``__dataclass_fields__`` is built lazily from ``cls.__annotations__`` of the
    class it is looked up on: on a subclass (whose own annotations are empty) that
    raises ``KeyError`` — unless the base happened to be looked at first."""

    class SubDC(BaseDC):
        pass

    assert dataclasses.is_dataclass(SubDC)
    assert [f.name for f in dataclasses.fields(SubDC(1))] == ["a", "b"]

    base = _fresh_record()
    sub = type("Sub", (base,), {})
    # positive control: the same check passes once the base's fields were built
    warm = _fresh_record()
    dataclasses.fields(warm)
    warm_sub = type("WarmSub", (warm,), {})
    assert [f.name for f in dataclasses.fields(warm_sub(1))] == ["a", "b"]

    outcomes = []
    for check in (
        lambda: dataclasses.is_dataclass(sub),
        lambda: [f.name for f in dataclasses.fields(sub(1))],
        lambda: dataclasses.replace(sub(1), a=2).a,
    ):
        try:
            outcomes.append(check())
        except KeyError as exc:
            outcomes.append(f"KeyError {exc}")
    assert outcomes == [True, ["a", "b"], 2]


def test_a_subclass_of_a_flux_record_made_first_is_a_dataclass() -> None:
    """The same on a shipped record, in a fresh interpreter (no earlier look-up)."""
    import subprocess
    import sys

    code = (
        "import dataclasses\n"
        "from flux_system.process import Limits\n"
        "class MyLimits(Limits):\n"
        "    pass\n"
        "print(dataclasses.is_dataclass(MyLimits))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert Limits(open_files=64).open_files == 64  # positive control: the class works
    assert (out.returncode, out.stdout.strip()) == (0, "True"), out.stderr[-400:]


def test_zero_argument_super_in_a_property_is_refused_when_the_class_is_made() -> None:
    """The module says a method using zero-argument ``super()`` is refused when the
    class is made; in a ``property`` (or ``classmethod``/``staticmethod``) it is not
    seen, and fails only when called."""
    with pytest.raises(TypeError, match="super"):  # positive control: a plain method

        @record
        class Plain:
            a: int

            def r(self) -> str:
                return super().__repr__()

    made = True
    try:

        @record
        class Prop:
            a: int

            @property
            def r(self) -> str:
                return super().__repr__()

    except TypeError:
        made = False
    assert not made, "a property using zero-argument super() was accepted"


def test_an_explicit_hash_none_keeps_a_frozen_record_unhashable() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class NoHashDC:
        a: int
        __hash__ = None  # type: ignore[assignment]

    @record
    class NoHash:
        a: int
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError):
        hash(NoHashDC(1))
    assert NoHash(1) == NoHash(1)  # positive control: the record was made
    assert NoHash.__hash__ is None


def test_field_without_a_default_leaves_the_field_required() -> None:
    """``dataclasses.field()`` with neither default leaves a field required; the
    record's ``field()`` makes it default to ``None``."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class NeedsDC:
        a: int = dataclasses.field()

    @record
    class Needs:
        a: int = field()

    with pytest.raises(TypeError):
        NeedsDC()  # type: ignore[call-arg]
    assert Needs(1).a == 1  # positive control
    with pytest.raises(TypeError):
        Needs()  # type: ignore[call-arg]
