"""A resolved secret that does not show itself.

``SecretValue`` wraps the raw ``str`` or ``bytes`` of a secret. ``repr``, ``str``,
``format`` (f-strings, ``%s``, ``str.format``), logging, exception messages built from
it, pickling and copying never reveal the value; the one way to the raw value is the
explicitly named :meth:`SecretValue.expose_secret`, which is easy to grep for.
"""

from __future__ import annotations

import hmac
import typing

from flux_secret._exceptions import ExposureError, ExposureReason

__all__ = ["SecretValue"]

_SHOWN = "[secret]"


@typing.final
class SecretValue:
    """A secret value that hides itself from every implicit rendering.

    Guarantee: ``repr``, ``str``, ``format`` with any format spec, ``%s``/``%r``,
    ``logging`` (which renders through ``str``/``repr``) and exceptions that embed the
    object show ``[secret]`` or ``SecretValue(name=..., value=[secret])`` — never the
    value. Pickling and ``copy``/``deepcopy`` through pickle protocols raise
    :class:`ExposureError` (``copy.copy`` returns the same immutable object). Equality
    compares in constant time; the object is not hashable (a hash is a function of
    the value).

    Not guaranteed: Python offers no memory protection — the value lives in the
    interpreter's heap, may be swapped out, and is not wiped on release; code that
    calls :meth:`expose_secret` owns what it does with the result. ``name`` is a
    label chosen by the caller (e.g. ``"env/API_TOKEN"``) and is not secret.

    Args:
        value: the raw secret (``str`` or ``bytes``).
        name: a non-secret label for reports and markers.

    Raises:
        TypeError: *value* is not ``str``/``bytes`` or *name* is not ``str``.
    """

    __slots__ = ("__value", "_name")

    def __init__(self, value: str | bytes, *, name: str = "secret") -> None:
        if not isinstance(value, str | bytes):
            raise TypeError(f"value must be str or bytes, not {type(value).__name__}")
        if not isinstance(name, str):
            raise TypeError(f"name must be str, not {type(name).__name__}")
        self.__value = value
        self._name = name

    @property
    def name(self) -> str:
        """The non-secret label of this value."""
        return self._name

    def expose_secret(self) -> str | bytes:
        """Return the raw secret: the one, explicit, way to the value."""
        return self.__value

    def __repr__(self) -> str:
        return f"SecretValue(name={self._name!r}, value={_SHOWN})"

    def __str__(self) -> str:
        return _SHOWN

    def __format__(self, format_spec: str) -> str:
        return _SHOWN

    def __bytes__(self) -> bytes:
        raise ExposureError("bytes() of a SecretValue is refused", reason=ExposureReason.COPY)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretValue):
            return NotImplemented
        a, b = self.__value, other.__value
        if type(a) is not type(b):
            return False
        left = a.encode("utf-8", "surrogatepass") if isinstance(a, str) else a
        right = b.encode("utf-8", "surrogatepass") if isinstance(b, str) else b
        return hmac.compare_digest(left, right)

    __hash__ = None  # type: ignore[assignment]

    def __reduce_ex__(self, protocol: typing.SupportsIndex) -> typing.NoReturn:
        raise ExposureError("a SecretValue cannot be pickled", reason=ExposureReason.PICKLE)

    def __reduce__(self) -> typing.NoReturn:
        raise ExposureError("a SecretValue cannot be pickled", reason=ExposureReason.PICKLE)

    def __getstate__(self) -> typing.NoReturn:
        raise ExposureError("a SecretValue cannot be pickled", reason=ExposureReason.PICKLE)

    def __copy__(self) -> SecretValue:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> SecretValue:
        return self

    def __init_subclass__(cls, **kwargs: object) -> typing.NoReturn:
        raise TypeError("SecretValue is final")
