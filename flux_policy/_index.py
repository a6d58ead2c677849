"""The indexed evaluator: the one to use in production.

At construction every rule is compiled once: groups flattened into leaf patterns,
patterns compiled (``_glob.py``), trust bounds turned into ranks. Rules are indexed
by the *literal prefix* of each resource pattern — the whole segments before the first
segment holding a wildcard — in a segment trie (fully literal resources go in a dict),
and within each trie node by literal action (wildcard actions in a short list).
A request walks the trie along its own segments, so it only ever looks at rules that
could match its resource and action: the cost depends on the depth of the path and
the number of rules that share its prefix, not on the size of the policy.

Guarantee: decides exactly as :class:`~flux_policy.ReferenceEvaluator` (checked by a
differential test). Not guaranteed: constant time — a policy whose rules all share one
prefix and use wildcard actions degrades towards a linear scan of those rules.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field

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
from flux_policy._pattern import GROUP_PREFIXES, name_problem
from flux_policy._policy import ConditionOp, Policy, Rule, RuleKind

__all__ = ["IndexedEvaluator"]


@dataclass(slots=True)
class _Names:
    """A compiled set of patterns: literals in a set, wildcards as matchers."""

    literals: frozenset[str]
    wild: tuple[Matcher, ...]

    def __call__(self, name: str) -> bool:
        if name in self.literals:
            return True
        return any(m(name) for m in self.wild)


@dataclass(slots=True)
class _Compiled:
    rule: Rule
    order: int
    deny: bool
    subjects: _Names
    actions: _Names
    min_rank: int | None
    max_rank: int | None
    scopes: frozenset[str]


@dataclass(slots=True)
class _Bucket:
    by_action: dict[str, list[tuple[_Compiled, Matcher]]] = field(default_factory=dict)
    wild_action: list[tuple[_Compiled, Matcher]] = field(default_factory=list)


@dataclass(slots=True)
class _Node:
    bucket: _Bucket = field(default_factory=_Bucket)
    children: dict[str, _Node] = field(default_factory=dict)


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

    Raises:
        TypeError: *policy* is not a :class:`~flux_policy.Policy`.
    """

    def __init__(self, policy: Policy) -> None:
        if not isinstance(policy, Policy):
            raise TypeError("policy must be a Policy")
        self.policy = policy
        self._ranks = {name: i for i, name in enumerate(policy.trust_levels)}
        self._leaves = _flatten(policy.groups)
        self._root = _Node()
        self._exact: dict[str, _Bucket] = {}
        self._compiled = [self._compile(i, r) for i, r in enumerate(policy.rules)]
        for crule in self._compiled:
            self._insert(crule)

    def _expand(self, entries: tuple[str, ...]) -> set[str]:
        out: set[str] = set()
        for entry in entries:
            out |= self._leaves[entry] if entry.startswith(GROUP_PREFIXES) else {entry}
        return out

    def _names(self, entries: tuple[str, ...]) -> _Names:
        patterns = self._expand(entries)
        literals = frozenset(p for p in patterns if not has_wildcard(p))
        wild = tuple(compile_pattern(p) for p in sorted(patterns - literals))
        return _Names(literals, wild)

    def _compile(self, order: int, rule: Rule) -> _Compiled:
        return _Compiled(
            rule=rule,
            order=order,
            deny=rule.kind is RuleKind.DENY,
            subjects=self._names(rule.subjects),
            actions=self._names(rule.actions),
            min_rank=None if rule.min_trust is None else self._ranks[rule.min_trust],
            max_rank=None if rule.max_trust is None else self._ranks[rule.max_trust],
            scopes=frozenset(rule.scopes),
        )

    def _insert(self, crule: _Compiled) -> None:
        for pattern in sorted(self._expand(crule.rule.resources)):
            if not has_wildcard(pattern):
                bucket = self._exact.setdefault(pattern, _Bucket())
            else:
                node = self._root
                for segment in pattern.split("/"):
                    if "*" in segment:
                        break
                    node = node.children.setdefault(segment, _Node())
                bucket = node.bucket
            matcher = compile_pattern(pattern)
            entry = (crule, matcher)
            for action in crule.actions.literals:
                bucket.by_action.setdefault(action, []).append(entry)
            if crule.actions.wild:
                bucket.wild_action.append(entry)

    def _candidates(self, action: str, resource: str) -> list[_Compiled]:
        buckets = [self._root.bucket]
        node: _Node | None = self._root
        for segment in resource.split("/"):
            node = node.children.get(segment) if node is not None else None
            if node is None:
                break
            buckets.append(node.bucket)
        exact = self._exact.get(resource)
        if exact is not None:
            buckets.append(exact)
        found: dict[int, _Compiled] = {}
        for bucket in buckets:
            for crule, matcher in bucket.by_action.get(action, ()):
                if crule.order not in found and matcher(resource):
                    found[crule.order] = crule
            for crule, matcher in bucket.wild_action:
                if crule.order not in found and crule.actions(action) and matcher(resource):
                    found[crule.order] = crule
        return [found[k] for k in sorted(found)]

    def _request_errors(self, request: Request) -> tuple[list[RuleError], str]:
        errors = [
            RuleError(None, name, EvalErrorReason.INVALID_NAME, problem)
            for name, value in (
                ("subject", request.subject),
                ("action", request.action),
                ("resource", request.resource),
            )
            if (problem := name_problem(value)) is not None
        ]
        if errors:
            return errors, ""
        parts: list[str] = []
        for part in request.resource.split("/"):
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
        if request.resource[:1] == "/":
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

        With *explain*, the decision's ``trace`` lists every rule: the ones the index
        offered and why each did or did not apply, then the ones it ruled out.
        """
        if not isinstance(request, Request):
            raise TypeError("request must be a Request")
        digest = self.policy.digest
        bad, resource = self._request_errors(request)
        if bad:
            return make_decision(Effect.DENY, (), bad, digest)
        denies: list[str] = []
        grants: list[str] = []
        approvals: list[str] = []
        errors: list[RuleError] = []
        trace: list[RuleTrace] = []
        candidates = self._candidates(request.action, resource)
        for c in candidates:
            kind = c.rule.kind.value
            if not c.subjects(request.subject):
                if explain:
                    trace.append(RuleTrace(c.rule.id, kind, False, "subject does not match"))
                continue
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
                RuleTrace(c.rule.id, c.rule.kind.value, False, "action or resource does not match")
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
