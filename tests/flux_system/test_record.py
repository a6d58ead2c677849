"""``@record`` behaves as the ``@dataclass(frozen=True, slots=True)`` it replaces
(decision 0136): each property checked on a record and on its dataclass twin."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import typing

import pytest

from flux_system._values import field, record


@record
class Point:
    """A frozen record."""

    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class PointDC:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@record(frozen=False)
class Bag:
    name: str
    items: list[int] = field(default_factory=list)


@dataclasses.dataclass(slots=True)
class BagDC:
    name: str
    items: list[int] = dataclasses.field(default_factory=list)


@record
class Checked:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n must not be negative")


def test_construction_defaults_and_repr_match_the_dataclass() -> None:
    for cls in (Point, PointDC):
        assert cls(1).y == 0 and cls(1, 2).y == 2 and cls(x=1, y=3).y == 3
        with pytest.raises(TypeError):
            cls()  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            cls(1, 2, (), 4)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            cls(1, z=2)  # type: ignore[call-arg]
    assert repr(Point(1, 2, ("a",))) == "Point(x=1, y=2, tags=('a',))"
    assert repr(PointDC(1, 2, ("a",))).replace("PointDC", "Point") == repr(Point(1, 2, ("a",)))
    assert Point.__match_args__ == PointDC.__match_args__ == ("x", "y", "tags")
    assert Point.__doc__ == "A frozen record."


def test_frozen_slotted_equal_and_hashable() -> None:
    p = Point(1, 2)
    for obj in (p, PointDC(1, 2)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.x = 5  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del obj.x
        assert not hasattr(obj, "__dict__")
    assert p.x == 1
    assert p == Point(1, 2) and p != Point(1, 3) and hash(p) == hash(Point(1, 2))
    assert p != typing.cast(
        object, PointDC(1, 2)
    )  # a different class is never equal, as with dataclasses
    assert len({Point(1), Point(1), Point(2)}) == 2
    with pytest.raises(TypeError):
        hash(Point(1, 2, ([],)))  # type: ignore[arg-type]  # unhashable field: unhashable


def test_mutable_record_assigns_and_is_unhashable_with_fresh_defaults() -> None:
    for cls in (Bag, BagDC):
        a, b = cls("a"), cls("b")
        a.items.append(1)
        assert b.items == []  # a fresh list per instance
        a.name = "renamed"
        assert a.name == "renamed"
        with pytest.raises(TypeError):
            hash(a)
        with pytest.raises(AttributeError):
            setattr(a, "other", 1)  # noqa: B010  # slotted: no new attributes


def test_post_init_runs() -> None:
    assert Checked(3).n == 3
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)


def test_dataclasses_functions_work_on_records() -> None:
    p = Point(1, 2, ("t",))
    assert [f.name for f in dataclasses.fields(p)] == ["x", "y", "tags"]
    assert [f.default for f in dataclasses.fields(Point)][1:] == [0, ()]
    assert dataclasses.replace(p, y=9) == Point(1, 9, ("t",))
    assert dataclasses.asdict(p) == {"x": 1, "y": 2, "tags": ("t",)}
    assert dataclasses.astuple(p) == (1, 2, ("t",))
    bag = dataclasses.replace(Bag("a", [1]), name="b")
    assert bag.name == "b" and bag.items == [1]
    assert dataclasses.fields(Bag)[1].default_factory is list
    assert dataclasses.is_dataclass(Point(0)) and dataclasses.is_dataclass(Bag)


def test_copy_deepcopy_and_pickle() -> None:
    p = Point(1, 2, ("a",))
    for made in (copy.copy(p), copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert made == p and made is not p
    bag = Bag("a", [1])
    deep = copy.deepcopy(bag)
    deep.items.append(2)
    assert bag.items == [1]


def test_unsupported_shapes_are_refused_when_the_class_is_made() -> None:
    with pytest.raises(TypeError, match="no default after"):

        @record
        class Bad:
            a: int = 0
            b: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="bases"):

        @record
        class Sub(Point):
            z: int = 0

    with pytest.raises(TypeError, match="super"):

        @record
        class UsesSuper:
            a: int

            def __repr__(self) -> str:
                return super().__repr__()

    with pytest.raises(TypeError, match="ClassVar"):

        @record
        class HasClassVar:
            a: typing.ClassVar[int]
