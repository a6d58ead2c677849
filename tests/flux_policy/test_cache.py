"""The indexed evaluator's decision cache: the same answers, never a stale one."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from flux_policy import (
    Effect,
    IndexedEvaluator,
    Policy,
    PolicyLoadError,
    ReferenceEvaluator,
    Request,
    load_policy_dict,
    load_policy_string,
)

from ._gen import policy_docs, requests, shaped_policy_docs, shaped_requests

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _load(doc: dict[str, Any]) -> Policy:
    try:
        return load_policy_dict(doc)
    except PolicyLoadError:
        assume(False)
        raise


def _same_twice(policy: Policy, reqs: list[Request]) -> None:
    ref, cached = ReferenceEvaluator(policy), IndexedEvaluator(policy, cache=4)
    for _ in range(2):  # the second pass is answered from the cache where it may be
        for req in reqs:
            assert cached.evaluate(req) == ref.evaluate(req), req


@given(policy_docs(), st.lists(requests(), min_size=1, max_size=8))
def test_cached_decisions_equal_the_reference(doc: dict[str, Any], reqs: list[Request]) -> None:
    _same_twice(_load(doc), reqs)


@given(shaped_policy_docs(), st.lists(shaped_requests(), min_size=1, max_size=8))
def test_cached_decisions_equal_the_reference_on_indexed_shapes(
    doc: dict[str, Any], reqs: list[Request]
) -> None:
    _same_twice(_load(doc), reqs)


PLAIN = """
version = 1
[[grant]]
id = "reads"
subjects = ["**"]
actions = ["read"]
resources = ["workspace/**"]
[[deny]]
id = "no-env"
subjects = ["**"]
actions = ["**"]
resources = ["workspace/.env"]
"""


def test_a_timeless_policy_is_cached_and_bounded() -> None:
    ev = IndexedEvaluator(load_policy_string(PLAIN), cache=2)
    first = ev.evaluate(Request("a", "read", "workspace/x", now=T0))
    assert ev.evaluate(Request("a", "read", "workspace/x")) is first  # now is irrelevant
    assert first.effect is Effect.ALLOW
    ev.evaluate(Request("a", "read", "workspace/.env"))
    ev.evaluate(Request("a", "read", "workspace/y"))
    assert len(ev._cache) == 2  # the oldest was dropped
    assert ev.evaluate(Request("a", "read", "workspace/.env")).effect is Effect.DENY
    # a different trust, scope or subject is a different entry, not a hit
    assert ev.evaluate(Request("a", "read", "workspace/x", trust="low")) is not first
    assert ev.evaluate(Request("a", "read", "workspace/x", scopes=frozenset({"s"}))) is not first
    assert ev.evaluate(Request("b", "read", "workspace/x")) is not first


def test_uncached_by_default_and_under_explain() -> None:
    ev = IndexedEvaluator(load_policy_string(PLAIN))
    ev.evaluate(Request("a", "read", "workspace/x"))
    assert ev._cache == {}
    cached = IndexedEvaluator(load_policy_string(PLAIN), cache=8)
    assert cached.evaluate(Request("a", "read", "workspace/x"), explain=True).trace
    assert cached._cache == {}


WINDOW = """
version = 1
[[grant]]
id = "until-2026"
subjects = ["**"]
actions = ["read"]
resources = ["workspace/**"]
not_after = 2026-06-01T00:00:00Z
"""

CONDITION = """
version = 1
[[grant]]
id = "dev-only"
subjects = ["**"]
actions = ["read"]
resources = ["workspace/**"]
when = [{ attr = "env", equals = "dev" }]
"""


def test_a_window_anywhere_turns_the_cache_off() -> None:
    ev = IndexedEvaluator(load_policy_string(WINDOW), cache=8)
    before = ev.evaluate(Request("a", "read", "workspace/x", now=T0))
    after = ev.evaluate(Request("a", "read", "workspace/x", now=T0.replace(year=2027)))
    assert before.effect is Effect.ALLOW and after.effect is Effect.DENY  # time decides
    assert ev._cache == {}


def test_a_condition_anywhere_turns_the_cache_off() -> None:
    ev = IndexedEvaluator(load_policy_string(CONDITION), cache=8)
    dev = ev.evaluate(Request("a", "read", "workspace/x", context={"env": "dev"}))
    prod = ev.evaluate(Request("a", "read", "workspace/x", context={"env": "prod"}))
    assert dev.effect is Effect.ALLOW and prod.effect is Effect.DENY  # context decides
    assert ev._cache == {}


class _Sly(str):
    """A str that claims to equal (and hash like) any other: must not key the cache."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


def test_a_str_subclass_never_keys_the_cache() -> None:
    ev = IndexedEvaluator(load_policy_string(PLAIN), cache=8)
    assert ev.evaluate(Request("a", "read", _Sly("workspace/.env"))).effect is Effect.DENY
    assert ev.evaluate(Request(_Sly("a"), "read", "workspace/x")).effect is Effect.ALLOW
    assert ev._cache == {}


def test_the_policy_cannot_be_swapped_under_a_cache() -> None:
    ev = IndexedEvaluator(load_policy_string(PLAIN), cache=8)
    assert ev.evaluate(Request("a", "read", "workspace/x")).effect is Effect.ALLOW
    with pytest.raises(AttributeError):
        ev.policy = load_policy_string(WINDOW)  # type: ignore[misc]
    assert ev.policy.digest == load_policy_string(PLAIN).digest


def test_bad_cache_sizes_are_refused() -> None:
    policy = load_policy_string(PLAIN)
    with pytest.raises(ValueError, match="cache"):
        IndexedEvaluator(policy, cache=-1)
    with pytest.raises(TypeError, match="cache"):
        IndexedEvaluator(policy, cache=True)


def test_requests_with_trust_or_scopes_are_cached() -> None:
    ev = IndexedEvaluator(load_policy_string(PLAIN), cache=8)
    for req in (
        Request("a", "read", "workspace/x", trust="low"),
        Request("a", "read", "workspace/x", scopes=frozenset({"s", "t"})),
        Request("a", "read", "workspace/x", trust="low", scopes=frozenset({"s"})),
    ):
        first = ev.evaluate(req)
        assert first.effect is Effect.ALLOW
        assert ev.evaluate(req) is first, req  # kept, not decided again
    assert len(ev._cache) == 3


def test_a_str_subclass_trust_or_scope_never_keys_the_cache() -> None:
    policy = load_policy_string(PLAIN)
    ev, ref = IndexedEvaluator(policy, cache=8), ReferenceEvaluator(policy)
    for req in (
        Request("a", "read", "workspace/x", trust=_Sly("low")),
        Request("a", "read", "workspace/x", scopes=frozenset({_Sly("s")})),
        Request("a", "read", "workspace/x", scopes=frozenset({"s", _Sly("t")})),
    ):
        assert ev.evaluate(req) == ref.evaluate(req), req
    ev.evaluate(Request("a", _Sly("read"), "workspace/x"))
    assert ev._cache == {}


def test_cache_errors_say_what_is_wrong() -> None:
    policy = load_policy_string(PLAIN)
    with pytest.raises(ValueError, match=r"^cache must be >= 0$"):
        IndexedEvaluator(policy, cache=-1)
    with pytest.raises(TypeError, match=r"^cache must be an int$"):
        IndexedEvaluator(policy, cache=1.0)  # type: ignore[arg-type]


GUARDED = """
version = 1
trust_levels = ["low", "high"]
[[grant]]
id = "scoped-high"
subjects = ["**"]
actions = ["read"]
resources = ["workspace/**"]
scopes = ["s"]
min_trust = "high"
"""


@pytest.mark.parametrize("reverse", [False, True])
def test_requests_differing_only_by_trust_or_scopes_are_kept_apart(reverse: bool) -> None:
    ev = IndexedEvaluator(load_policy_string(GUARDED), cache=16)
    s = frozenset({"s"})
    cases = [
        (Request("a", "read", "workspace/x", trust="high", scopes=s), Effect.ALLOW),
        (Request("a", "read", "workspace/x", trust="low", scopes=s), Effect.DENY),
        (Request("a", "read", "workspace/x", scopes=s), Effect.DENY),
        (Request("a", "read", "workspace/x", trust="high"), Effect.DENY),
        (
            Request("a", "read", "workspace/x", trust="high", scopes=frozenset({"s", "t"})),
            Effect.ALLOW,
        ),
    ]
    if reverse:
        cases.reverse()
    for _ in range(2):  # the second pass is answered from the cache
        for req, effect in cases:
            assert ev.evaluate(req).effect is effect, req
    assert len(ev._cache) == len(cases)
