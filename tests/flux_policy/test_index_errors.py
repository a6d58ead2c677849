"""The indexed evaluator's errors equal the reference's, field for field.

The decision vectors check each error's rule and reason; here every request of the
vectors is also varied (trust dropped, unknown, time dropped, context emptied or given
the wrong types) and the whole :class:`RuleError` (``field`` and ``detail`` included)
must be the same from both evaluators, and so must the explanation trace, compared as
a sorted list (the two evaluators list the rules in different orders). A mutant that
changes an error's field name or detail in one evaluator fails here.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from flux_policy import (
    Effect,
    EvalErrorReason,
    IndexedEvaluator,
    ReferenceEvaluator,
    Request,
    load_policy_string,
)
from tests.flux_policy.test_vectors import CASES, POLICIES, _request


def _variants(req: Request) -> list[Request]:
    wrong = {k: [v] if not isinstance(v, list) else "x" for k, v in req.context.items()}
    ints = dict.fromkeys(req.context, 7)
    return [
        req,
        dataclasses.replace(req, trust=None),
        dataclasses.replace(req, trust="no-such-trust"),
        dataclasses.replace(req, now=None),
        dataclasses.replace(req, trust=None, now=None),
        dataclasses.replace(req, context={}),
        dataclasses.replace(req, context=wrong),
        dataclasses.replace(req, context=ints),
        dataclasses.replace(req, action=""),
        dataclasses.replace(req, subject="role:dev"),
        dataclasses.replace(req, resource="."),
        dataclasses.replace(req, resource="a/../.."),
        dataclasses.replace(req, resource="a/../role:dev"),  # a group only once normalised
        dataclasses.replace(req, resource="x" * 5000),
    ]


REQUESTS = [
    (f"{c['id']}/{i}", c["policy"], r)
    for c in CASES
    for i, r in enumerate(_variants(_request(c["request"])))
]


def test_the_variations_reach_every_rule_error_reason() -> None:
    reasons: set[Any] = set()
    for _, policy, req in REQUESTS:
        reasons |= {e.reason for e in ReferenceEvaluator(POLICIES[policy]).evaluate(req).errors}
    assert {
        EvalErrorReason.MISSING_ATTRIBUTE,
        EvalErrorReason.TYPE_MISMATCH,
        EvalErrorReason.NO_TRUST,
        EvalErrorReason.UNKNOWN_TRUST,
        EvalErrorReason.NO_TIME,
    } <= reasons


@pytest.mark.parametrize(("rid", "policy", "req"), REQUESTS, ids=[r[0] for r in REQUESTS])
def test_errors_equal_the_reference(rid: str, policy: str, req: Request) -> None:
    ref = ReferenceEvaluator(POLICIES[policy]).evaluate(req, explain=True)
    idx = IndexedEvaluator(POLICIES[policy]).evaluate(req, explain=True)
    assert idx.effect == ref.effect
    assert list(idx.determining_rules) == list(ref.determining_rules)
    assert [e.to_json() for e in idx.errors] == [e.to_json() for e in ref.errors]
    assert all(e.field and e.detail for e in idx.errors)
    assert _trace(idx.to_json()) == _trace(ref.to_json())


def _trace(decision: dict[str, Any]) -> list[tuple[str, ...]]:
    return sorted(tuple(str(v) for v in step.values()) for step in decision.get("trace", []))


TWO_SUBJECTS = """
version = 1
[[grant]]
id = "all"
subjects = ["**"]
actions = ["**"]
resources = ["**"]

[[deny]]
id = "two"
subjects = ["user:a", "user:b"]
actions = ["fs.read", "fs.write"]
resources = ["x/secret", "y/secret"]
"""


@pytest.mark.parametrize("subject", ["user:a", "user:b"])
@pytest.mark.parametrize("action", ["fs.read", "fs.write"])
@pytest.mark.parametrize("resource", ["x/secret", "y/secret"])
def test_every_literal_of_a_rule_applies(subject: str, action: str, resource: str) -> None:
    policy = load_policy_string(TWO_SUBJECTS, source="two")
    req = Request(subject=subject, action=action, resource=resource)
    for evaluator in (ReferenceEvaluator, IndexedEvaluator):
        decision = evaluator(policy).evaluate(req)
        assert decision.effect is Effect.DENY, evaluator
        assert list(decision.determining_rules) == ["two"]
    other = Request(subject="user:c", action=action, resource=resource)
    assert IndexedEvaluator(policy).evaluate(other).effect is Effect.ALLOW  # control


def test_wrong_argument_types_are_named() -> None:
    with pytest.raises(TypeError, match=r"^policy must be a Policy$"):
        IndexedEvaluator("not a policy")  # type: ignore[arg-type]
    policy = load_policy_string(TWO_SUBJECTS, source="two")
    with pytest.raises(TypeError, match=r"^request must be a Request$"):
        IndexedEvaluator(policy).evaluate("not a request")  # type: ignore[arg-type]


ONE_VALUE_IN = """
version = 1
[[grant]]
id = "qa-only"
subjects = ["**"]
actions = ["fs.read"]
resources = ["**"]
when = [{ attr = "env", in = ["qa", "qa"] }]
"""


@pytest.mark.parametrize(("env", "effect"), [("qa", Effect.ALLOW), ("prod", Effect.DENY)])
def test_an_in_list_of_one_value(env: str, effect: Effect) -> None:
    """``["qa", "qa"]`` loads as the one-value tuple ``("qa",)``: its type is read from
    the only element there is."""
    policy = load_policy_string(ONE_VALUE_IN, source="one")
    req = Request(subject="user:a", action="fs.read", resource="f", context={"env": env})
    for evaluator in (ReferenceEvaluator, IndexedEvaluator):
        decision = evaluator(policy).evaluate(req)
        assert (decision.effect, decision.errors) == (effect, ()), evaluator


def test_the_trace_is_only_given_when_asked_for() -> None:
    policy = load_policy_string(TWO_SUBJECTS, source="two")
    req = Request(subject="user:a", action="fs.read", resource="x/secret")
    evaluator = IndexedEvaluator(policy)
    assert evaluator.evaluate(req).trace == ()
    assert "trace" not in evaluator.evaluate(req).to_json()
    assert sorted(t.rule_id for t in evaluator.evaluate(req, explain=True).trace) == ["all", "two"]


CHECKS = """
version = 1
trust_levels = ["low", "high"]

[[grant]]
id = "needs-high"
subjects = ["**"]
actions = ["fs.read"]
resources = ["**"]
min_trust = "high"

[[grant]]
id = "needs-scope"
subjects = ["**"]
actions = ["fs.read"]
resources = ["**"]
scopes = ["repo"]

[[grant]]
id = "not-yet"
subjects = ["**"]
actions = ["fs.read"]
resources = ["**"]
not_before = "2030-01-01T00:00:00Z"
"""


def test_a_failed_check_is_reported_as_not_applied() -> None:
    """Each narrowing check that fails on its own (trust, scope, window) shows in the
    trace as ``applied: false``, a JSON boolean, as in the reference."""
    policy = load_policy_string(CHECKS, source="checks")
    req = Request(
        subject="user:a",
        action="fs.read",
        resource="f",
        trust="low",
        now=datetime(2027, 1, 1, tzinfo=UTC),
    )
    for evaluator in (ReferenceEvaluator, IndexedEvaluator):
        decision = evaluator(policy).evaluate(req, explain=True)
        steps = {t["rule"]: t["applied"] for t in decision.to_json()["trace"]}
        assert steps == {"needs-high": False, "needs-scope": False, "not-yet": False}, evaluator
        assert all(t.applied is False for t in decision.trace), evaluator
