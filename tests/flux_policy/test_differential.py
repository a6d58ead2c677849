"""Differential and property tests over generated policies and requests."""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from flux_policy import (
    Decision,
    Effect,
    EvalErrorReason,
    IndexedEvaluator,
    Policy,
    PolicyLoadError,
    ReferenceEvaluator,
    Request,
    load_policy_dict,
)

from ._gen import (
    policy_docs,
    requests,
    resource_names,
    rules,
    shaped_policy_docs,
    shaped_requests,
)


def _load(doc: dict[str, Any]) -> Policy:
    try:
        return load_policy_dict(doc)
    except PolicyLoadError:
        assume(False)
        raise


@given(policy_docs(), st.lists(requests(), min_size=1, max_size=6))
def test_reference_and_indexed_decide_identically(doc: dict[str, Any], reqs: list[Request]) -> None:
    policy = _load(doc)
    ref, idx = ReferenceEvaluator(policy), IndexedEvaluator(policy)
    for req in reqs:
        a, b = ref.evaluate(req), idx.evaluate(req)
        assert a == b, (req, a, b)
        # explain never changes the decision
        assert idx.evaluate(req, explain=True) == b


@given(shaped_policy_docs(), st.lists(shaped_requests(), min_size=1, max_size=8))
def test_reference_and_indexed_decide_identically_on_indexed_shapes(
    doc: dict[str, Any], reqs: list[Request]
) -> None:
    """Policies whose rules the index files by subject, group-expanded subject, action,
    prefix or a segment required after a wildcard, and requests that hit them."""
    policy = _load(doc)
    ref, idx = ReferenceEvaluator(policy), IndexedEvaluator(policy)
    for req in reqs:
        a, b = ref.evaluate(req), idx.evaluate(req)
        assert a == b, (req, a, b)
        traced = idx.evaluate(req, explain=True)
        assert traced == b
        if all(e.rule_id is not None for e in b.errors):  # a valid request: every rule
            assert sorted(t.rule_id for t in traced.trace) == sorted(r.id for r in policy.rules)


@given(
    policy_docs(), st.lists(requests(), min_size=1, max_size=4), st.randoms(use_true_random=False)
)
def test_rule_order_never_matters(doc: dict[str, Any], reqs: list[Request], rng: Any) -> None:
    policy = _load(doc)
    rules_ = list(policy.rules)
    rng.shuffle(rules_)
    shuffled = dataclasses.replace(policy, rules=tuple(rules_))
    for evaluator in (ReferenceEvaluator, IndexedEvaluator):
        a, b = evaluator(policy), evaluator(shuffled)
        for req in reqs:
            assert a.evaluate(req) == b.evaluate(req)
    # and the loader gives the same policy and digest whatever order the file used
    doc2 = {**doc, "grant": list(reversed(doc["grant"])), "deny": list(reversed(doc["deny"]))}
    assert load_policy_dict(doc2).digest == policy.digest


def _not_allow_to_allow(before: Decision, after: Decision) -> bool:
    return before.effect is Effect.ALLOW or after.effect is not Effect.ALLOW


@given(policy_docs(), st.data(), st.lists(requests(), min_size=1, max_size=4))
def test_adding_a_deny_never_widens(
    doc: dict[str, Any], data: st.DataObject, reqs: list[Request]
) -> None:
    policy = _load(doc)
    extra = data.draw(rules("deny", 99, doc["groups"]))
    bigger = _load({**doc, "deny": [*doc["deny"], extra]})
    small, big = IndexedEvaluator(policy), IndexedEvaluator(bigger)
    for req in reqs:
        before, after = small.evaluate(req), big.evaluate(req)
        if before.effect is Effect.DENY:
            assert after.effect is Effect.DENY
        assert _not_allow_to_allow(before, after)
        assert not (before.effect is Effect.DENY and after.effect is Effect.APPROVAL_REQUIRED)


@given(policy_docs(), st.data(), st.lists(requests(), min_size=1, max_size=4))
def test_removing_a_grant_never_widens(
    doc: dict[str, Any], data: st.DataObject, reqs: list[Request]
) -> None:
    assume(doc["grant"])
    policy = _load(doc)
    drop = data.draw(st.integers(0, len(doc["grant"]) - 1))
    smaller = _load({**doc, "grant": [g for i, g in enumerate(doc["grant"]) if i != drop]})
    full, less = IndexedEvaluator(policy), IndexedEvaluator(smaller)
    for req in reqs:
        before, after = full.evaluate(req), less.evaluate(req)
        if before.effect is Effect.DENY:
            assert after.effect is Effect.DENY
        assert _not_allow_to_allow(before, after)


@given(
    st.sampled_from(["ws/src/**", "ws/src/*", "ws/*/x.py", "ws/**/.env", "ws/src/a"]),
    resource_names,
)
def test_dotdot_cannot_match_outside_the_pattern_prefix(pattern: str, resource: str) -> None:
    policy = load_policy_dict(
        {
            "version": 1,
            "grant": [{"id": "g", "subjects": ["**"], "actions": ["**"], "resources": [pattern]}],
        }
    )
    resource = "ws/src/" + resource
    req = Request("user:a", "fs.read", resource)
    for evaluator in (ReferenceEvaluator, IndexedEvaluator):
        d = evaluator(policy).evaluate(req)
        normal = posixpath.normpath(resource)
        climbs = normal == ".." or normal.startswith("../")
        if climbs:
            assert d.effect is Effect.DENY
            assert d.errors[0].reason is EvalErrorReason.RESOURCE_ESCAPES
        if d.allowed:
            # what was allowed is the normalised path, and it lies under the literal prefix
            literal = pattern.split("*", maxsplit=1)[0]
            assert not climbs and normal.startswith(literal.rstrip("/"))
            assert ".." not in normal.split("/")
