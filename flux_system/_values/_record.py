"""``@record``: a value class as ``@dataclass(frozen=True, slots=True)`` makes it, made cheaply.

Why (decision 0136): ``@dataclass`` compiles five or six methods per class with
``exec`` and, with ``slots=True``, builds the class twice — 0.6-0.9 ms a class here,
and importing ``dataclasses`` pulls in ``inspect`` (about 11 ms). ``flux exec`` creates
some thirty such classes before it runs anything, a third of its start-up. ``@record``
compiles only ``__init__`` and shares one ``__repr__``, ``__eq__``, ``__hash__`` and
frozen ``__setattr__`` among all records (about 40 us a class).

Guarantee — what a record has, as the dataclass it replaces had:
- ``__slots__`` (no ``__dict__``), fields in annotation order, an ``__init__`` taking
  them positionally or by name with their defaults (``field(default_factory=...)``
  for a mutable default), ``__post_init__`` called when the class defines one;
- frozen (the default): assignment and deletion raise
  ``dataclasses.FrozenInstanceError``; ``__hash__`` over the fields;
  ``frozen=False``: assignable, unhashable (as ``eq=True`` dataclasses);
- ``__eq__`` between instances of exactly the same class, field by field;
  ``__repr__`` as a dataclass's; ``__match_args__``; ``copy``, ``deepcopy`` and
  ``pickle`` through ``__reduce__``;
- ``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work:
  ``__dataclass_fields__`` is built on first use (the only time ``dataclasses`` is
  imported), from a dataclass twin with the same fields and defaults.
A user's subclass of a record is, as a subclass of a dataclass is, a dataclass with
the record's fields. A ``__hash__`` the class sets itself (``None`` too) is kept.
Refused when the class is made: inheritance between records, fields with
``repr``/``compare``/``init`` options, ``ClassVar``/``InitVar`` fields, a ``list``,
``dict`` or ``set`` default (``field(default_factory=...)``), zero-argument ``super()``
in a method, property, classmethod or staticmethod (the class is built once with its
slots, not rebuilt).
"""

from __future__ import annotations

import operator
import typing
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["field", "record"]

_T = TypeVar("_T")
_C = TypeVar("_C", bound=type)


_NONE: Any = object()  # a field with no default


class _Factory:
    """The default of a field made by ``field(default_factory=...)``."""

    __slots__ = ("factory",)

    def __init__(self, factory: Callable[[], object]) -> None:
        self.factory = factory


def field(*, default_factory: Callable[[], _T] | None = None, default: Any = _NONE) -> Any:
    """A field's default: a *default_factory* called per instance, or a plain *default*
    (neither: the field has none, as ``dataclasses.field()``)."""
    if default_factory is not None:
        return _Factory(default_factory)
    return default


def _frozen_setattr(self: object, name: str, value: object) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: object, name: str) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _values(self: object) -> tuple[object, ...]:
    values: tuple[object, ...] = type(self).__record_values__(self)  # type: ignore[attr-defined]
    return values


def _getter(names: tuple[str, ...]) -> Callable[[object], tuple[object, ...]]:
    """The fields' values as a tuple, read in C (``attrgetter`` of two or more names)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        only = operator.attrgetter(names[0])
        return lambda obj: (only(obj),)
    return lambda obj: ()


def _repr(self: object) -> str:
    cls = type(self)
    inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in cls.__record_fields__)  # type: ignore[attr-defined]
    return f"{cls.__qualname__}({inner})"


def _eq(self: object, other: object) -> object:
    if other.__class__ is not self.__class__:
        return NotImplemented
    same: bool = _values(self) == _values(other)
    return same


def _hash(self: object) -> int:
    return hash(_values(self))


def _reduce(self: object) -> tuple[type, tuple[object, ...]]:
    return type(self), _values(self)


class _Lazy:
    """``__dataclass_fields__`` / ``__dataclass_params__``, from a twin made on first use."""

    __slots__ = ("attr",)

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def __get__(self, obj: object, cls: type) -> object:
        import dataclasses

        # The record itself, also when *cls* is a user's subclass of it (which is then
        # a dataclass with the record's fields, as a subclass of a dataclass is).
        owner = next(c for c in cls.__mro__ if "__record_fields__" in c.__dict__)
        if owner is not cls:
            return getattr(owner, self.attr)
        names: tuple[str, ...] = getattr(cls, "__record_fields__")  # noqa: B009
        defaults: tuple[object, ...] = getattr(cls, "__record_defaults__")  # noqa: B009
        spec = [
            (name, cls.__annotations__[name], _field_of(dataclasses, default))
            for name, default in zip(names, defaults, strict=True)
        ]
        frozen = getattr(cls, "__setattr__") is _frozen_setattr  # noqa: B009
        twin = dataclasses.make_dataclass(cls.__name__, spec, frozen=frozen)
        for attr in ("__dataclass_fields__", "__dataclass_params__"):
            type.__setattr__(cls, attr, getattr(twin, attr))
        return getattr(cls, self.attr)


def _field_of(dataclasses: Any, default: object) -> Any:
    if default is _NONE:
        return dataclasses.field()
    if isinstance(default, _Factory):
        return dataclasses.field(default_factory=default.factory)
    return dataclasses.field(default=default)


def _make_init(cls: type, names: tuple[str, ...], defaults: tuple[object, ...]) -> None:
    params = []
    body = []
    env: dict[str, object] = {"_NONE": _NONE}
    for name, default in zip(names, defaults, strict=True):
        env[f"_set_{name}"] = cls.__dict__[name].__set__  # the slot's own setter
        if default is _NONE:
            params.append(name)
        elif isinstance(default, _Factory):
            env[f"_new_{name}"] = default.factory
            params.append(f"{name}=_NONE")
            body.append(f"  if {name} is _NONE: {name} = _new_{name}()")
        else:
            env[f"_default_{name}"] = default
            params.append(f"{name}=_default_{name}")
        body.append(f"  _set_{name}(self, {name})")
    if "__post_init__" in cls.__dict__:
        body.append("  self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "  pass")
    exec(source, env)  # noqa: S102 - source built from the class's own field names
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    type.__setattr__(cls, "__init__", init)


def _uses_class_cell(value: object) -> bool:
    """Whether *value* (a function, or a property, classmethod or staticmethod of one)
    refers to ``__class__`` (zero-argument ``super()``)."""
    if isinstance(value, property):
        return any(_uses_class_cell(f) for f in (value.fget, value.fset, value.fdel))
    if isinstance(value, (classmethod, staticmethod)):
        return _uses_class_cell(value.__func__)
    code = getattr(value, "__code__", None)
    return code is not None and "__class__" in code.co_freevars


@typing.overload
def record(cls: _C, /) -> _C: ...


@typing.overload
def record(*, frozen: bool = True) -> Callable[[_C], _C]: ...


@typing.dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: _C | None = None, /, *, frozen: bool = True) -> Any:
    """Make *cls* a record (see the module); ``@record`` or ``@record(frozen=False)``."""

    def make(cls: _C) -> _C:
        ns = dict(cls.__dict__)
        if "__slots__" in ns or any(b is not object for b in cls.__bases__):
            raise TypeError(f"{cls.__qualname__}: a record declares no __slots__ or bases")
        names: list[str] = []
        defaults: list[object] = []
        for name, annotation in ns.get("__annotations__", {}).items():
            if "ClassVar" in str(annotation) or "InitVar" in str(annotation):
                raise TypeError(f"{cls.__qualname__}.{name}: ClassVar/InitVar not supported")
            names.append(name)
            defaults.append(ns.pop(name, _NONE))
        after_default = False
        for name, default in zip(names, defaults, strict=True):
            if default is not _NONE:
                after_default = True
            elif after_default:
                raise TypeError(f"{cls.__qualname__}.{name}: no default after a field with one")
        for name, default in zip(names, defaults, strict=True):
            if isinstance(default, (list, dict, set)):  # as dataclasses refuse them
                raise ValueError(
                    f"{cls.__qualname__}.{name}: mutable default {type(default).__name__}: "
                    "use field(default_factory=...)"
                )
        for value in ns.values():
            if _uses_class_cell(value):
                raise TypeError(f"{cls.__qualname__}: zero-argument super() is not supported")
        ns.pop("__dict__", None)
        ns.pop("__weakref__", None)
        ns["__slots__"] = tuple(names)
        made = type(cls)(cls.__name__, cls.__bases__, ns)
        made.__qualname__ = cls.__qualname__
        type.__setattr__(made, "__record_fields__", tuple(names))
        type.__setattr__(made, "__record_values__", staticmethod(_getter(tuple(names))))
        type.__setattr__(made, "__record_defaults__", tuple(defaults))
        type.__setattr__(made, "__match_args__", tuple(names))
        _make_init(made, tuple(names), tuple(defaults))
        for attr, value in (("__repr__", _repr), ("__eq__", _eq), ("__reduce__", _reduce)):
            if attr not in ns:
                type.__setattr__(made, attr, value)
        # A __hash__ the class sets itself is kept (None included), as dataclasses do;
        # None with an __eq__ of its own is Python's implicit one, not the class's.
        explicit_hash = "__hash__" in ns and not (ns["__hash__"] is None and "__eq__" in ns)
        if frozen:
            type.__setattr__(made, "__setattr__", _frozen_setattr)
            type.__setattr__(made, "__delattr__", _frozen_delattr)
            if not explicit_hash:
                type.__setattr__(made, "__hash__", _hash)
        elif not explicit_hash:
            type.__setattr__(made, "__hash__", None)
        type.__setattr__(made, "__dataclass_fields__", _Lazy("__dataclass_fields__"))
        type.__setattr__(made, "__dataclass_params__", _Lazy("__dataclass_params__"))
        return made

    return make if cls is None else make(cls)
