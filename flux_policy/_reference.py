"""The reference evaluator: small, slow, obviously correct.

It walks every rule for every request and matches patterns with its own dynamic
programme written straight from the pattern definition (``_pattern.py``), resolves
groups by walking the group graph at request time, and normalises the resource with
its own stack. It shares no matching, grouping or normalising code with the indexed
evaluator, so the differential test between the two can see a bug in either.

Use it as the oracle in tests and for ``explain``-style audits of small policies; use
:class:`~flux_policy.IndexedEvaluator` everywhere else.
"""

from __future__ import annotations

import typing

from flux_policy._decision import (
    Decision,
    Effect,
    EvalErrorReason,
    Request,
    RuleError,
    RuleTrace,
    make_decision,
)
from flux_policy._pattern import is_group_ref, name_problem
from flux_policy._policy import Condition, ConditionOp, Policy, Rule, RuleKind

__all__ = ["ReferenceEvaluator"]


def _tokens(pattern: str) -> list[str]:
    """Split a pattern into "/**/", "**", "*" and single literal characters."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("/**/", i):
            out.append("/**/")
            i += 4
        elif pattern.startswith("**", i):
            out.append("**")
            i += 2
        elif pattern[i] == "*":
            out.append("*")
            i += 1
        else:
            out.append(pattern[i])
            i += 1
    return out


def reference_match(pattern: str, name: str) -> bool:
    """Does *pattern* match all of *name*? A table: ok[j] = the tokens after this one
    match name[j:]. Filled from the last token back to the first."""
    n = len(name)
    ok = [j == n for j in range(n + 1)]
    for tok in reversed(_tokens(pattern)):
        new = [False] * (n + 1)
        for j in range(n + 1):
            if tok == "**":
                new[j] = any(ok[k] for k in range(j, n + 1))
            elif tok == "*":
                k = j
                while True:
                    if ok[k]:
                        new[j] = True
                        break
                    if k == n or name[k] == "/":
                        break
                    k += 1
            elif tok == "/**/":
                # a single "/", or "/" + anything + "/"
                if j < n and name[j] == "/":
                    new[j] = ok[j + 1] or any(name[k] == "/" and ok[k + 1] for k in range(j + 1, n))
            else:
                new[j] = j < n and name[j] == tok and ok[j + 1]
        ok = new
    return ok[0]


def _normalise(resource: str) -> str | None:
    """Lexically normalise a path; ``None`` when ``..`` climbs above its start."""
    stack: list[str] = []
    for part in resource.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return None
            stack.pop()
        else:
            stack.append(part)
    return ("/" if resource.startswith("/") else "") + "/".join(stack)


@typing.final
class ReferenceEvaluator:
    """Evaluate requests against *policy* by checking every rule (O(rules) each).

    Guarantee: the same decisions as :class:`~flux_policy.IndexedEvaluator` (that is
    what the differential test checks); default deny; deny overrides; an unevaluable
    deny denies. Not guaranteed: speed.
    """

    def __init__(self, policy: Policy) -> None:
        if not isinstance(policy, Policy):
            raise TypeError("policy must be a Policy")
        self.policy = policy

    def _in(self, entry: str, name: str) -> bool:
        if is_group_ref(entry):
            return any(self._in(member, name) for member in self.policy.groups[entry])
        return reference_match(entry, name)

    def _matches(self, entries: tuple[str, ...], name: str) -> bool:
        return any(self._in(e, name) for e in entries)

    def _checks(self, rule: Rule, req: Request) -> tuple[bool, list[RuleError]]:
        """(all narrowing checks hold, errors) — trust, scopes, window, conditions."""
        holds = True
        errors: list[RuleError] = []
        levels = self.policy.trust_levels
        for field, bound in (("min_trust", rule.min_trust), ("max_trust", rule.max_trust)):
            if bound is None:
                continue
            if req.trust is None:
                errors.append(
                    RuleError(rule.id, field, EvalErrorReason.NO_TRUST, "request has no trust")
                )
            elif req.trust not in levels:
                errors.append(
                    RuleError(rule.id, field, EvalErrorReason.UNKNOWN_TRUST, "unknown trust")
                )
            else:
                rank, limit = levels.index(req.trust), levels.index(bound)
                if (field == "min_trust" and rank < limit) or (
                    field == "max_trust" and rank > limit
                ):
                    holds = False
        for scope in rule.scopes:
            if scope not in req.scopes:
                holds = False
        for field, moment in (("not_before", rule.not_before), ("not_after", rule.not_after)):
            if moment is None:
                continue
            if req.now is None:
                errors.append(
                    RuleError(rule.id, field, EvalErrorReason.NO_TIME, "request has no time")
                )
            else:
                early = field == "not_before" and req.now < moment
                late = field == "not_after" and req.now >= moment
                if early or late:
                    holds = False
        for i, cond in enumerate(rule.when):
            result = self._condition(cond, req, rule.id, f"when[{i}]")
            if isinstance(result, RuleError):
                errors.append(result)
            elif not result:
                holds = False
        return holds, errors

    def _condition(
        self, cond: Condition, req: Request, rule_id: str, field: str
    ) -> bool | RuleError:
        if cond.attr not in req.context:
            return RuleError(
                rule_id, field, EvalErrorReason.MISSING_ATTRIBUTE, f"no context {cond.attr!r}"
            )
        value = req.context[cond.attr]
        mismatch = RuleError(
            rule_id, field, EvalErrorReason.TYPE_MISMATCH, f"context {cond.attr!r} type"
        )
        if cond.op is ConditionOp.EQUALS:
            if type(value) is not type(cond.value):
                return mismatch
            return value == cond.value
        if cond.op is ConditionOp.IN:
            assert isinstance(cond.value, tuple)
            if type(value) is not type(cond.value[0]):
                return mismatch
            return value in cond.value
        if type(value) is not str:  # exact type, as for equals and in: no str subclass
            return mismatch
        assert isinstance(cond.value, str)
        return value.startswith(cond.value)

    def evaluate(self, request: Request, *, explain: bool = False) -> Decision:
        """Decide *request*. Never raises for a valid :class:`Request`."""
        if not isinstance(request, Request):
            raise TypeError("request must be a Request")
        digest = self.policy.digest
        bad: list[RuleError] = []
        for field in ("subject", "action", "resource"):
            problem = name_problem(getattr(request, field))
            if problem is not None:
                bad.append(RuleError(None, field, EvalErrorReason.INVALID_NAME, problem))
        resource = ""
        if not bad:
            normal = _normalise(request.resource)
            if normal is None:
                bad.append(
                    RuleError(
                        None, "resource", EvalErrorReason.RESOURCE_ESCAPES, "climbs above its start"
                    )
                )
            elif normal == "" or name_problem(normal) is not None:
                detail = name_problem(normal) if normal else "normalises to nothing"
                bad.append(RuleError(None, "resource", EvalErrorReason.INVALID_NAME, str(detail)))
            resource = normal or ""
        if bad:
            return make_decision(Effect.DENY, (), bad, digest)
        denies: list[str] = []
        grants: list[str] = []
        approvals: list[str] = []
        errors: list[RuleError] = []
        trace: list[RuleTrace] = []
        for rule in self.policy.rules:
            target = (
                self._matches(rule.subjects, request.subject)
                and self._matches(rule.actions, request.action)
                and self._matches(rule.resources, resource)
            )
            if not target:
                trace.append(RuleTrace(rule.id, rule.kind.value, False, "target does not match"))
                continue
            holds, errs = self._checks(rule, request)
            errors.extend(errs)
            # a deny that cannot be evaluated applies; a grant that cannot does not
            deny = rule.kind is RuleKind.DENY
            applies = (holds or bool(errs)) if deny else (holds and not errs)
            why = "applies" if applies else "a trust, scope, window or condition check fails"
            if errs:
                why = "applies: unevaluable (fail closed)" if applies else "unevaluable"
            trace.append(RuleTrace(rule.id, rule.kind.value, applies, why))
            if not applies:
                continue
            if rule.kind is RuleKind.DENY:
                denies.append(rule.id)
            elif rule.requires_approval:
                approvals.append(rule.id)
            else:
                grants.append(rule.id)
        shown = trace if explain else []
        if denies:
            return make_decision(Effect.DENY, denies, errors, digest, shown)
        if grants:
            return make_decision(Effect.ALLOW, grants, errors, digest, shown)
        if approvals:
            return make_decision(Effect.APPROVAL_REQUIRED, approvals, errors, digest, shown)
        return make_decision(Effect.DENY, (), errors, digest, shown)
