"""The indexed evaluator: the one to use in production.

At construction every rule is compiled once: groups flattened into leaf patterns,
patterns compiled (``_glob.py``), trust bounds turned into ranks. Each rule is filed
in a candidate index (``_candidates.py``) under the dimension that narrows it most:
its literal subjects (after group expansion), its literal actions, or per resource
pattern its literal name, literal prefix or a literal segment it requires anywhere.
A request looks up its own subject, action, path prefixes and segments, and checks
only the rules filed under one of them: the cost depends on the depth of the path
and the number of rules that share a key with it, not on the size of the policy.

Decision cache (opt-in, ``cache=N``): when no rule of the policy has a validity window
or a condition, a decision is a function of the request's subject, action, resource,
trust and scopes alone (``now`` and ``context`` are read only by those two checks), so
decisions are kept by exactly those values plus the policy digest, at most *N* of them
(the oldest dropped first). With a window or a condition anywhere in the policy nothing
is cached. The evaluator's policy is immutable and cannot be replaced (``policy`` is
read-only), so a kept decision can never outlive the policy it was made under.

Guarantee: decides exactly as :class:`~flux_policy.ReferenceEvaluator` (checked by a
differential test), cached or not. Not guaranteed: constant time — rules with no literal subject,
action, prefix or segment to tell them apart (``**/*.py{i}``) are offered to every
request, a linear scan of those rules (docs/decisions/0043-policy-index-every-dimension.md).
"""

from __future__ import annotations

import threading
import typing
from dataclasses import dataclass

from flux_policy._candidates import CandidateIndex, IndexedRule
from flux_policy._decision import (
    Decision,
    Effect,
    EvalErrorReason,
    Request,
    RuleError,
    RuleTrace,
    make_decision,
)
from flux_policy._glob import Matcher, compile_pattern, has_wildcard
from flux_policy._pattern import GROUP_PREFIXES, MAX_NAME_LENGTH, has_control, name_problem
from flux_policy._policy import ConditionOp, Policy, Rule, RuleKind

__all__ = ["IndexedEvaluator"]

_Key = tuple[str, str, str, str, "str | None", frozenset[str]]


@dataclass(slots=True)
class _Names:
    """A compiled set of patterns: literals in a set, wildcards as matchers.
    ``everything``: one pattern is ``**``, which every name matches."""

    literals: frozenset[str]
    wild: tuple[Matcher, ...]
    everything: bool = False

    def __call__(self, name: str) -> bool:
        if self.everything or name in self.literals:
            return True
        for m in self.wild:  # noqa: SIM110 - a loop, not any(<genexpr>): no generator per call
            if m(name):
                return True
        return False


@dataclass(slots=True)
class _Compiled:
    rule: Rule
    order: int
    deny: bool
    subjects: _Names
    actions: _Names
    resources: _Names
    min_rank: int | None
    max_rank: int | None
    scopes: frozenset[str]
    kind: str  # rule.kind.value
    # no trust bound, scope, window or condition: _check would find nothing to refuse
    plain: bool


def _flatten(groups: typing.Mapping[str, tuple[str, ...]]) -> dict[str, frozenset[str]]:
    """Each group's leaf patterns, transitively (the loader refused cycles)."""
    done: dict[str, frozenset[str]] = {}

    def leaves(name: str) -> frozenset[str]:
        if name not in done:
            out: set[str] = set()
            for member in groups[name]:
                if member.startswith(GROUP_PREFIXES):
                    out |= leaves(member)
                else:
                    out.add(member)
            done[name] = frozenset(out)
        return done[name]

    for name in groups:
        leaves(name)
    return done


@typing.final
class IndexedEvaluator:
    """Evaluate requests against *policy* through a prefix/action index.

    Guarantee: default deny; any applying deny denies; a deny whose trust, window or
    condition cannot be evaluated applies (fail closed); otherwise a grant without
    approval allows; otherwise a grant with approval yields ``approval_required``. Rule
    order never matters. The resource is normalised first; ``..`` above its start, an
    empty, over-long or control-character name, or a group name denies the request.

    With ``cache=N`` (N > 0), up to N decisions of a policy without windows and
    conditions are kept and returned again for an equal request (module docstring).

    Raises:
        TypeError: *policy* is not a :class:`~flux_policy.Policy`; *cache* not an int.
        ValueError: *cache* negative.
    """

    def __init__(self, policy: Policy, *, cache: int = 0) -> None:
        if not isinstance(policy, Policy):
            raise TypeError("policy must be a Policy")
        if type(cache) is not int:
            raise TypeError("cache must be an int")
        if cache < 0:
            raise ValueError("cache must be >= 0")
        self._policy = policy
        # A decision reads `now` only for a rule with a window and `context` only for a
        # rule with conditions: without either, nothing else of the request matters.
        timeless = not any(
            r.not_before is not None or r.not_after is not None or r.when for r in policy.rules
        )
        self._cache_max = cache if timeless else 0
        self._cache: dict[_Key, Decision] = {}
        self._cache_lock = threading.Lock()
        self._ranks = {name: i for i, name in enumerate(policy.trust_levels)}
        self._leaves = _flatten(policy.groups)
        self._compiled = [self._compile(i, r) for i, r in enumerate(policy.rules)]
        self._index = CandidateIndex(
            [
                IndexedRule(
                    subjects=None if c.subjects.wild else c.subjects.literals,
                    actions=None if c.actions.wild else c.actions.literals,
                    resources=tuple(sorted(self._expand(c.rule.resources))),
                )
                for c in self._compiled
            ]
        )

    @property
    def policy(self) -> Policy:
        """The policy this evaluator decides under (fixed for its lifetime)."""
        return self._policy

    def _expand(self, entries: tuple[str, ...]) -> set[str]:
        out: set[str] = set()
        for entry in entries:
            out |= self._leaves[entry] if entry.startswith(GROUP_PREFIXES) else {entry}
        return out

    def _names(self, entries: tuple[str, ...]) -> _Names:
        patterns = self._expand(entries)
        literals = frozenset(p for p in patterns if not has_wildcard(p))
        wild = tuple(compile_pattern(p) for p in sorted(patterns - literals))
        return _Names(literals, wild, "**" in patterns)

    def _compile(self, order: int, rule: Rule) -> _Compiled:
        return _Compiled(
            rule=rule,
            order=order,
            deny=rule.kind is RuleKind.DENY,
            subjects=self._names(rule.subjects),
            actions=self._names(rule.actions),
            resources=self._names(rule.resources),
            min_rank=None if rule.min_trust is None else self._ranks[rule.min_trust],
            max_rank=None if rule.max_trust is None else self._ranks[rule.max_trust],
            scopes=frozenset(rule.scopes),
            kind=rule.kind.value,
            plain=(
                rule.min_trust is None
                and rule.max_trust is None
                and not rule.scopes
                and rule.not_before is None
                and rule.not_after is None
                and not rule.when
            ),
        )

    def _candidates(self, subject: str, action: str, resource: str) -> list[_Compiled]:
        """The rules whose subject, action and resource all match, in rule order."""
        compiled = self._compiled
        out: list[_Compiled] = []
        for number in sorted(self._index.candidates(subject, action, resource)):
            c = compiled[number]
            if c.actions(action) and c.subjects(subject) and c.resources(resource):
                out.append(c)
        return out

    def _request_errors(self, request: Request) -> tuple[list[RuleError], str]:
        subject, action, original = request.subject, request.action, request.resource
        if (
            # every name_problem below is None exactly when this holds (the control
            # class matches single code points, so it finds one in the joined text iff
            # in one of the names); a str subclass takes the per-name checks
            type(subject) is str
            and type(action) is str
            and type(original) is str
            and 0 < len(subject) <= MAX_NAME_LENGTH
            and 0 < len(action) <= MAX_NAME_LENGTH
            and 0 < len(original) <= MAX_NAME_LENGTH
            and not subject.startswith(GROUP_PREFIXES)
            and not action.startswith(GROUP_PREFIXES)
            and not original.startswith(GROUP_PREFIXES)
            and not has_control(subject + action + original)
        ):
            errors: list[RuleError] = []
        else:
            errors = self._name_errors(request)
        if errors:
            return errors, ""
        return self._normalise(original)

    def _name_errors(self, request: Request) -> list[RuleError]:
        return [
            RuleError(None, name, EvalErrorReason.INVALID_NAME, problem)
            for name, value in (
                ("subject", request.subject),
                ("action", request.action),
                ("resource", request.resource),
            )
            if (problem := name_problem(value)) is not None
        ]

    def _normalise(self, original: str) -> tuple[list[RuleError], str]:
        segments = original.split("/")
        if (
            type(original) is str
            and "" not in segments[1:]
            and "." not in segments
            and ".." not in segments
        ):
            return [], original  # already normal (and checked above)
        parts: list[str] = []
        for part in segments:
            if part == "..":
                if not parts:
                    err = RuleError(
                        None, "resource", EvalErrorReason.RESOURCE_ESCAPES, "climbs above its start"
                    )
                    return [err], ""
                parts.pop()
            elif part and part != ".":
                parts.append(part)
        resource = "/".join(parts)
        if original[:1] == "/":
            resource = "/" + resource
        if not resource:
            return [
                RuleError(None, "resource", EvalErrorReason.INVALID_NAME, "normalises to nothing")
            ], ""
        problem = name_problem(resource)
        if problem is not None:
            return [RuleError(None, "resource", EvalErrorReason.INVALID_NAME, problem)], ""
        return [], resource

    def _check(self, c: _Compiled, req: Request, errors: list[RuleError]) -> bool:
        """Whether every narrowing check holds; appends evaluation errors to *errors*."""
        rule = c.rule
        ok = True
        rank = self._ranks.get(req.trust) if req.trust is not None else None
        for fname, bound, low in (
            ("min_trust", c.min_rank, True),
            ("max_trust", c.max_rank, False),
        ):
            if bound is None:
                continue
            if req.trust is None:
                errors.append(
                    RuleError(rule.id, fname, EvalErrorReason.NO_TRUST, "request has no trust")
                )
            elif rank is None:
                errors.append(
                    RuleError(rule.id, fname, EvalErrorReason.UNKNOWN_TRUST, "unknown trust")
                )
            elif (rank < bound) if low else (rank > bound):
                ok = False
        if not c.scopes <= req.scopes:
            ok = False
        now = req.now
        if rule.not_before is not None:
            if now is None:
                errors.append(
                    RuleError(rule.id, "not_before", EvalErrorReason.NO_TIME, "request has no time")
                )
            elif now < rule.not_before:
                ok = False
        if rule.not_after is not None:
            if now is None:
                errors.append(
                    RuleError(rule.id, "not_after", EvalErrorReason.NO_TIME, "request has no time")
                )
            elif now >= rule.not_after:
                ok = False
        ctx = req.context
        for i, cond in enumerate(rule.when):
            if cond.attr not in ctx:
                errors.append(
                    RuleError(
                        rule.id,
                        f"when[{i}]",
                        EvalErrorReason.MISSING_ATTRIBUTE,
                        f"no context {cond.attr!r}",
                    )
                )
                continue
            value = ctx[cond.attr]
            operand = cond.value
            if cond.op is ConditionOp.IN:
                assert isinstance(operand, tuple)
                expected: type = type(operand[0])
            elif cond.op is ConditionOp.PREFIX:
                expected = str
            else:
                expected = type(operand)
            if type(value) is not expected:
                errors.append(
                    RuleError(
                        rule.id,
                        f"when[{i}]",
                        EvalErrorReason.TYPE_MISMATCH,
                        f"context {cond.attr!r} type",
                    )
                )
                continue
            if cond.op is ConditionOp.EQUALS:
                ok = ok and value == operand
            elif cond.op is ConditionOp.IN:
                assert isinstance(operand, tuple)
                ok = ok and value in operand
            else:
                assert isinstance(value, str) and isinstance(operand, str)
                ok = ok and value.startswith(operand)
        return ok

    def evaluate(self, request: Request, *, explain: bool = False) -> Decision:
        """Decide *request*. Never raises for a valid :class:`Request`.

        With *explain*, the decision's ``trace`` lists every rule: the ones whose
        subject, action and resource match and why each did or did not apply, then the
        others.
        """
        if not isinstance(request, Request):
            raise TypeError("request must be a Request")
        if explain or not self._cache_max:
            return self._evaluate(request, explain)
        key = _cache_key(request, self._policy.digest)
        if key is None:
            return self._evaluate(request, explain)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._evaluate(request, explain)
            with self._cache_lock:
                cache = self._cache
                while len(cache) >= self._cache_max:
                    del cache[next(iter(cache))]  # the oldest kept
                cache[key] = decision
        return decision

    def _evaluate(self, request: Request, explain: bool) -> Decision:
        digest = self._policy.digest
        bad, resource = self._request_errors(request)
        if bad:
            return make_decision(Effect.DENY, (), bad, digest)
        denies: list[str] = []
        grants: list[str] = []
        approvals: list[str] = []
        errors: list[RuleError] = []
        trace: list[RuleTrace] = []
        candidates = self._candidates(request.subject, request.action, resource)
        for c in candidates:
            kind = c.kind
            if c.plain:  # nothing to check, nothing unevaluable: the rule applies
                ok, unevaluable, applies = True, False, True
            else:
                mark = len(errors)
                ok = self._check(c, request, errors)
                unevaluable = len(errors) > mark
                applies = (ok or unevaluable) if c.deny else (ok and not unevaluable)
            if explain:
                why = "applies" if applies else "a trust, scope, window or condition check fails"
                if unevaluable:
                    why = "applies: unevaluable (fail closed)" if applies else "unevaluable"
                trace.append(RuleTrace(c.rule.id, kind, applies, why))
            if not applies:
                continue
            if c.deny:
                denies.append(c.rule.id)
            elif c.rule.requires_approval:
                approvals.append(c.rule.id)
            else:
                grants.append(c.rule.id)
        if explain:
            offered = {c.order for c in candidates}
            trace.extend(
                RuleTrace(c.rule.id, c.kind, False, "target does not match")
                for c in self._compiled
                if c.order not in offered
            )
        if denies:
            return make_decision(Effect.DENY, denies, errors, digest, trace)
        if grants:
            return make_decision(Effect.ALLOW, grants, errors, digest, trace)
        if approvals:
            return make_decision(Effect.APPROVAL_REQUIRED, approvals, errors, digest, trace)
        return make_decision(Effect.DENY, (), errors, digest, trace)


def _cache_key(request: Request, digest: str) -> _Key | None:
    """The values a decision of a timeless policy depends on, or ``None`` when one of
    them is a ``str`` subclass (whose own ``__hash__``/``__eq__`` must not decide what
    is "the same request")."""
    subject, action, resource, trust = (
        request.subject,
        request.action,
        request.resource,
        request.trust,
    )
    scopes = request.scopes
    if not (type(subject) is str and type(action) is str and type(resource) is str):
        return None
    if trust is not None and type(trust) is not str:
        return None
    if scopes and not all(type(s) is str for s in scopes):
        return None
    return (digest, subject, action, resource, trust, scopes)
