"""redact_obj, redact_exception and the logging filter."""

from __future__ import annotations

import io
import logging
from collections import namedtuple

import pytest

from flux_secret import (
    RedactedException,
    RedactingFilter,
    RedactionError,
    RedactionReason,
    Redactor,
    SecretValue,
)

SECRET = "nested-Secret-77"


@pytest.fixture
def red() -> Redactor:
    r = Redactor()
    r.register(SECRET, "s")
    r.register("12345678", "digits")
    return r


def test_nested_structure_keys_and_values(red: Redactor) -> None:
    Pair = namedtuple("Pair", "a b")
    obj = {
        SECRET: [f"x{SECRET}y", (SECRET.encode(), 1, None, True)],
        "k": {"deep": {SECRET, "plain-item"}, "t": Pair(SECRET, 2.5)},
        "[redacted]": "collides with the redacted key",
        "num": 12345678,
        "fs": frozenset({SECRET}),
        "sv": SecretValue("wrapped-value-0", name="env/W"),
    }
    snapshot = repr(obj)
    out = red.redact_obj(obj)
    assert repr(obj) == snapshot  # input untouched
    assert SECRET not in repr(out) and "12345678" not in repr(out)
    assert isinstance(out, dict)
    assert out["[redacted]"] == ["x[redacted]y", (b"[redacted]", 1, None, True)]
    assert out["[redacted]#2"] == "collides with the redacted key"
    assert out["k"]["deep"] == {"[redacted]", "plain-item"}
    assert out["k"]["t"] == Pair("[redacted]", 2.5) and type(out["k"]["t"]) is Pair
    assert out["num"] == "[redacted]"
    assert out["fs"] == frozenset({"[redacted]"})
    assert out["sv"] == "[redacted]"


def test_unsupported_type_and_depth(red: Redactor) -> None:
    with pytest.raises(RedactionError) as info:
        red.redact_obj({"x": object()})
    assert info.value.reason is RedactionReason.UNSUPPORTED_TYPE
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(RedactionError) as info:
        red.redact_obj(cyclic)
    assert info.value.reason is RedactionReason.TOO_DEEP


class _Custom(Exception):
    def __init__(self, token: str, extra: object) -> None:
        super().__init__(token, extra)
        self.token = token

    def __str__(self) -> str:
        return f"custom failure with {self.token}"


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_redact_exception_chain(red: Redactor) -> None:
    try:
        try:
            raise KeyError(f"lookup {SECRET}")
        except KeyError as inner:
            raise _Custom(SECRET, object()) from inner
    except _Custom as exc:
        exc.add_note(f"note {SECRET}")
        out = red.redact_exception(exc)
    assert isinstance(out, RedactedException)
    assert out.type_name.endswith("_Custom")
    assert SECRET not in str(out) and SECRET not in repr(out.redacted_args)
    assert out.message == "custom failure with [redacted]"
    assert out.__notes__ == ["note [redacted]"]
    assert out.__traceback__ is None
    cause = out.__cause__
    assert isinstance(cause, RedactedException) and cause.type_name == "builtins.KeyError"
    assert SECRET not in str(cause)
    assert red.redact_exception(_Unprintable()).message == "<unprintable>"
    with pytest.raises(TypeError):
        red.redact_exception("not an exception")  # type: ignore[arg-type]


def test_redact_exception_cycle_is_bounded(red: Redactor) -> None:
    a, b = ValueError(SECRET), ValueError("b")
    a.__context__, b.__context__ = b, a
    out = red.redact_exception(a)
    assert out.__cause__ is not None and out.__cause__.__cause__ is None


def test_logging_filter_redacts_message_args_and_traceback(red: Redactor) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(red.logging_filter())
    log = logging.getLogger("flux_secret.test.filter")
    log.propagate = False
    log.addHandler(handler)
    try:
        log.warning("token %s and %d", SECRET, 12345678)
        log.warning("bad format %s %s", SECRET)  # noqa: PLE1206 - a malformed record on purpose
        try:
            raise RuntimeError(f"boom {SECRET}")
        except RuntimeError:
            log.exception("failed")
        log.warning("stack", stack_info=True, extra={"k": 1})
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert SECRET not in text and "12345678" not in text
    assert "token [redacted] and [redacted]" in text
    assert "RuntimeError: boom [redacted]" in text
    assert isinstance(red.logging_filter(), RedactingFilter)
