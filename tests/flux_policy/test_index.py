"""The candidate index: what it offers a request, for the shapes it must narrow."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux_policy import IndexedEvaluator, ReferenceEvaluator, Request, load_policy_dict
from flux_policy._candidates import literal_prefix, literal_suffix, required_segments
from flux_policy._reference import reference_match

from ._gen import resource_names, resource_patterns

N = 2000  # rules per shape: big enough that a scan would offer them all


def _rule(i: int, **fields: Any) -> dict[str, Any]:
    return {"id": f"r{i}", "subjects": ["**"], "actions": ["fs.*"], **fields}


# shape -> (rules of n, a request that matches rule 7 and only it)
SHAPES: dict[str, tuple[Any, Request]] = {
    "wildcard-first resource": (
        lambda i: _rule(i, subjects=["role:devs"], resources=[f"**/mod{i}/*.py"]),
        Request("user:u1", "fs.read", "ws/p/lib/mod7/x.py"),
    ),
    "per-user on one shared tree": (
        lambda i: _rule(i, subjects=[f"user:u{i}"], actions=["fs.read"], resources=["ws/s/**"]),
        Request("user:u7", "fs.read", "ws/s/src/a.py"),
    ),
    "group-expanded user": (
        lambda i: _rule(i, subjects=[f"role:t{i}"], resources=["ws/s/**"]),
        Request("user:t7b", "fs.read", "ws/s/x"),
    ),
    "action per tool": (
        lambda i: _rule(i, actions=[f"tool.t{i}"], resources=["**"]),
        Request("user:u1", "tool.t7", "anything/at/all"),
    ),
    "segment after a wildcard segment": (
        lambda i: _rule(i, resources=[f"ws/s/*/tenant{i}/**"]),
        Request("user:u1", "fs.read", "ws/s/eu/tenant7/f.csv"),
    ),
    "suffix only": (
        lambda i: _rule(i, resources=[f"**/*.x{i}"]),
        Request("user:u1", "fs.read", "ws/p/src/f.x7"),
    ),
    "absolute path, literal prefix": (
        lambda i: _rule(i, resources=[f"/srv/t{i}/**"]),
        Request("user:u1", "fs.read", "/srv/t7/f"),
    ),
}


def _policy(make: Any, n: int) -> dict[str, Any]:
    groups: dict[str, list[str]] = {f"role:t{i}": [f"user:t{i}a", f"user:t{i}b"] for i in range(n)}
    groups["role:devs"] = ["user:u1", "user:u2"]
    return {"version": 1, "groups": groups, "grant": [make(i) for i in range(n)]}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_index_offers_only_the_rules_sharing_a_key(shape: str) -> None:
    make, request = SHAPES[shape]
    policy = load_policy_dict(_policy(make, N))
    idx = IndexedEvaluator(policy)
    offered = idx._index.candidates(request.subject, request.action, request.resource)
    assert len(offered) <= 2, (shape, len(offered))  # rule 7 (and maybe one more)
    decision = idx.evaluate(request)
    assert decision.allowed and decision.determining_rules == ("r7",)  # the positive control
    assert decision == ReferenceEvaluator(policy).evaluate(request)


def test_rules_told_apart_inside_a_wildcard_segment_are_offered_to_every_request() -> None:
    """The documented limit (decision 0043): no literal segment, prefix or suffix."""
    policy = load_policy_dict(_policy(lambda i: _rule(i, resources=[f"ws/*/t{i}-*"]), 50))
    idx = IndexedEvaluator(policy)
    assert len(idx._index.candidates("user:a", "fs.read", "ws/a/t7-x")) == 50
    assert idx.evaluate(Request("user:a", "fs.read", "ws/a/t7-x")).determining_rules == ("r7",)


def test_required_segments_and_prefix_of_examples() -> None:
    assert required_segments("**/mod3/*.py") == {"mod3"}
    assert required_segments("a/**/b") == {"a", "b"}
    assert required_segments("/etc/**") == {"etc"}
    assert required_segments("x*y/**/*.py") == set()
    assert literal_prefix("ws/p/*/x") == ("ws", "p")
    assert literal_prefix("/etc/**") == ("", "etc")
    assert literal_prefix("**/x") == ()
    assert literal_suffix("**/*.x7") == ".x7" and literal_suffix("ws/**") == ""


@given(resource_patterns(), resource_names)
def test_every_match_holds_the_required_segments_and_prefix(pattern: str, name: str) -> None:
    if not reference_match(pattern, name):
        return
    segments = name.split("/")
    assert required_segments(pattern) <= set(segments)
    prefix = literal_prefix(pattern)
    assert tuple(segments[: len(prefix)]) == prefix
    assert name.endswith(literal_suffix(pattern))


@given(
    resource_patterns(),
    st.lists(st.sampled_from(["a", "b", "src", ".env", "x.py", "ab", "mod1"]), min_size=1).map(
        "/".join
    ),
)
def test_required_segments_hold_for_names_built_to_match(pattern: str, tail: str) -> None:
    """Names made from the pattern itself (wildcards filled in), so most do match."""
    name = pattern.replace("/**/", "/" + tail + "/").replace("**", tail).replace("*", "a")
    if reference_match(pattern, name):
        assert required_segments(pattern) <= set(name.split("/"))
