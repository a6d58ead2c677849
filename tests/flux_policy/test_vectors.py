"""The hand-written decision vectors, through both evaluators."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from flux_policy import IndexedEvaluator, ReferenceEvaluator, Request, load_policy_string
from tests._vectors import load_vector_file

FILE = load_vector_file("flux_policy", "decisions")
POLICIES = {name: load_policy_string(text, source=name) for name, text in FILE["policies"].items()}
CASES: list[dict[str, Any]] = FILE["cases"]


def _request(raw: dict[str, Any]) -> Request:
    fields = dict(raw)
    if "now" in fields:
        fields["now"] = dt.datetime.fromisoformat(fields["now"])
    fields["scopes"] = frozenset(fields.get("scopes", ()))
    return Request(**fields)


def test_every_case_says_why() -> None:
    assert all(c["why"] and c["source"] for c in CASES)
    assert len(CASES) >= 25


@pytest.mark.parametrize("evaluator", [ReferenceEvaluator, IndexedEvaluator], ids=["ref", "idx"])
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_decision_vector(case: dict[str, Any], evaluator: type) -> None:
    policy = POLICIES[case["policy"]]
    decision = evaluator(policy).evaluate(_request(case["request"]))
    expect = case["expect"]
    assert decision.effect.value == expect["effect"]
    assert list(decision.determining_rules) == expect["determining_rules"]
    got = [{"rule": e.rule_id, "reason": e.reason.value} for e in decision.errors]
    assert got == expect["errors"]
    assert decision.policy_digest == policy.digest
