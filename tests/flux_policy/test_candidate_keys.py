"""The candidate index files each rule under one kind of key; every kind must bring
its rules back. Each policy here is built so that a deny is filed under the key kind
named, next to a grant of everything: a deny the index failed to return would turn
the decision into an allow. Mutation testing of flux_policy/_candidates.py
(docs/mutation.md) uses this file."""

from __future__ import annotations

import pytest

from flux_policy import Effect, IndexedEvaluator, ReferenceEvaluator, Request, load_policy_string
from flux_policy._candidates import CandidateIndex, IndexedRule

HEADER = """
version = 1
[[grant]]
id = "all"
subjects = ["**"]
actions = ["**"]
resources = ["**"]
"""


def _rule(rid: str, resource: str, kind: str = "deny") -> str:
    return f"""
[[{kind}]]
id = "{rid}"
subjects = ["**"]
actions = ["**"]
resources = ["{resource}"]
"""


# The deny's other keys are shared with decoys, so its least shared key is the one named.
PREFIX = HEADER + _rule("d", "secrets/app/*.key") + _rule("g1", "other/app/*.key", "grant")
PREFIX += _rule("g2", "x/secrets/**", "grant")
SUFFIX = HEADER + _rule("d", "*.env")


@pytest.mark.parametrize(
    ("policy", "resource"),
    [
        (PREFIX, "secrets/app/x.key"),  # filed two levels down the prefix trie
        (SUFFIX, ".env"),  # filed by a suffix as long as the whole name
        (SUFFIX, "a.env"),
    ],
)
def test_a_deny_is_found_under_the_key_it_is_filed_under(policy: str, resource: str) -> None:
    loaded = load_policy_string(policy, source="keys")
    req = Request(subject="user:a", action="fs.read", resource=resource)
    for evaluator in (ReferenceEvaluator, IndexedEvaluator):
        decision = evaluator(loaded).evaluate(req)
        assert (decision.effect, list(decision.determining_rules)) == (Effect.DENY, ["d"])
    other = Request(subject="user:a", action="fs.read", resource="elsewhere/f")
    assert IndexedEvaluator(loaded).evaluate(other).effect is Effect.ALLOW  # control


def test_the_trie_files_by_whole_segments() -> None:
    rules = [
        IndexedRule(None, None, ("secrets/app/*.key",)),
        IndexedRule(None, None, ("other/app/*.key",)),
        IndexedRule(None, None, ("x/secrets/**",)),
    ]
    index = CandidateIndex(rules)
    assert 0 in index.candidates("u", "a", "secrets/app/k.key")
    assert 0 in index.candidates("u", "a", "secrets/app/sub/k.key")
    assert 0 not in index.candidates("u", "a", "secrets/other/k.txt")
