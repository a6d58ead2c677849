"""Requests, decisions and evaluation errors: the values both evaluators exchange.

Nothing here matches patterns or evaluates rules (each evaluator does that with its own
code); :func:`make_decision` only assembles a :class:`Decision` and words its reasons,
deterministically from its other fields, so two evaluators that agree on the effect,
the determining rules and the errors produce equal decisions.
"""

from __future__ import annotations

import datetime as dt
import enum
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Decision",
    "Effect",
    "EvalErrorReason",
    "Request",
    "RuleError",
    "RuleTrace",
    "make_decision",
]


class Effect(enum.Enum):
    """The outcome of an evaluation."""

    ALLOW = "allow"
    DENY = "deny"
    APPROVAL_REQUIRED = "approval_required"


class EvalErrorReason(enum.Enum):
    """Why a rule (or the request) could not be evaluated."""

    MISSING_ATTRIBUTE = "missing_attribute"  # a condition's attr is not in the context
    TYPE_MISMATCH = "type_mismatch"  # context value of another type than the operand
    NO_TRUST = "no_trust"  # the rule needs a trust level; the request has none
    UNKNOWN_TRUST = "unknown_trust"  # the request's trust is not in the policy's order
    NO_TIME = "no_time"  # the rule has a validity window; the request has no `now`
    INVALID_NAME = "invalid_name"  # request name empty, too long, control byte, a group
    RESOURCE_ESCAPES = "resource_escapes"  # the resource normalises above its start


@typing.final
@dataclass(frozen=True, slots=True)
class RuleError:
    """One evaluation error: *rule_id* is ``None`` for an error of the request itself."""

    rule_id: str | None
    field: str
    reason: EvalErrorReason
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule_id,
            "field": self.field,
            "reason": self.reason.value,
            "detail": self.detail,
        }


@typing.final
@dataclass(frozen=True, slots=True)
class RuleTrace:
    """For ``explain``: whether one considered rule applied, and why (human text)."""

    rule_id: str
    kind: str
    applied: bool
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "kind": self.kind, "applied": self.applied, "why": self.why}


_NO_CONTEXT: Mapping[str, object] = types.MappingProxyType({})


@typing.final
@dataclass(frozen=True, slots=True, init=False)
class Request:
    """What is asked: may *subject* do *action* on *resource*, in this context.

    ``now`` is explicit: a rule with a validity window cannot be evaluated without it
    (a grant then does not apply; a deny does). ``trust`` is a name from the policy's
    trust order, or ``None``. ``context`` values are JSON-like values compared by type;
    the request keeps a read-only copy.

    Raises:
        TypeError: an argument of the wrong type (named in the message).
        ValueError: ``now`` without a timezone.
    """

    subject: str
    action: str
    resource: str
    trust: str | None
    scopes: frozenset[str]
    context: Mapping[str, object]
    now: dt.datetime | None

    def __init__(  # noqa: PLR0917 - the dataclass's own positional signature
        self,
        subject: str,
        action: str,
        resource: str,
        trust: str | None = None,
        scopes: frozenset[str] = frozenset(),
        context: Mapping[str, object] = _NO_CONTEXT,
        now: dt.datetime | None = None,
    ) -> None:
        # Checked, then stored through the slots directly: a frozen dataclass's own
        # __init__ pays an object.__setattr__ per field (requests are made per call).
        if not (type(subject) is str and type(action) is str and type(resource) is str):
            for name, value in (("subject", subject), ("action", action), ("resource", resource)):
                if not isinstance(value, str):
                    raise TypeError(f"{name} must be a str")
        if trust is not None and not isinstance(trust, str):
            raise TypeError("trust must be a str or None")
        if not (type(scopes) is frozenset and not scopes):  # the default: nothing to check
            given: object = scopes
            if isinstance(given, str) or not isinstance(given, Iterable):
                raise TypeError("scopes must be an iterable of str, not str")
            scopes = frozenset(given)
            if not all(isinstance(s, str) for s in scopes):
                raise TypeError("scopes must be an iterable of str")
        if context is not _NO_CONTEXT:
            if type(context) is dict and not context:
                context = _NO_CONTEXT
            else:
                if not isinstance(context, Mapping) or not all(isinstance(k, str) for k in context):
                    raise TypeError("context must be a mapping with str keys")
                context = types.MappingProxyType(dict(context))
        if now is not None:
            if not isinstance(now, dt.datetime):
                raise TypeError("now must be a datetime or None")
            if now.tzinfo is None or now.utcoffset() is None:
                raise ValueError("now must be timezone-aware")
        _SET_SUBJECT(self, subject)
        _SET_ACTION(self, action)
        _SET_RESOURCE(self, resource)
        _SET_TRUST(self, trust)
        _SET_SCOPES(self, scopes)
        _SET_CONTEXT(self, context)
        _SET_NOW(self, now)


(
    _SET_SUBJECT,
    _SET_ACTION,
    _SET_RESOURCE,
    _SET_TRUST,
    _SET_SCOPES,
    _SET_CONTEXT,
    _SET_NOW,
) = (getattr(Request, name).__set__ for name in Request.__slots__)
assert Request.__slots__ == (
    "subject", "action", "resource", "trust", "scopes", "context", "now"
)  # fmt: skip


@typing.final
@dataclass(frozen=True, slots=True)
class Decision:
    """The result of evaluating a request against a policy.

    ``determining_rules``: the deny rules that applied (for a deny), else the grants
    without approval that applied (allow), else the grants with approval that applied
    (approval_required); empty for a default deny. ``errors``: every evaluation error
    of a rule whose subject, action and resource matched, and of the request itself.
    ``trace`` (only with ``explain``) is not part of equality.
    """

    effect: Effect
    determining_rules: tuple[str, ...]
    reasons: tuple[str, ...]
    errors: tuple[RuleError, ...]
    policy_digest: str
    trace: tuple[RuleTrace, ...] = field(default=(), compare=False)

    @property
    def allowed(self) -> bool:
        return self.effect is Effect.ALLOW

    def to_json(self) -> dict[str, Any]:
        """The decision as a JSON-ready dict (``trace`` included only when present)."""
        out: dict[str, Any] = {
            "effect": self.effect.value,
            "determining_rules": list(self.determining_rules),
            "reasons": list(self.reasons),
            "errors": [e.to_json() for e in self.errors],
            "policy_digest": self.policy_digest,
        }
        if self.trace:
            out["trace"] = [t.to_json() for t in self.trace]
        return out


def make_decision(
    effect: Effect,
    determining: Iterable[str],
    errors: Iterable[RuleError],
    digest: str,
    trace: Iterable[RuleTrace] = (),
) -> Decision:
    """Assemble a decision: sorts rules and errors, words the reasons."""
    rules = tuple(sorted(set(determining)))
    errs: tuple[RuleError, ...] = ()
    erring: set[str | None] = set()
    reasons: list[str] = []
    request_errors: list[RuleError] = []
    if errors:  # (an empty list or tuple: nothing to sort, word or mark)
        errs = tuple(sorted(set(errors), key=_error_key))
        erring = {e.rule_id for e in errs}
        request_errors = [e for e in errs if e.rule_id is None]
    for e in request_errors:
        reasons.append(f"request refused: {e.field} {e.detail}")
    if effect is Effect.DENY and not rules and not request_errors:
        reasons.append("no grant applies (default deny)")
    for rid in rules:
        if effect is Effect.DENY and rid in erring:
            reasons.append(f"deny rule {rid!r} could not be evaluated: denied (fail closed)")
        elif effect is Effect.DENY:
            reasons.append(f"denied by rule {rid!r}")
        elif effect is Effect.ALLOW:
            reasons.append(f"allowed by rule {rid!r}")
        else:
            reasons.append(f"approval required by rule {rid!r}")
    return Decision(effect, rules, tuple(reasons), errs, digest, tuple(trace))


def _error_key(e: RuleError) -> tuple[str, str, str, str]:
    return (e.rule_id or "", e.field, e.reason.value, e.detail)
