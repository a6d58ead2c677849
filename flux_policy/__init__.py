"""flux_policy — default-deny policy evaluation (pure: stdlib and pydantic only).

Load a policy (TOML file, string or dict; several can be combined), then evaluate
requests with :class:`IndexedEvaluator` (fast) or :class:`ReferenceEvaluator` (the
obviously-correct oracle)::

    policy = load_policy("policy.toml")
    decision = IndexedEvaluator(policy).evaluate(
        Request("user:alice", "fs.read", "workspace/src/a.py", trust="low", now=now)
    )

Guarantee: default deny; any applying deny rule denies, and a deny rule that cannot be
evaluated (missing context attribute, type mismatch, no trust, no time) denies too
(fail closed); otherwise a grant without approval allows; otherwise a grant with
approval yields ``approval_required``. Rule order never matters. Every decision
carries the rules that decided it and the policy digest.

The only IO is reading the policy file a caller names (:func:`load_policy`).
"""

from __future__ import annotations

from flux_policy._decision import (
    Decision,
    Effect,
    EvalErrorReason,
    Request,
    RuleError,
    RuleTrace,
)
from flux_policy._exceptions import PolicyError, PolicyLoadError, PolicyLoadReason
from flux_policy._index import IndexedEvaluator
from flux_policy._load import (
    combine_policies,
    load_policies,
    load_policy,
    load_policy_dict,
    load_policy_string,
)
from flux_policy._policy import (
    Condition,
    ConditionOp,
    Policy,
    Rule,
    RuleKind,
)
from flux_policy._reference import ReferenceEvaluator

__all__ = [
    "Condition",
    "ConditionOp",
    "Decision",
    "Effect",
    "EvalErrorReason",
    "IndexedEvaluator",
    "Policy",
    "PolicyError",
    "PolicyLoadError",
    "PolicyLoadReason",
    "ReferenceEvaluator",
    "Request",
    "Rule",
    "RuleError",
    "RuleKind",
    "RuleTrace",
    "combine_policies",
    "load_policies",
    "load_policy",
    "load_policy_dict",
    "load_policy_string",
]
