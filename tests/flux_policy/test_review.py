"""Regressions from the adversarial review of flux_policy (one test per finding)."""

from __future__ import annotations

import enum
from typing import Any

import pytest

from flux_policy import (
    Effect,
    IndexedEvaluator,
    PolicyLoadError,
    PolicyLoadReason,
    ReferenceEvaluator,
    Request,
    load_policy_dict,
    load_policy_string,
)

R = PolicyLoadReason

RULE = 'version = 1\n[[grant]]\nid = "g"\nsubjects = ["**"]\nactions = ["a"]\nresources = ["x"]\n'


def _refused_text(text: str) -> PolicyLoadError:
    with pytest.raises(PolicyLoadError) as info:
        load_policy_string(text)
    return info.value


def _rule(**over: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {"id": "r", "subjects": ["u"], "actions": ["a"], "resources": ["x"]}
    rule.update(over)
    return rule


@pytest.mark.parametrize(
    "stamp",
    [
        "0001-01-01T00:00:00+14:00",  # native TOML datetime, below datetime.min in UTC
        '"9999-12-31T23:59:59-10:00"',  # string form, above datetime.max in UTC
    ],
)
def test_timestamp_out_of_range_in_utc_is_a_typed_refusal(stamp: str) -> None:
    # Was: OverflowError escaped from astimezone(UTC).
    err = _refused_text(RULE + f"not_after = {stamp}\n")
    assert err.reason is R.BAD_TIMESTAMP
    assert (err.rule, err.field) == ("g", "grant[0].not_after")


@pytest.mark.parametrize(
    "text",
    [
        "version = " + "[" * 5000 + "]" * 5000,  # nested arrays: RecursionError in tomllib
        "version = " + "{a=" * 2000 + "1" + "}" * 2000,  # nested inline tables
        "version = " + "1" * 5000,  # int over the str->int digit limit: ValueError
    ],
    ids=["deep-arrays", "deep-inline-tables", "huge-integer"],
)
def test_hostile_toml_is_a_syntax_refusal(text: str) -> None:
    assert _refused_text(text).reason is R.SYNTAX


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"subjects": ["u\ud800"]}, "grant[0].subjects[0]"),
        ({"resources": ["x/\udfff"]}, "grant[0].resources[0]"),
        ({"scopes": ["s\ud800"]}, "grant[0].scopes[0]"),
        ({"when": [{"attr": "k\ud800", "equals": "v"}]}, "grant[0].when[0].attr"),
        ({"when": [{"attr": "k", "equals": "v\ud800"}]}, "grant[0].when[0].equals"),
        ({"when": [{"attr": "k", "in": ["v\ud800"]}]}, "grant[0].when[0].in"),
        ({"when": [{"attr": "k", "prefix": "\ud800"}]}, "grant[0].when[0].prefix"),
    ],
)
def test_lone_surrogates_are_refused_at_load(over: dict[str, Any], field: str) -> None:
    # Was: UnicodeEncodeError from the digest (the canonical form is UTF-8).
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dict({"version": 1, "grant": [_rule(**over)]})
    assert info.value.field == field
    assert info.value.rule == "r"


def test_lone_surrogate_trust_level_is_refused() -> None:
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dict({"version": 1, "trust_levels": ["a", "b\ud800"]})
    assert info.value.reason is R.BAD_TRUST_LEVELS


def test_request_name_with_lone_surrogate_is_invalid() -> None:
    policy = load_policy_string(RULE)
    for evaluator in (IndexedEvaluator(policy), ReferenceEvaluator(policy)):
        decision = evaluator.evaluate(Request("u", "a", "x\ud800"))
        assert decision.effect is Effect.DENY
        assert decision.errors[0].field == "resource"


def _chain(depth: int) -> str:
    lines = [f'"role:g{i}" = ["role:g{i + 1}", "u{i}"]' for i in range(depth)]
    lines.append(f'"role:g{depth}" = ["u"]')
    return (
        "version = 1\n[groups]\n"
        + "\n".join(lines)
        + '\n[[grant]]\nid = "g"\nsubjects = ["role:g0"]\nactions = ["a"]\nresources = ["x"]\n'
    )


def test_group_nesting_too_deep_is_refused_at_load() -> None:
    # Was: loaded fine, then both evaluators died with RecursionError on it.
    err = _refused_text(_chain(3000))
    assert err.reason is R.TOO_MANY
    assert err.field is not None and err.field.startswith("groups.")


def test_group_nesting_at_the_bound_evaluates_in_both() -> None:
    from flux_policy._build import MAX_GROUP_DEPTH

    policy = load_policy_string(_chain(MAX_GROUP_DEPTH - 1))
    request = Request("u", "a", "x")
    assert IndexedEvaluator(policy).evaluate(request).effect is Effect.ALLOW
    assert ReferenceEvaluator(policy).evaluate(request).effect is Effect.ALLOW
    with pytest.raises(PolicyLoadError):
        load_policy_string(_chain(MAX_GROUP_DEPTH))


def test_group_fan_out_that_would_blow_up_the_index_is_refused() -> None:
    # 10,000 members shared by 2,000 groups (a 400 kB document) flatten to 20 million
    # leaf entries; a rule naming a big group under many actions multiplies again.
    from flux_policy._build import MAX_EXPANSION

    members = [f"u{i}" for i in range(10_000)]
    groups: dict[str, list[str]] = {"role:all": members}
    groups.update({f"role:v{i}": ["role:all"] for i in range(2_000)})
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dict({"version": 1, "groups": groups})
    assert info.value.reason is R.TOO_MANY
    resources = {"role:res": [f"r{i}" for i in range(10_000)]}
    actions = [f"act{i}" for i in range(MAX_EXPANSION // 10_000 + 1)]
    doc = {
        "version": 1,
        "groups": resources,
        "grant": [_rule(resources=["role:res"], actions=actions)],
    }
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dict(doc)
    assert (info.value.reason, info.value.rule) == (R.TOO_MANY, "r")


class _Env(enum.StrEnum):
    PROD_EU = "prod-eu"


def test_str_subclass_context_value_decides_the_same_in_both_evaluators() -> None:
    # Was: the reference took a str subclass for a prefix condition (isinstance), the
    # indexed evaluator called it a type mismatch: the reference allowed, indexed denied.
    grant_only = load_policy_dict(
        {"version": 1, "grant": [_rule(id="g", when=[{"attr": "env", "prefix": "prod"}])]}
    )
    with_deny = load_policy_dict(
        {
            "version": 1,
            "grant": [_rule(id="g")],
            "deny": [_rule(id="d", when=[{"attr": "zone", "prefix": "dmz"}])],
        }
    )
    for policy, context in (
        (grant_only, {"env": _Env.PROD_EU}),
        (with_deny, {"zone": _Env.PROD_EU}),
    ):
        request = Request("u", "a", "x", context=context)
        indexed = IndexedEvaluator(policy).evaluate(request)
        assert ReferenceEvaluator(policy).evaluate(request) == indexed
        assert indexed.effect is Effect.DENY
