"""Hypothesis strategies for policies and requests (small alphabets so rules match)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import strategies as st

from flux_policy import Request

LEVELS = ["untrusted", "low", "medium", "high", "system"]
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TIMES = [T0 + dt.timedelta(days=d) for d in (0, 10, 20, 30)]

SUBJECTS = ["user:alice", "user:bob", "svc:ci", "user:al"]
ACTIONS = ["fs.read", "fs.write", "fs.list", "net.get", "fsx"]
SEGMENTS = ["a", "b", "src", ".env", "x.py", "ab", "a.b"]

name_pattern = st.lists(
    st.sampled_from(["user:", "svc:", "al", "ice", "bob", "fs", ".", "read", "/", "*", "**"]),
    min_size=1,
    max_size=5,
).map("".join)

resource_segment_pattern = st.sampled_from(
    ["a", "b", "src", ".env", "*", "**", "*.py", "a*", "*b*", "a**b", "x.py", "*.*"]
)


@st.composite
def resource_patterns(draw: st.DrawFn) -> str:
    segs = draw(st.lists(resource_segment_pattern, min_size=1, max_size=4))
    text = "/".join(segs)
    return ("/" if draw(st.integers(0, 4)) == 0 else "") + text


def valid_name_pattern(text: str) -> bool:
    return "***" not in text and not text.startswith(("role:", "group:"))


subject_patterns = st.one_of(st.sampled_from(SUBJECTS), name_pattern.filter(valid_name_pattern))
action_patterns = st.one_of(
    st.sampled_from(ACTIONS), st.sampled_from(["fs.*", "*", "**", "net.*", "f*.*", "*.read"])
)

scalar = st.sampled_from(["prod", "dev", "production", 1, 2, True])


@st.composite
def conditions(draw: st.DrawFn) -> dict[str, Any]:
    attr = draw(st.sampled_from(["env", "n", "flag"]))
    op = draw(st.sampled_from(["equals", "in", "prefix"]))
    if op == "equals":
        return {"attr": attr, "equals": draw(scalar)}
    if op == "prefix":
        return {"attr": attr, "prefix": draw(st.sampled_from(["pr", "d", ""]))}
    kind = draw(st.sampled_from(["str", "int"]))
    pool = ["prod", "dev", "qa"] if kind == "str" else [1, 2, 3]
    return {"attr": attr, "in": draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))}


@st.composite
def rules(draw: st.DrawFn, kind: str, index: int, groups: dict[str, list[str]]) -> dict[str, Any]:
    subject_groups = [g for g in groups if g.startswith("role:")]
    resource_groups = [g for g in groups if g.startswith("group:res")]
    action_groups = [g for g in groups if g.startswith("group:act")]
    rule: dict[str, Any] = {
        "id": f"{kind[0]}{index}",
        "subjects": draw(
            st.lists(
                st.one_of(subject_patterns, st.sampled_from(subject_groups or ["**"])),
                min_size=1,
                max_size=2,
            )
        ),
        "actions": draw(
            st.lists(
                st.one_of(action_patterns, st.sampled_from(action_groups or ["**"])),
                min_size=1,
                max_size=2,
            )
        ),
        "resources": draw(
            st.lists(
                st.one_of(resource_patterns(), st.sampled_from(resource_groups or ["**"])),
                min_size=1,
                max_size=2,
            )
        ),
    }
    if draw(st.integers(0, 3)) == 0:
        lo = draw(st.integers(0, 4))
        rule["min_trust"] = LEVELS[lo]
        if draw(st.booleans()):
            rule["max_trust"] = LEVELS[draw(st.integers(lo, 4))]
    if draw(st.integers(0, 3)) == 0:
        rule["scopes"] = draw(st.lists(st.sampled_from(["repo", "ci"]), min_size=1, max_size=2))
    if draw(st.integers(0, 4)) == 0:
        start = draw(st.integers(0, 2))
        rule["not_before"] = TIMES[start]
        if draw(st.booleans()):
            rule["not_after"] = TIMES[draw(st.integers(start + 1, 3))]
    if draw(st.integers(0, 2)) == 0:
        rule["when"] = draw(st.lists(conditions(), min_size=1, max_size=2))
    if kind == "grant" and draw(st.integers(0, 3)) == 0:
        rule["requires_approval"] = True
    return rule


@st.composite
def policy_docs(draw: st.DrawFn, max_rules: int = 8) -> dict[str, Any]:
    groups: dict[str, list[str]] = {}
    for i in range(draw(st.integers(0, 3))):
        earlier = [f"role:r{j}" for j in range(i)]
        groups[f"role:r{i}"] = draw(
            st.lists(
                st.one_of(
                    st.sampled_from(SUBJECTS),
                    subject_patterns,
                    *([st.sampled_from(earlier)] if earlier else []),
                ),
                max_size=3,
            )
        )
    if draw(st.booleans()):
        groups["group:res0"] = draw(st.lists(resource_patterns(), min_size=1, max_size=3))
        groups["group:res1"] = ["group:res0", *draw(st.lists(resource_patterns(), max_size=2))]
    if draw(st.booleans()):
        groups["group:act0"] = draw(st.lists(action_patterns, min_size=1, max_size=3))
    n = draw(st.integers(1, max_rules))
    kinds = draw(st.lists(st.sampled_from(["grant", "deny"]), min_size=n, max_size=n))
    doc: dict[str, Any] = {"version": 1, "groups": groups, "grant": [], "deny": []}
    for i, kind in enumerate(kinds):
        doc[kind].append(draw(rules(kind, i, groups)))
    return doc


resource_names = st.lists(st.sampled_from([*SEGMENTS, "..", ".", ""]), min_size=1, max_size=5).map(
    "/".join
)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    context = {
        k: draw(st.sampled_from(["prod", "dev", "production", 1, 2, True, None, [1]]))
        for k in draw(st.lists(st.sampled_from(["env", "n", "flag"]), unique=True))
    }
    return Request(
        subject=draw(st.sampled_from(SUBJECTS)),
        action=draw(st.sampled_from(ACTIONS)),
        resource=draw(st.one_of(resource_names, resource_names.map(lambda r: "/" + r))),
        trust=draw(st.one_of(st.none(), st.sampled_from([*LEVELS, "bogus"]))),
        scopes=frozenset(draw(st.lists(st.sampled_from(["repo", "ci"])))),
        context=context,
        now=draw(
            st.one_of(st.none(), st.sampled_from(TIMES), st.just(TIMES[1] + dt.timedelta(days=15)))
        ),
    )


# Shapes the candidate index files under different dimensions (issue 13): a literal
# segment after a leading wildcard, a user per rule, a group-expanded user per rule, an
# action per rule, a segment after a wildcard segment, a suffix only. Small pools, so
# that keys are sometimes shared and sometimes not.
SHAPED_SUBJECTS = ["user:u0", "user:u1", "user:u2", "user:alice"]
SHAPED_ACTIONS = ["tool.t0", "tool.t1", "fs.read", "fs.write"]
SHAPED_SEGMENTS = ["ws", "shared", "src", "mod1", "mod2", "a.py", "x.py", "eu", ".env"]


@st.composite
def shaped_rules(
    draw: st.DrawFn, kind: str, index: int, groups: dict[str, list[str]]
) -> dict[str, Any]:
    rule = draw(rules(kind, index, {}))
    seg = st.sampled_from(SHAPED_SEGMENTS)
    shape = draw(st.integers(0, 6))
    if shape == 0:
        rule["resources"] = [
            draw(st.sampled_from(["**/{}/*.py", "**/{}/**", "**/{}", "*/{}/**"])).format(draw(seg))
        ]
        rule["actions"] = [draw(st.sampled_from(["fs.*", "**", "*"]))]
    elif shape == 1:
        rule["subjects"] = [draw(st.sampled_from(SHAPED_SUBJECTS))]
        rule["resources"] = [draw(st.sampled_from(["ws/shared/src/**", "ws/**", "**"]))]
    elif shape == 2 and groups:
        rule["subjects"] = [draw(st.sampled_from(sorted(groups)))]
    elif shape == 3:
        rule["actions"] = draw(st.lists(st.sampled_from(SHAPED_ACTIONS), min_size=1, max_size=2))
        rule["resources"] = ["**"]
    elif shape == 4:
        rule["resources"] = [f"ws/*/{draw(seg)}/**", f"/{draw(seg)}/**/{draw(seg)}"]
    elif shape == 5:
        rule["resources"] = [draw(st.sampled_from(["**/*.py", "**/*.env", "ws/*.py"]))]
    return rule


@st.composite
def shaped_policy_docs(draw: st.DrawFn, max_rules: int = 24) -> dict[str, Any]:
    groups = {
        f"role:t{i}": draw(
            st.lists(st.sampled_from([*SHAPED_SUBJECTS, "user:*", "svc:ci"]), max_size=3)
        )
        for i in range(draw(st.integers(0, 3)))
    }
    n = draw(st.integers(1, max_rules))
    kinds = draw(st.lists(st.sampled_from(["grant", "deny"]), min_size=n, max_size=n))
    doc: dict[str, Any] = {"version": 1, "groups": groups, "grant": [], "deny": []}
    for i, kind in enumerate(kinds):
        doc[kind].append(draw(shaped_rules(kind, i, groups)))
    return doc


@st.composite
def shaped_requests(draw: st.DrawFn) -> Request:
    segments = st.lists(st.sampled_from([*SHAPED_SEGMENTS, "b", "..", "."]), min_size=1, max_size=5)
    resource = "/".join(draw(segments))
    return Request(
        subject=draw(st.sampled_from([*SHAPED_SUBJECTS, "svc:ci", "user:bob"])),
        action=draw(st.sampled_from([*SHAPED_ACTIONS, "net.get"])),
        resource=draw(st.sampled_from([resource, "/" + resource])),
        trust=draw(st.one_of(st.none(), st.sampled_from(LEVELS))),
        scopes=frozenset(draw(st.lists(st.sampled_from(["repo", "ci"])))),
        context={"env": draw(st.sampled_from(["prod", "dev"]))},
        now=draw(st.one_of(st.none(), st.sampled_from(TIMES))),
    )
