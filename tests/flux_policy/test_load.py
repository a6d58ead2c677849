"""Loading: refusals name the rule and field; digests are canonical; combining."""

from __future__ import annotations

import datetime as dt
import os
import pickle
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from flux_policy import (
    PolicyLoadError,
    PolicyLoadReason,
    RuleKind,
    combine_policies,
    load_policies,
    load_policy,
    load_policy_dict,
    load_policy_string,
)

R = PolicyLoadReason

BASE = """
version = 1
[groups]
"role:dev" = ["user:alice", "role:leads"]
"role:leads" = ["user:bob"]
[[grant]]
id = "g"
subjects = ["role:dev"]
actions = ["fs.read"]
resources = ["workspace/src/**"]
"""


def _rule(**over: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "id": "r",
        "subjects": ["user:alice"],
        "actions": ["fs.read"],
        "resources": ["workspace/**"],
    }
    rule.update(over)
    return rule


def _refused(doc: dict[str, Any]) -> PolicyLoadError:
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dict(doc)
    return info.value


# (case id, document, reason, rule, field)
REFUSALS: list[tuple[str, dict[str, Any], PolicyLoadReason, str | None, str | None]] = [
    ("unknown-top-key", {"version": 1, "grants": []}, R.UNKNOWN_KEY, None, "grants"),
    (
        "unknown-rule-key",
        {"version": 1, "grant": [_rule(id="g1", colour="red")]},
        R.UNKNOWN_KEY,
        "g1",
        "grant[0].colour",
    ),
    (
        "approval-on-deny",
        {"version": 1, "deny": [_rule(id="d1", requires_approval=True)]},
        R.UNKNOWN_KEY,
        "d1",
        "deny[0].requires_approval",
    ),
    (
        "unknown-condition-key",
        {"version": 1, "deny": [_rule(id="d1", when=[{"attr": "env", "eq": "x"}])]},
        R.UNKNOWN_KEY,
        "d1",
        "deny[0].when[0].eq",
    ),
    (
        "missing-actions",
        {"version": 1, "grant": [{"id": "g1", "subjects": ["a"], "resources": ["b"]}]},
        R.MISSING_FIELD,
        "g1",
        "grant[0].actions",
    ),
    (
        "string-not-bool",
        {"version": 1, "grant": [_rule(id="g1", requires_approval="yes")]},
        R.BAD_TYPE,
        "g1",
        "grant[0].requires_approval",
    ),
    ("version-2", {"version": 2}, R.BAD_VERSION, None, "version"),
    (
        "duplicate-id-across-kinds",
        {"version": 1, "grant": [_rule(id="x")], "deny": [_rule(id="x")]},
        R.DUPLICATE_ID,
        "x",
        "deny[0].id",
    ),
    (
        "unknown-group",
        {"version": 1, "grant": [_rule(id="g1", subjects=["role:nobody"])]},
        R.UNKNOWN_GROUP,
        "g1",
        "grant[0].subjects[0]",
    ),
    (
        "unknown-nested-group",
        {"version": 1, "groups": {"role:a": ["role:b"]}},
        R.UNKNOWN_GROUP,
        "role:a",
        "groups.role:a[0]",
    ),
    (
        "triple-star",
        {"version": 1, "grant": [_rule(id="g1", actions=["fs.***"])]},
        R.INVALID_PATTERN,
        "g1",
        "grant[0].actions[0]",
    ),
    (
        "dotdot-in-resource-pattern",
        {"version": 1, "deny": [_rule(id="d1", resources=["a/**", "a/../b"])]},
        R.INVALID_PATTERN,
        "d1",
        "deny[0].resources[1]",
    ),
    (
        "bad-resource-group-member",
        {
            "version": 1,
            "groups": {"group:res": ["ok/**", "a//b"]},
            "grant": [_rule(id="g1", resources=["group:res"])],
        },
        R.INVALID_PATTERN,
        "g1",
        "grant[0].resources[0]",
    ),
    (
        "cycle",
        {
            "version": 1,
            "groups": {"role:a": ["role:b"], "role:b": ["role:c"], "role:c": ["role:a"]},
        },
        R.GROUP_CYCLE,
        "role:c",
        "groups.role:c",
    ),
    ("self-cycle", {"version": 1, "groups": {"role:a": ["role:a"]}}, R.GROUP_CYCLE, "role:a", None),
    ("bad-group-name", {"version": 1, "groups": {"dev": ["x"]}}, R.BAD_GROUP_NAME, "dev", None),
    (
        "empty-subjects",
        {"version": 1, "grant": [_rule(id="g1", subjects=[])]},
        R.EMPTY_LIST,
        "g1",
        "grant[0].subjects",
    ),
    (
        "unknown-trust",
        {"version": 1, "grant": [_rule(id="g1", min_trust="root")]},
        R.UNKNOWN_TRUST_LEVEL,
        "g1",
        "grant[0].min_trust",
    ),
    (
        "min-above-max",
        {"version": 1, "grant": [_rule(id="g1", min_trust="high", max_trust="low")]},
        R.BAD_TRUST_LEVELS,
        "g1",
        "grant[0].max_trust",
    ),
    (
        "duplicate-levels",
        {"version": 1, "trust_levels": ["a", "a"]},
        R.BAD_TRUST_LEVELS,
        None,
        None,
    ),
    (
        "naive-timestamp",
        {"version": 1, "grant": [_rule(id="g1", not_after="2027-01-01T00:00:00")]},
        R.BAD_TIMESTAMP,
        "g1",
        "grant[0].not_after",
    ),
    (
        "garbage-timestamp",
        {"version": 1, "grant": [_rule(id="g1", not_before="soon")]},
        R.BAD_TIMESTAMP,
        "g1",
        "grant[0].not_before",
    ),
    (
        "empty-window",
        {
            "version": 1,
            "grant": [
                _rule(id="g1", not_before="2027-01-01T00:00:00Z", not_after="2027-01-01T00:00:00Z")
            ],
        },
        R.EMPTY_WINDOW,
        "g1",
        "grant[0].not_after",
    ),
    (
        "two-operators",
        {
            "version": 1,
            "deny": [_rule(id="d1", when=[{"attr": "env", "equals": "a", "prefix": "b"}])],
        },
        R.BAD_CONDITION,
        "d1",
        "deny[0].when[0]",
    ),
    (
        "mixed-in",
        {"version": 1, "deny": [_rule(id="d1", when=[{"attr": "n", "in": [1, "1"]}])]},
        R.BAD_CONDITION,
        "d1",
        "deny[0].when[0].in",
    ),
    (
        "float-operand",
        {"version": 1, "deny": [_rule(id="d1", when=[{"attr": "n", "equals": 1.5}])]},
        R.BAD_TYPE,
        "d1",
        None,
    ),
    ("bad-id", {"version": 1, "grant": [_rule(id="has space")]}, R.BAD_ID, "has space", None),
]


@pytest.mark.parametrize(
    ("doc", "reason", "rule", "field"),
    [c[1:] for c in REFUSALS],
    ids=[c[0] for c in REFUSALS],
)
def test_refusal_names_rule_and_field(
    doc: dict[str, Any], reason: PolicyLoadReason, rule: str | None, field: str | None
) -> None:
    err = _refused(doc)
    assert err.reason is reason
    assert err.rule == rule
    if field is not None:
        assert err.field == field
    else:
        assert err.field is not None or reason is R.BAD_TRUST_LEVELS


def test_toml_syntax_error() -> None:
    with pytest.raises(PolicyLoadError) as info:
        load_policy_string("version = = 1", source="bad.toml")
    assert info.value.reason is R.SYNTAX
    assert info.value.source == "bad.toml"


def test_error_survives_pickle() -> None:
    err = _refused({"version": 1, "grant": [_rule(id="g1", subjects=["role:none"])]})
    again = pickle.loads(pickle.dumps(err))
    assert (again.reason, again.rule, again.field) == (err.reason, err.rule, err.field)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError) as info:
        load_policy(tmp_path / "missing.toml")
    assert info.value.reason is R.IO
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"version = 1\n# \xff\n")
    with pytest.raises(PolicyLoadError) as info:
        load_policy(bad)
    assert info.value.reason is R.ENCODING


def test_a_fifo_or_directory_is_refused_without_waiting(tmp_path: Path) -> None:
    """A FIFO named as the policy file: the open used to wait for a writer for ever
    (``flux policy check FIFO`` hung). Now it is refused as IO, as is a directory."""
    fifo = tmp_path / "policy.toml"
    os.mkfifo(fifo)
    outcome: list[object] = []

    def load(path: Path) -> None:
        try:
            load_policy(path)
        except PolicyLoadError as exc:
            outcome.append(exc.reason)

    for path in (fifo, tmp_path):
        worker = threading.Thread(target=load, args=(path,), daemon=True)
        worker.start()
        worker.join(timeout=20)
        assert not worker.is_alive(), f"load_policy({path.name}) waits"
    assert outcome == [R.IO, R.IO]


def test_load_from_file_string_and_dict_agree(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(BASE, encoding="utf-8")
    import tomllib

    a = load_policy(path)
    b = load_policy_string(BASE)
    c = load_policy_dict(tomllib.loads(BASE))
    assert a == b == c
    assert a.digest == b.digest == c.digest
    assert a.digest.startswith("sha256:") and len(a.digest) == 71
    assert a.groups["role:dev"] == ("role:leads", "user:alice")
    assert a.rules[0].kind is RuleKind.GRANT


def _doc() -> dict[str, Any]:
    return {
        "version": 1,
        "groups": {"role:a": ["u:1", "u:2", "role:b"], "role:b": ["u:3"]},
        "grant": [
            _rule(
                id="g1",
                subjects=["role:a", "u:9"],
                scopes=["x", "y"],
                not_after="2027-01-01T01:00:00+01:00",
            ),
            _rule(id="g2", when=[{"attr": "n", "in": [3, 1, 2]}, {"attr": "env", "equals": "p"}]),
        ],
        "deny": [_rule(id="d1", actions=["fs.*", "net.*"])],
    }


def _shuffled(doc: Any, rng: random.Random) -> Any:
    if isinstance(doc, dict):
        items = [(k, _shuffled(v, rng)) for k, v in doc.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(doc, list):
        items = [_shuffled(v, rng) for v in doc]
        rng.shuffle(items)
        return items
    return doc


def test_digest_stable_across_orders() -> None:
    digest = load_policy_dict(_doc()).digest
    rng = random.Random(7)
    for _ in range(20):
        assert load_policy_dict(_shuffled(_doc(), rng)).digest == digest


def test_digest_same_instant_any_offset_and_defaults_written_out() -> None:
    doc = _doc()
    doc["grant"][0]["not_after"] = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    doc["grant"][1]["requires_approval"] = False
    doc["deny"][0]["scopes"] = []
    assert load_policy_dict(doc).digest == load_policy_dict(_doc()).digest


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["grant"][0].update(requires_approval=True),
        lambda d: d["deny"][0].update(actions=["fs.*"]),
        lambda d: d["groups"]["role:b"].append("u:4"),
        lambda d: d["grant"][1]["when"][0].update(attr="m"),
        lambda d: d.update(trust_levels=["low", "high"]),
    ],
)
def test_digest_changes_with_meaning(change: Any) -> None:
    doc = _doc()
    change(doc)
    assert load_policy_dict(doc).digest != load_policy_dict(_doc()).digest


def test_combine(tmp_path: Path) -> None:
    one = tmp_path / "one.toml"
    two = tmp_path / "two.toml"
    one.write_text(BASE, encoding="utf-8")
    two.write_text(
        'version = 1\n[groups]\n"role:leads" = ["user:bob"]\n'
        '[[deny]]\nid = "d"\nsubjects = ["role:leads"]\nactions = ["**"]\nresources = ["**"]\n',
        encoding="utf-8",
    )
    merged = load_policies([one, two])
    assert [r.id for r in merged.rules] == ["d", "g"]
    assert set(merged.groups) == {"role:dev", "role:leads"}
    # combining is order independent, and equals the single-file spelling
    assert combine_policies([load_policy(two), load_policy(one)]).digest == merged.digest


def test_combine_refusals() -> None:
    base = load_policy_string(BASE)
    with pytest.raises(PolicyLoadError) as info:
        combine_policies([base, base])
    assert info.value.reason is R.DUPLICATE_ID and info.value.rule == "g"
    other_group = load_policy_dict({"version": 1, "groups": {"role:leads": ["user:eve"]}})
    with pytest.raises(PolicyLoadError) as info:
        combine_policies([base, other_group])
    assert info.value.reason is R.DUPLICATE_GROUP and info.value.rule == "role:leads"
    other_levels = load_policy_dict({"version": 1, "trust_levels": ["a", "b"]})
    with pytest.raises(PolicyLoadError) as info:
        combine_policies([base, other_levels])
    assert info.value.reason is R.TRUST_MISMATCH
    with pytest.raises(ValueError):
        combine_policies([])


def test_type_errors_at_the_boundary() -> None:
    with pytest.raises(TypeError):
        load_policy_dict(["version", 1])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        load_policy_string(b"version = 1")  # type: ignore[arg-type]
