"""Redaction of nested structures and of exceptions."""

from __future__ import annotations

import typing

from flux_secret._exceptions import RedactionError, RedactionReason
from flux_secret._value import SecretValue

if typing.TYPE_CHECKING:
    from flux_secret._redactor import Redactor

__all__ = ["RedactedException", "redact_exception", "redact_obj"]

_MAX_DEPTH = 200  # nesting levels; also how a reference cycle is caught
_MAX_CHAIN = 16  # causes/contexts followed from one exception
_UNPRINTABLE = "<unprintable>"


def redact_obj(red: Redactor, obj: object) -> object:
    """Return a redacted copy of *obj*: ``dict`` (keys and values), ``list``, ``tuple``
    (named tuples keep their type), ``set``/``frozenset``, ``str``, ``bytes``; numbers
    whose decimal text contains a secret become the marker; ``None`` and ``bool`` pass.

    Guarantee: the input is not modified; every str/bytes leaf, key included, is
    redacted; a :class:`SecretValue` leaf becomes the marker; two keys of any type
    that redact to the same key are kept apart (``#2``, ``#3`` ... appended to a
    ``str`` or ``bytes`` key, added as the last item of a tuple, or else the key's
    redacted ``repr`` with the suffix), never merged: every value is kept.

    Not guaranteed: any other type (dataclasses, models, custom objects) is refused
    rather than guessed at — convert it to plain data first.

    Raises:
        RedactionError: ``UNSUPPORTED_TYPE``, or ``TOO_DEEP`` past ``_MAX_DEPTH``
            levels (a reference cycle ends there too). Nothing partial is returned.
    """
    return _walk(red, obj, 0)


def _apart(red: Redactor, key: object, n: int) -> object:
    """*key* made distinct with suffix ``#n``, keeping its type where it has one to
    extend: ``str`` and ``bytes`` get the suffix, a plain tuple gets it as a last
    item; any other key (a frozenset, a named tuple) becomes the ``str`` of its
    redacted ``repr`` with the suffix."""
    if isinstance(key, str):
        return f"{key}#{n}"
    if isinstance(key, bytes):
        return key + b"#%d" % n
    if type(key) is tuple:
        return (*key, f"#{n}")
    return red.redact(f"{key!r}#{n}")


def _walk(red: Redactor, obj: object, depth: int) -> object:
    if depth > _MAX_DEPTH:
        raise RedactionError("structure nested too deeply", reason=RedactionReason.TOO_DEEP)
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, str):
        return red.redact(obj)
    if isinstance(obj, bytes | bytearray):
        return red.redact_bytes(obj)
    if isinstance(obj, int | float):
        try:
            text = repr(obj)
        except ValueError as exc:  # an int over sys.get_int_max_str_digits(): no text
            raise RedactionError(
                "number too long to render", reason=RedactionReason.UNSUPPORTED_TYPE
            ) from exc
        redacted = red.redact(text)
        return obj if redacted == text else redacted
    if isinstance(obj, SecretValue):
        return red._marker_for((obj.name,)).decode("utf-8", "surrogatepass")
    if isinstance(obj, dict):
        out: dict[object, object] = {}
        for key, value in obj.items():
            new_key = _walk(red, key, depth + 1)
            if new_key in out:
                n = 2
                while _apart(red, new_key, n) in out:
                    n += 1
                new_key = _apart(red, new_key, n)
            out[new_key] = _walk(red, value, depth + 1)
        return out
    if isinstance(obj, list):
        return [_walk(red, item, depth + 1) for item in obj]
    if isinstance(obj, tuple):
        items = [_walk(red, item, depth + 1) for item in obj]
        if hasattr(obj, "_fields"):  # a named tuple keeps its type
            named: typing.Any = type(obj)
            return named(*items)
        return tuple(items)
    if isinstance(obj, frozenset):
        return frozenset(_walk(red, item, depth + 1) for item in obj)
    if isinstance(obj, set):
        return {_walk(red, item, depth + 1) for item in obj}
    raise RedactionError(
        f"cannot redact an object of type {type(obj).__name__}",
        reason=RedactionReason.UNSUPPORTED_TYPE,
    )


@typing.final
class RedactedException(Exception):
    """Stands in for an exception whose message, args and notes were redacted.

    It keeps the original's qualified type name, never the original object nor its
    traceback (whose frames hold locals, secrets included). It can be raised in its
    place; ``__cause__`` is the redacted cause or context chain.
    """

    def __init__(self, type_name: str, message: str, args: tuple[object, ...]) -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name = type_name
        self.message = message
        self.redacted_args = args


def _safe_text(func: typing.Callable[[], str]) -> str:
    try:
        return func()
    except Exception:  # a broken __str__/__repr__ must not stop redaction
        return _UNPRINTABLE


def _one(red: Redactor, exc: BaseException) -> RedactedException:
    cls = type(exc)
    type_name = f"{cls.__module__}.{cls.__qualname__}"
    message = red.redact(_safe_text(lambda: str(exc)))
    args: list[object] = []
    for arg in exc.args:
        try:
            args.append(redact_obj(red, arg))
        except RedactionError:
            args.append(red.redact(_safe_text(lambda a=arg: repr(a))))  # type: ignore[misc]
    out = RedactedException(type_name, message, tuple(args))
    for note in getattr(exc, "__notes__", None) or ():
        out.add_note(red.redact(note) if isinstance(note, str) else _UNPRINTABLE)
    return out


def redact_exception(red: Redactor, exc: BaseException) -> RedactedException:
    """Return a :class:`RedactedException` for *exc* and its cause/context chain.

    Guarantee: the message (``str(exc)``), every arg (as :func:`redact_obj`, or its
    redacted ``repr``) and every note are redacted; at most ``_MAX_CHAIN`` causes or
    contexts are followed, cycles included; a failing ``__str__`` gives
    ``<unprintable>`` instead of an error.

    Not guaranteed: attributes other than ``args`` and notes are not carried over.

    Raises:
        TypeError: *exc* is not an exception.
    """
    if not isinstance(exc, BaseException):
        raise TypeError(f"exc must be an exception, not {type(exc).__name__}")
    head = _one(red, exc)
    tail, current = head, exc
    seen = {id(exc)}
    for _ in range(_MAX_CHAIN):
        nxt = current.__cause__
        if nxt is None and not current.__suppress_context__:
            nxt = current.__context__
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        redacted = _one(red, nxt)
        tail.__cause__ = redacted
        tail, current = redacted, nxt
    return head
