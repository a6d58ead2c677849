"""Decision semantics, run against both evaluators."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from flux_policy import (
    Decision,
    Effect,
    EvalErrorReason,
    IndexedEvaluator,
    Policy,
    ReferenceEvaluator,
    Request,
    load_policy_dict,
    load_policy_string,
)

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
EVALUATORS = [ReferenceEvaluator, IndexedEvaluator]

ISSUE_POLICY = """
version = 1
[groups]
"role:dev" = ["user:alice", "user:bob"]

[[grant]]
id = "dev-reads-src"
subjects = ["role:dev"]
actions = ["fs.read", "fs.list"]
resources = ["workspace/src/**"]
min_trust = "low"
scopes = ["repo"]
not_after = "2027-01-01T00:00:00Z"

[[deny]]
id = "no-dotenv"
subjects = ["**"]
actions = ["fs.*"]
resources = ["workspace/**/.env"]
when = [{ attr = "env", equals = "prod" }]
"""


def decide(policy: Policy, evaluator: type, **req: Any) -> Decision:
    base: dict[str, Any] = {"subject": "user:alice", "action": "fs.read", "now": NOW}
    base.update(req)
    ev = evaluator(policy)
    return ev.evaluate(Request(**base))  # type: ignore[no-any-return]


def _policy(
    *rules: dict[str, Any], groups: dict[str, list[str]] | None = None, **top: Any
) -> Policy:
    doc: dict[str, Any] = {"version": 1, "groups": groups or {}, "grant": [], "deny": [], **top}
    for r in rules:
        kind = r.pop("kind", "grant")
        r.setdefault("subjects", ["**"])
        r.setdefault("actions", ["**"])
        r.setdefault("resources", ["**"])
        doc[kind].append(r)
    return load_policy_dict(doc)


@pytest.fixture(params=EVALUATORS, ids=["reference", "indexed"])
def ev(request: pytest.FixtureRequest) -> type:
    return request.param  # type: ignore[no-any-return]


def test_issue_example(ev: type) -> None:
    p = load_policy_string(ISSUE_POLICY)
    ok = {"trust": "low", "scopes": {"repo"}, "context": {"env": "dev"}}
    d = decide(p, ev, resource="workspace/src/a.py", **ok)
    assert d.effect is Effect.ALLOW and d.determining_rules == ("dev-reads-src",)
    assert d.policy_digest == p.digest
    # the deny overrides the grant when env == prod
    d = decide(
        p, ev, resource="workspace/src/.env", trust="low", scopes={"repo"}, context={"env": "prod"}
    )
    assert d.effect is Effect.DENY and d.determining_rules == ("no-dotenv",)
    # and it denies when env is missing: its condition cannot be evaluated (fail closed)
    d = decide(p, ev, resource="workspace/src/.env", trust="low", scopes={"repo"})
    assert d.effect is Effect.DENY and d.determining_rules == ("no-dotenv",)
    assert [e.reason for e in d.errors] == [EvalErrorReason.MISSING_ATTRIBUTE]
    # not a dev, not enough trust, missing scope, expired: default deny
    overrides: list[dict[str, Any]] = [
        {"subject": "user:eve"},
        {"trust": "untrusted"},
        {"scopes": set()},
    ]
    for over in overrides:
        d = decide(p, ev, resource="workspace/src/a.py", **{**ok, **over})
        assert d.effect is Effect.DENY and d.determining_rules == ()
    later = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    d = decide(p, ev, resource="workspace/src/a.py", now=later, **ok)
    assert d.effect is Effect.DENY


def test_default_deny_on_empty_policy(ev: type) -> None:
    d = decide(_policy(), ev, resource="a")
    assert d.effect is Effect.DENY and d.determining_rules == () and d.errors == ()


def test_approval_only_when_no_plain_grant(ev: type) -> None:
    p = _policy({"id": "ask", "requires_approval": True})
    assert decide(p, ev, resource="a").effect is Effect.APPROVAL_REQUIRED
    p = _policy({"id": "ask", "requires_approval": True}, {"id": "ok"})
    d = decide(p, ev, resource="a")
    assert d.effect is Effect.ALLOW and d.determining_rules == ("ok",)
    p = _policy({"id": "ask", "requires_approval": True}, {"id": "no", "kind": "deny"})
    assert decide(p, ev, resource="a").effect is Effect.DENY


@pytest.mark.parametrize(
    ("cond", "context", "reason"),
    [
        ({"attr": "env", "equals": "prod"}, {}, EvalErrorReason.MISSING_ATTRIBUTE),
        ({"attr": "n", "equals": 1}, {"n": "1"}, EvalErrorReason.TYPE_MISMATCH),
        ({"attr": "n", "equals": 1}, {"n": True}, EvalErrorReason.TYPE_MISMATCH),  # bool is not int
        ({"attr": "flag", "equals": True}, {"flag": 1}, EvalErrorReason.TYPE_MISMATCH),
        ({"attr": "n", "in": [1, 2]}, {"n": 1.0}, EvalErrorReason.TYPE_MISMATCH),
        ({"attr": "env", "prefix": "pr"}, {"env": None}, EvalErrorReason.TYPE_MISMATCH),
        ({"attr": "env", "prefix": "pr"}, {"env": ["prod"]}, EvalErrorReason.TYPE_MISMATCH),
    ],
)
def test_unevaluable_condition_denies_on_deny_but_not_grant(
    ev: type, cond: dict[str, Any], context: dict[str, Any], reason: EvalErrorReason
) -> None:
    # A deny whose condition errors applies (unlike Cedar, cedar-policy/cedar#2428).
    p = _policy({"id": "g"}, {"id": "d", "kind": "deny", "when": [cond]})
    d = decide(p, ev, resource="a", context=context)
    assert d.effect is Effect.DENY and d.determining_rules == ("d",)
    assert {(e.rule_id, e.reason) for e in d.errors} == {("d", reason)}
    # A grant whose condition errors does not apply.
    p = _policy({"id": "g", "when": [cond]})
    d = decide(p, ev, resource="a", context=context)
    assert d.effect is Effect.DENY and d.determining_rules == ()
    assert {(e.rule_id, e.reason) for e in d.errors} == {("g", reason)}


def test_an_evaluably_false_condition_does_not_save_an_erroring_deny(ev: type) -> None:
    cond = [{"attr": "env", "equals": "prod"}, {"attr": "missing", "equals": 1}]
    p = _policy({"id": "g"}, {"id": "d", "kind": "deny", "when": cond})
    assert decide(p, ev, resource="a", context={"env": "dev"}).effect is Effect.DENY
    assert decide(p, ev, resource="a", context={"env": "dev", "missing": 2}).effect is Effect.ALLOW


def test_conditions(ev: type) -> None:
    p = _policy(
        {
            "id": "g",
            "when": [{"attr": "env", "in": ["dev", "qa"]}, {"attr": "br", "prefix": "feat/"}],
        }
    )
    assert decide(p, ev, resource="a", context={"env": "qa", "br": "feat/x"}).allowed
    assert not decide(p, ev, resource="a", context={"env": "prod", "br": "feat/x"}).allowed
    assert not decide(p, ev, resource="a", context={"env": "qa", "br": "main"}).allowed


def test_trust_narrows_a_deny(ev: type) -> None:
    p = _policy({"id": "g"}, {"id": "d", "kind": "deny", "max_trust": "low"})
    assert decide(p, ev, resource="a", trust="untrusted").effect is Effect.DENY
    assert decide(p, ev, resource="a", trust="high").effect is Effect.ALLOW
    # no trust given, or one the policy does not know: the deny cannot be evaluated: deny
    for trust, reason in (
        (None, EvalErrorReason.NO_TRUST),
        ("root", EvalErrorReason.UNKNOWN_TRUST),
    ):
        d = decide(p, ev, resource="a", trust=trust)
        assert d.effect is Effect.DENY and [e.reason for e in d.errors] == [reason]


def test_policy_defined_trust_order(ev: type) -> None:
    p = _policy({"id": "g", "min_trust": "b"}, trust_levels=["c", "b", "a"])
    assert decide(p, ev, resource="x", trust="a").allowed
    assert decide(p, ev, resource="x", trust="b").allowed
    assert not decide(p, ev, resource="x", trust="c").allowed
    assert not decide(p, ev, resource="x", trust="high").allowed  # not in this order


def test_scopes_must_all_be_held(ev: type) -> None:
    p = _policy({"id": "g", "scopes": ["repo", "ci"]})
    assert not decide(p, ev, resource="a", scopes={"repo"}).allowed
    assert decide(p, ev, resource="a", scopes={"repo", "ci", "x"}).allowed


def test_window_bounds_and_missing_now(ev: type) -> None:
    p = _policy(
        {"id": "g", "not_before": "2026-06-01T00:00:00Z", "not_after": "2026-07-01T00:00:00Z"}
    )
    at = dt.datetime.fromisoformat
    assert decide(p, ev, resource="a", now=at("2026-06-01T00:00:00Z")).allowed  # inclusive
    assert not decide(p, ev, resource="a", now=at("2026-07-01T00:00:00Z")).allowed  # exclusive
    assert decide(p, ev, resource="a", now=at("2026-06-30T23:00:00-02:00")).effect is Effect.DENY
    d = decide(p, ev, resource="a", now=None)
    assert d.effect is Effect.DENY and {e.reason for e in d.errors} == {EvalErrorReason.NO_TIME}
    p = _policy({"id": "g"}, {"id": "d", "kind": "deny", "not_before": "2026-06-01T00:00:00Z"})
    assert decide(p, ev, resource="a", now=None).effect is Effect.DENY
    assert decide(p, ev, resource="a", now=at("2026-05-01T00:00:00Z")).allowed


def test_groups_are_transitive_for_subjects_actions_resources(ev: type) -> None:
    groups = {
        "role:all": ["role:devs", "svc:ci"],
        "role:devs": ["role:leads", "user:alice"],
        "role:leads": ["user:bob"],
        "group:read": ["fs.read", "group:list"],
        "group:list": ["fs.list"],
        "group:src": ["group:code", "docs/*.md"],
        "group:code": ["src/**"],
    }
    p = _policy(
        {
            "id": "g",
            "subjects": ["role:all"],
            "actions": ["group:read"],
            "resources": ["group:src"],
        },
        groups=groups,
    )
    for subject in ("user:bob", "user:alice", "svc:ci"):
        assert decide(p, ev, subject=subject, action="fs.list", resource="src/a/b").allowed
    assert decide(p, ev, action="fs.read", resource="docs/x.md").allowed
    assert not decide(p, ev, subject="user:eve", resource="src/a").allowed
    assert not decide(p, ev, action="fs.write", resource="src/a").allowed
    assert not decide(p, ev, resource="docs/a/x.md").allowed
    # a request naming a group is refused outright
    d = decide(p, ev, subject="role:all", resource="src/a")
    assert d.effect is Effect.DENY and d.errors[0].reason is EvalErrorReason.INVALID_NAME


@pytest.mark.parametrize(
    ("resource", "allowed"),
    [
        ("ws/src/a", True),
        ("ws/src/./a", True),
        ("ws//src/a", True),
        ("ws/src/x/../a", True),
        ("ws/src/../secret", False),  # normalises outside the grant
        ("ws/src/../src/a", True),
        ("ws/src/..", False),
        ("ws/src", False),
    ],
)
def test_dotdot_never_widens(ev: type, resource: str, allowed: bool) -> None:
    p = _policy({"id": "g", "resources": ["ws/src/**"]})
    assert decide(p, ev, resource=resource).allowed is allowed


@pytest.mark.parametrize(
    ("resource", "reason"),
    [
        ("../x", EvalErrorReason.RESOURCE_ESCAPES),
        ("a/../../x", EvalErrorReason.RESOURCE_ESCAPES),
        ("/..", EvalErrorReason.RESOURCE_ESCAPES),
        ("a/..", EvalErrorReason.INVALID_NAME),
        ("", EvalErrorReason.INVALID_NAME),
        ("a\x00b", EvalErrorReason.INVALID_NAME),
        ("x/../role:x", EvalErrorReason.INVALID_NAME),
    ],
)
def test_unusable_resource_denies_even_under_allow_all(
    ev: type, resource: str, reason: EvalErrorReason
) -> None:
    p = _policy({"id": "g"})
    d = decide(p, ev, resource=resource)
    assert d.effect is Effect.DENY
    assert [(e.rule_id, e.field, e.reason) for e in d.errors] == [(None, "resource", reason)]


def test_explain_trace_covers_every_rule(ev: type) -> None:
    p = load_policy_string(ISSUE_POLICY)
    d = ev(p).evaluate(
        Request(
            "user:alice",
            "fs.read",
            "workspace/src/.env",
            trust="low",
            scopes=frozenset({"repo"}),
            now=NOW,
        ),
        explain=True,
    )
    assert {t.rule_id: t.applied for t in d.trace} == {"dev-reads-src": True, "no-dotenv": True}
    assert d.to_json()["trace"]


def test_request_type_errors() -> None:
    with pytest.raises(TypeError):
        Request("a", "b", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Request("a", "b", "c", scopes="repo")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Request("a", "b", "c", now=dt.datetime(2026, 1, 1))  # naive
    with pytest.raises(TypeError):
        IndexedEvaluator("policy")  # type: ignore[arg-type]
