"""Errors raised by :mod:`flux_policy`.

Loading is the only operation that raises: evaluation never raises for a well-typed
request — an unevaluable rule or an unusable request name becomes a *deny* decision
carrying :class:`~flux_policy.RuleError` entries instead (fail closed).

The tree::

    PolicyError                  root of every error this package raises
    └── PolicyLoadError          a policy file, string or dict was refused; carries
                                 ``reason`` (PolicyLoadReason), ``source`` (the file
                                 or label), ``rule`` (rule id or group name, when one
                                 is concerned) and ``field`` (dotted path of the field)

Type errors in arguments of public calls are plain :class:`TypeError` naming the
argument (a programming error, not a policy decision).
"""

from __future__ import annotations

import enum
import typing

__all__ = ["PolicyError", "PolicyLoadError", "PolicyLoadReason"]


class PolicyLoadReason(enum.Enum):
    """Why a policy was refused at load time. Branch on this, not on the message."""

    IO = "io"  # the named file could not be read
    TOO_LARGE = "too_large"  # over _MAX_POLICY_BYTES
    ENCODING = "encoding"  # not UTF-8
    SYNTAX = "syntax"  # not valid TOML
    UNKNOWN_KEY = "unknown_key"
    MISSING_FIELD = "missing_field"
    BAD_TYPE = "bad_type"  # wrong type (no coercion: "1" is not 1)
    BAD_VERSION = "bad_version"
    DUPLICATE_ID = "duplicate_id"
    BAD_ID = "bad_id"
    EMPTY_LIST = "empty_list"
    TOO_MANY = "too_many"  # a list or table over its bound
    INVALID_PATTERN = "invalid_pattern"
    UNKNOWN_GROUP = "unknown_group"
    BAD_GROUP_NAME = "bad_group_name"
    GROUP_CYCLE = "group_cycle"
    DUPLICATE_GROUP = "duplicate_group"  # combined files define one group differently
    UNKNOWN_TRUST_LEVEL = "unknown_trust_level"
    BAD_TRUST_LEVELS = "bad_trust_levels"
    TRUST_MISMATCH = "trust_mismatch"  # combined files declare different orders
    BAD_TIMESTAMP = "bad_timestamp"
    EMPTY_WINDOW = "empty_window"  # not_before >= not_after
    BAD_CONDITION = "bad_condition"
    BAD_SCOPE = "bad_scope"


class PolicyError(Exception):
    """Root of every error raised by :mod:`flux_policy`."""


@typing.final
class PolicyLoadError(PolicyError, ValueError):
    """A policy was refused at load time; nothing of it is usable.

    Attributes:
        reason: why (a :class:`PolicyLoadReason`).
        source: the file path or caller-given label of the policy text.
        rule: the rule id (or group name) concerned, ``None`` when none is.
        field: dotted path of the offending field (``"grant[0].resources[1]"``),
            ``None`` for whole-document errors.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: PolicyLoadReason,
        source: str,
        rule: str | None = None,
        field: str | None = None,
    ) -> None:
        where = []
        if rule is not None:
            where.append(f"rule {rule!r}")
        if field is not None:
            where.append(f"field {field}")
        suffix = f" ({', '.join(where)})" if where else ""
        super().__init__(f"{source}: {message}{suffix}")
        self.reason = reason
        self.source = source
        self.rule = rule
        self.field = field

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (str(self), dict(self.__dict__)))

    def __repr__(self) -> str:
        return (
            f"PolicyLoadError(reason={self.reason.value!r}, source={self.source!r}, "
            f"rule={self.rule!r}, field={self.field!r})"
        )


def _rebuild(message: str, state: dict[str, object]) -> PolicyLoadError:
    err = PolicyLoadError.__new__(PolicyLoadError)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err
