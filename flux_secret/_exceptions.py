"""Errors raised by :mod:`flux_secret`.

Every error raised by a public call is a :class:`SecretError` (or a ``TypeError`` for an
argument of the wrong type, naming the argument). Each error carries a ``reason`` enum
member and, where it helps, the caller-chosen secret ``name`` or the reference
``kind``. **No error ever contains a secret value** — not in its message, not in its
fields, not in its ``args``: messages are fixed text, and a resolution failure never
chains the underlying exception (whose message might quote file content).

The tree::

    SecretError                    (reason: an enum member) the root of this package
    ├── SecretRefError             (reason: RefReason) a reference string is malformed
    ├── ResolutionError            (reason: ResolutionReason) a reference did not resolve
    ├── RegistrationError          (reason: RegistrationReason) the redactor refused a
    │                              value, a name or a setting
    ├── RedactionError             (reason: RedactionReason) an object or a stream could
    │                              not be redacted
    └── ExposureError              (reason: ExposureReason) an operation would expose a
                                   SecretValue (pickling, copying to bytes, ...)
"""

from __future__ import annotations

import enum
import typing

__all__ = [
    "ExposureError",
    "ExposureReason",
    "RedactionError",
    "RedactionReason",
    "RefReason",
    "RegistrationError",
    "RegistrationReason",
    "ResolutionError",
    "ResolutionReason",
    "SecretError",
    "SecretRefError",
]


class RefReason(enum.Enum):
    """Why a secret reference string was refused."""

    NOT_A_STRING = "not_a_string"
    EMPTY = "empty"
    TOO_LONG = "too_long"
    SCHEME = "scheme"  # does not start with ``secret:``
    KIND = "kind"  # not ``env/`` or ``file/``
    BAD_KEY = "bad_key"  # env key is not ``[A-Za-z_][A-Za-z0-9_]*``
    BAD_PATH = "bad_path"  # empty, ``.``/``..`` or empty component, backslash
    CONTROL_BYTE = "control_byte"


class ResolutionReason(enum.Enum):
    """Why a secret reference did not resolve to a value."""

    NO_RESOLVER = "no_resolver"  # the caller passed no resolver for this kind
    NOT_FOUND = "not_found"
    READ_FAILED = "read_failed"  # the caller's file reader raised
    BAD_VALUE = "bad_value"  # the resolver returned something that is not str/bytes
    EMPTY = "empty"
    REFUSED_BY_REDACTOR = "refused_by_redactor"  # could not be registered: not returned


class RegistrationReason(enum.Enum):
    """Why the redactor refused a value, a name or a setting."""

    TOO_SHORT = "too_short"  # below the minimum length: masking would over-mask
    TOO_LONG = "too_long"  # over _MAX_SECRET_BYTES: would unbound the stream hold-back
    MIN_LENGTH = "min_length"  # a configured minimum below the floor of 6 bytes
    BAD_NAME = "bad_name"  # empty, too long or control characters
    NAME_CONTAINS_SECRET = "name_contains_secret"  # noqa: S105 - a reason, not a password
    UNKNOWN_NAME = "unknown_name"
    TOO_MANY = "too_many"  # over _MAX_SECRETS registered values
    BAD_SETTING = "bad_setting"  # a marker or template that cannot be used


class RedactionReason(enum.Enum):
    """Why an object or a stream could not be redacted."""

    TOO_DEEP = "too_deep"  # nesting over _MAX_DEPTH (or a reference cycle)
    UNSUPPORTED_TYPE = "unsupported_type"  # not str/bytes/number/None/dict/list/tuple/set
    CLOSED = "closed"  # feed after flush
    MIXED_TYPES = "mixed_types"  # a str chunk on a bytes stream or the reverse


class ExposureReason(enum.Enum):
    """Why an operation on a SecretValue was refused."""

    PICKLE = "pickle"
    COPY = "copy"


class SecretError(Exception):
    """Root of every error raised by :mod:`flux_secret`; never contains a secret value."""

    reason: enum.Enum

    def __init__(self, message: str, *, reason: enum.Enum, name: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.name = name

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take other constructor arguments: rebuild from the state instead,
        # so every error crosses a process boundary (a process pool) as it was.
        return (_rebuild, (type(self), str(self), dict(self.__dict__)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!s}, name={self.name!r})"


@typing.final
class SecretRefError(SecretError):
    """A reference string is malformed (the string is not a secret; it is not kept)."""

    reason: RefReason

    def __init__(self, message: str, *, reason: RefReason) -> None:
        super().__init__(message, reason=reason)


@typing.final
class ResolutionError(SecretError):
    """A well-formed reference did not resolve; ``kind`` is ``"env"`` or ``"file"``."""

    reason: ResolutionReason

    def __init__(self, message: str, *, reason: ResolutionReason, kind: str) -> None:
        super().__init__(message, reason=reason)
        self.kind = kind


@typing.final
class RegistrationError(SecretError):
    """The redactor refused a value, a name or a setting."""

    reason: RegistrationReason

    def __init__(
        self, message: str, *, reason: RegistrationReason, name: str | None = None
    ) -> None:
        super().__init__(message, reason=reason, name=name)


@typing.final
class RedactionError(SecretError):
    """An object or a stream could not be redacted (nothing partial is returned)."""

    reason: RedactionReason

    def __init__(self, message: str, *, reason: RedactionReason) -> None:
        super().__init__(message, reason=reason)


@typing.final
class ExposureError(SecretError, TypeError):
    """An operation would expose a SecretValue (a ``TypeError``, as pickle expects)."""

    reason: ExposureReason

    def __init__(self, message: str, *, reason: ExposureReason) -> None:
        super().__init__(message, reason=reason)


def _rebuild(cls: type[SecretError], message: str, state: dict[str, object]) -> SecretError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err
