"""The plain, validated values a policy loads into.

A :class:`Policy` is immutable and already validated: every pattern is valid, every
group reference names a declared group, groups are acyclic, trust names belong to the
order. Evaluators may rely on all of that. Lists whose order carries no meaning
(subjects, scopes, group members, rules) are kept sorted so equal policies compare
equal whatever order their files used.
"""

from __future__ import annotations

import datetime as dt
import enum
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_TRUST_LEVELS",
    "Condition",
    "ConditionOp",
    "Policy",
    "Rule",
    "RuleKind",
]

DEFAULT_TRUST_LEVELS: tuple[str, ...] = ("untrusted", "low", "medium", "high", "system")


class RuleKind(enum.Enum):
    """Whether a rule grants or denies."""

    GRANT = "grant"
    DENY = "deny"


class ConditionOp(enum.Enum):
    """The three typed condition operators (no expression language, no ``eval``)."""

    EQUALS = "equals"  # context value has the same type and is equal
    IN = "in"  # context value has the members' type and is one of them
    PREFIX = "prefix"  # context value is a string starting with the operand


@typing.final
@dataclass(frozen=True, slots=True)
class Condition:
    """``context[attr] <op> value``; *value* is a tuple for ``IN``.

    Types are never coerced: ``1`` does not equal ``"1"`` nor ``true``; a mismatch is an
    evaluation error (the rule is unevaluable), not ``False``.
    """

    attr: str
    op: ConditionOp
    value: bool | int | str | tuple[bool | int | str, ...]


@typing.final
@dataclass(frozen=True, slots=True)
class Rule:
    """One grant or deny rule, validated.

    ``subjects``, ``actions`` and ``resources`` hold patterns or group references as
    written (sorted, deduplicated). ``not_before`` is inclusive, ``not_after``
    exclusive; both are timezone-aware UTC datetimes.
    """

    id: str
    kind: RuleKind
    subjects: tuple[str, ...]
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    min_trust: str | None = None
    max_trust: str | None = None
    scopes: tuple[str, ...] = ()
    requires_approval: bool = False
    not_before: dt.datetime | None = None
    not_after: dt.datetime | None = None
    when: tuple[Condition, ...] = ()


@typing.final
@dataclass(frozen=True, slots=True)
class Policy:
    """A validated policy: trust order, groups and rules, with its digest.

    Guarantee: ``digest`` is ``"sha256:" + hex`` over the canonical form
    (``_canonical.py``), so two policies with the same meaning — whatever the order of
    keys, rules or list members in their sources — have the same digest.
    Not guaranteed: two policies with different digests may still decide identically.

    Build one with :func:`load_policy`, :func:`load_policy_string`,
    :func:`load_policy_dict` or :func:`combine_policies`.
    """

    version: int
    trust_levels: tuple[str, ...]
    groups: Mapping[str, tuple[str, ...]]
    rules: tuple[Rule, ...]
    digest: str = field(default="", compare=False)

    @property
    def grants(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.kind is RuleKind.GRANT)

    @property
    def denies(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.kind is RuleKind.DENY)

    def rule(self, rule_id: str) -> Rule:
        """The rule named *rule_id*. Raises KeyError when there is none."""
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)
