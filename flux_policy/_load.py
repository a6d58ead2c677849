"""Loading policies from a file, a string or a dict, and combining several.

Guarantee: a returned :class:`Policy` is fully validated (see ``_policy.py``); any
problem raises :class:`PolicyLoadError` naming the rule (or group) and the field, and
nothing partial is returned. The only IO is reading the one file the caller names.
Not guaranteed: that the policy means what its author intended.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pydantic

from flux_policy._canonical import policy_digest
from flux_policy._exceptions import PolicyLoadError, PolicyLoadReason
from flux_policy._model import ConditionModel, DenyModel, GrantModel, PolicyModel
from flux_policy._pattern import is_group_ref, pattern_problem
from flux_policy._policy import (
    DEFAULT_TRUST_LEVELS,
    Condition,
    ConditionOp,
    Policy,
    Rule,
    RuleKind,
)

__all__ = [
    "combine_policies",
    "load_policies",
    "load_policy",
    "load_policy_dict",
    "load_policy_string",
]

_MAX_POLICY_BYTES = 8 * 1024 * 1024  # bounds the read and the TOML parse
_MAX_RULES = 100_000
_MAX_GROUPS = 10_000
_MAX_LIST = 10_000  # members of one list (subjects, group members, `in` operands, ...)
_MAX_TRUST_LEVELS = 64
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,127}")
_GROUP_NAME = re.compile(r"(?:role|group):[A-Za-z0-9_.:@/+-]{1,128}")
_TEXT = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,256}")
_UNION_TAG = re.compile(r"^(bool|int|str|datetime|list\[.*\]|union\[.*\])$")


def _fail(
    reason: PolicyLoadReason,
    message: str,
    source: str,
    rule: str | None = None,
    field: str | None = None,
) -> PolicyLoadError:
    return PolicyLoadError(message, reason=reason, source=source, rule=rule, field=field)


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and validate the TOML policy file *path* (the caller names it).

    Raises:
        PolicyLoadError: unreadable, too large, not UTF-8 TOML, or invalid.
    """
    source = os.fspath(path)
    if not isinstance(source, str):
        raise TypeError("path must be a str or os.PathLike[str]")
    try:
        with open(source, "rb") as fh:
            data = fh.read(_MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise _fail(PolicyLoadReason.IO, exc.strerror or "unreadable", source) from exc
    if len(data) > _MAX_POLICY_BYTES:
        raise _fail(PolicyLoadReason.TOO_LARGE, "policy file too large", source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(PolicyLoadReason.ENCODING, "policy file is not UTF-8", source) from exc
    return load_policy_string(text, source=source)


def load_policy_string(text: str, *, source: str = "<string>") -> Policy:
    """Parse and validate TOML policy *text*; *source* labels errors."""
    if not isinstance(text, str):
        raise TypeError("text must be a str")
    if len(text) > _MAX_POLICY_BYTES:
        raise _fail(PolicyLoadReason.TOO_LARGE, "policy text too large", source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(PolicyLoadReason.SYNTAX, f"invalid TOML: {exc}", source) from exc
    return load_policy_dict(data, source=source)


def load_policy_dict(data: Mapping[str, Any], *, source: str = "<dict>") -> Policy:
    """Validate a policy document already parsed into a mapping (as TOML would give)."""
    if not isinstance(data, Mapping):
        raise TypeError("data must be a mapping")
    try:
        model = PolicyModel.model_validate(dict(data))
    except pydantic.ValidationError as exc:
        raise _from_validation(exc, data, source) from exc
    return _Builder(model, source).build()


def load_policies(paths: Iterable[str | os.PathLike[str]]) -> Policy:
    """Load each file and combine them into one policy (see :func:`combine_policies`)."""
    return combine_policies([load_policy(p) for p in paths])


def combine_policies(policies: Sequence[Policy], *, source: str = "<combined>") -> Policy:
    """Combine several policies into one: the union of their groups and rules.

    Each input must be self-contained (its rules reference only its own groups). They
    must declare the same trust order; a group defined in several must have the same
    members; rule ids must be unique across all.

    Raises:
        PolicyLoadError: TRUST_MISMATCH, DUPLICATE_GROUP or DUPLICATE_ID.
        ValueError: no policy given.
    """
    if not policies:
        raise ValueError("combine_policies needs at least one policy")
    first = policies[0]
    groups: dict[str, tuple[str, ...]] = {}
    rules: dict[str, Rule] = {}
    for policy in policies:
        if policy.trust_levels != first.trust_levels:
            raise _fail(
                PolicyLoadReason.TRUST_MISMATCH,
                "combined policies declare different trust orders",
                source,
                field="trust_levels",
            )
        for name, members in policy.groups.items():
            if name in groups and groups[name] != members:
                raise _fail(
                    PolicyLoadReason.DUPLICATE_GROUP,
                    "group defined differently in combined policies",
                    source,
                    rule=name,
                    field=f"groups.{name}",
                )
            groups[name] = members
        for rule in policy.rules:
            if rule.id in rules:
                raise _fail(
                    PolicyLoadReason.DUPLICATE_ID,
                    "rule id used in more than one combined policy",
                    source,
                    rule=rule.id,
                    field="id",
                )
            rules[rule.id] = rule
    merged = Policy(
        version=first.version,
        trust_levels=first.trust_levels,
        groups=dict(sorted(groups.items())),
        rules=tuple(sorted(rules.values(), key=lambda r: r.id)),
    )
    return dataclasses.replace(merged, digest=policy_digest(merged))


def _from_validation(
    exc: pydantic.ValidationError, data: Mapping[str, Any], source: str
) -> PolicyLoadError:
    err = exc.errors()[0]
    loc = [p for i, p in enumerate(err["loc"]) if i == 0 or not _is_tag(p)]
    reason = {
        "extra_forbidden": PolicyLoadReason.UNKNOWN_KEY,
        "missing": PolicyLoadReason.MISSING_FIELD,
    }.get(err["type"], PolicyLoadReason.BAD_TYPE)
    rule: str | None = None
    if len(loc) >= 2 and loc[0] in ("grant", "deny") and isinstance(loc[1], int):
        try:
            candidate = data[str(loc[0])][loc[1]].get("id")
        except (AttributeError, IndexError, KeyError, TypeError):
            candidate = None
        rule = candidate if isinstance(candidate, str) else None
    elif len(loc) >= 2 and loc[0] == "groups" and isinstance(loc[1], str):
        rule = loc[1]
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return _fail(reason, err["msg"], source, rule=rule, field=field or None)


def _is_tag(part: object) -> bool:
    return isinstance(part, str) and bool(_UNION_TAG.match(part))


class _Builder:
    """Turns a shape-checked :class:`PolicyModel` into a validated :class:`Policy`."""

    def __init__(self, model: PolicyModel, source: str) -> None:
        self.model = model
        self.source = source
        self.levels: tuple[str, ...] = DEFAULT_TRUST_LEVELS
        self.groups: dict[str, tuple[str, ...]] = {}

    def fail(
        self, reason: PolicyLoadReason, msg: str, rule: str | None, field: str | None
    ) -> PolicyLoadError:
        return _fail(reason, msg, self.source, rule, field)

    def build(self) -> Policy:
        m = self.model
        if m.version != 1:
            raise self.fail(PolicyLoadReason.BAD_VERSION, "only version 1", None, "version")
        self._trust_levels()
        self._groups()
        if len(m.grant) + len(m.deny) > _MAX_RULES:
            raise self.fail(PolicyLoadReason.TOO_MANY, "too many rules", None, None)
        rules: dict[str, Rule] = {}
        items: list[tuple[str, int, GrantModel | DenyModel]] = [
            *(("grant", i, r) for i, r in enumerate(m.grant)),
            *(("deny", i, r) for i, r in enumerate(m.deny)),
        ]
        for kind, index, raw in items:
            rule = self._rule(kind, index, raw)
            if rule.id in rules:
                raise self.fail(
                    PolicyLoadReason.DUPLICATE_ID,
                    "duplicate rule id",
                    rule.id,
                    f"{kind}[{index}].id",
                )
            rules[rule.id] = rule
        policy = Policy(
            version=1,
            trust_levels=self.levels,
            groups=dict(sorted(self.groups.items())),
            rules=tuple(sorted(rules.values(), key=lambda r: r.id)),
        )
        return dataclasses.replace(policy, digest=policy_digest(policy))

    def _trust_levels(self) -> None:
        raw = self.model.trust_levels
        if raw is None:
            return
        bad = (
            not raw
            or len(raw) > _MAX_TRUST_LEVELS
            or len(set(raw)) != len(raw)
            or not all(_TEXT.fullmatch(x) for x in raw)
        )
        if bad:
            raise self.fail(
                PolicyLoadReason.BAD_TRUST_LEVELS,
                "trust_levels must be a non-empty list of distinct names",
                None,
                "trust_levels",
            )
        self.levels = tuple(raw)

    def _groups(self) -> None:
        raw = self.model.groups
        if len(raw) > _MAX_GROUPS:
            raise self.fail(PolicyLoadReason.TOO_MANY, "too many groups", None, "groups")
        for name, members in raw.items():
            field = f"groups.{name}"
            if not _GROUP_NAME.fullmatch(name):
                raise self.fail(
                    PolicyLoadReason.BAD_GROUP_NAME,
                    "a group name is 'role:NAME' or 'group:NAME'",
                    name,
                    field,
                )
            if len(members) > _MAX_LIST:
                raise self.fail(PolicyLoadReason.TOO_MANY, "too many members", name, field)
            for i, member in enumerate(members):
                self._entry(member, name, f"{field}[{i}]", declared=raw, resource=False)
            self.groups[name] = tuple(sorted(set(members)))
        self._check_acyclic()

    def _check_acyclic(self) -> None:
        # Iterative DFS (no recursion limit to hit); colours: 1 on the stack, 2 done.
        colour: dict[str, int] = {}
        for start in sorted(self.groups):
            if colour.get(start):
                continue
            stack: list[tuple[str, list[str]]] = [(start, self._subgroups(start))]
            colour[start] = 1
            while stack:
                node, todo = stack[-1]
                if not todo:
                    colour[node] = 2
                    stack.pop()
                    continue
                child = todo.pop()
                if colour.get(child) == 1:
                    path = [n for n, _ in stack]
                    cycle = [*path[path.index(child) :], child]
                    raise self.fail(
                        PolicyLoadReason.GROUP_CYCLE,
                        "groups form a cycle: " + " -> ".join(cycle),
                        node,
                        f"groups.{node}",
                    )
                if not colour.get(child):
                    colour[child] = 1
                    stack.append((child, self._subgroups(child)))

    def _subgroups(self, name: str) -> list[str]:
        return sorted(m for m in self.groups[name] if is_group_ref(m))

    def _leaves(self, group: str) -> set[str]:
        out: set[str] = set()
        seen: set[str] = set()
        todo = [group]
        while todo:
            g = todo.pop()
            if g in seen:
                continue
            seen.add(g)
            for m in self.groups[g]:
                if is_group_ref(m):
                    todo.append(m)
                else:
                    out.add(m)
        return out

    def _entry(
        self,
        entry: str,
        rule: str,
        field: str,
        *,
        declared: Mapping[str, object],
        resource: bool,
    ) -> None:
        if is_group_ref(entry):
            if entry not in declared:
                raise self.fail(
                    PolicyLoadReason.UNKNOWN_GROUP, f"unknown group {entry!r}", rule, field
                )
            if resource:
                for leaf in sorted(self._leaves(entry)):
                    problem = pattern_problem(leaf, resource=True)
                    if problem is not None:
                        raise self.fail(
                            PolicyLoadReason.INVALID_PATTERN,
                            f"member {leaf!r} of {entry!r} {problem}",
                            rule,
                            field,
                        )
            return
        problem = pattern_problem(entry, resource=resource)
        if problem is not None:
            raise self.fail(
                PolicyLoadReason.INVALID_PATTERN, f"pattern {entry!r} {problem}", rule, field
            )

    def _rule(self, kind: str, index: int, raw: GrantModel | DenyModel) -> Rule:
        prefix = f"{kind}[{index}]"
        if not _ID.fullmatch(raw.id):
            raise self.fail(PolicyLoadReason.BAD_ID, "invalid rule id", raw.id, f"{prefix}.id")
        rid = raw.id
        lists: dict[str, tuple[str, ...]] = {}
        for name in ("subjects", "actions", "resources"):
            values: list[str] = getattr(raw, name)
            if not values:
                raise self.fail(
                    PolicyLoadReason.EMPTY_LIST, "must not be empty", rid, f"{prefix}.{name}"
                )
            if len(values) > _MAX_LIST:
                raise self.fail(
                    PolicyLoadReason.TOO_MANY, "too many entries", rid, f"{prefix}.{name}"
                )
            for i, value in enumerate(values):
                self._entry(
                    value,
                    rid,
                    f"{prefix}.{name}[{i}]",
                    declared=self.groups,
                    resource=name == "resources",
                )
            lists[name] = tuple(sorted(set(values)))
        for name in ("min_trust", "max_trust"):
            level = getattr(raw, name)
            if level is not None and level not in self.levels:
                raise self.fail(
                    PolicyLoadReason.UNKNOWN_TRUST_LEVEL,
                    f"unknown level {level!r}",
                    rid,
                    f"{prefix}.{name}",
                )
        if (
            raw.min_trust is not None
            and raw.max_trust is not None
            and self.levels.index(raw.min_trust) > self.levels.index(raw.max_trust)
        ):
            raise self.fail(
                PolicyLoadReason.BAD_TRUST_LEVELS,
                "min_trust above max_trust",
                rid,
                f"{prefix}.max_trust",
            )
        if len(raw.scopes) > _MAX_LIST:
            raise self.fail(PolicyLoadReason.TOO_MANY, "too many scopes", rid, f"{prefix}.scopes")
        for i, scope in enumerate(raw.scopes):
            if not _TEXT.fullmatch(scope):
                raise self.fail(
                    PolicyLoadReason.BAD_SCOPE, "invalid scope", rid, f"{prefix}.scopes[{i}]"
                )
        not_before = self._timestamp(raw.not_before, rid, f"{prefix}.not_before")
        not_after = self._timestamp(raw.not_after, rid, f"{prefix}.not_after")
        if not_before is not None and not_after is not None and not_before >= not_after:
            raise self.fail(
                PolicyLoadReason.EMPTY_WINDOW,
                "not_before is not before not_after",
                rid,
                f"{prefix}.not_after",
            )
        if len(raw.when) > _MAX_LIST:
            raise self.fail(PolicyLoadReason.TOO_MANY, "too many conditions", rid, f"{prefix}.when")
        when = tuple(self._condition(c, rid, f"{prefix}.when[{i}]") for i, c in enumerate(raw.when))
        return Rule(
            id=rid,
            kind=RuleKind(kind),
            subjects=lists["subjects"],
            actions=lists["actions"],
            resources=lists["resources"],
            min_trust=raw.min_trust,
            max_trust=raw.max_trust,
            scopes=tuple(sorted(set(raw.scopes))),
            requires_approval=isinstance(raw, GrantModel) and raw.requires_approval,
            not_before=not_before,
            not_after=not_after,
            when=when,
        )

    def _timestamp(
        self, value: dt.datetime | str | None, rid: str, field: str
    ) -> dt.datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = dt.datetime.fromisoformat(value)
            except ValueError as exc:
                raise self.fail(
                    PolicyLoadReason.BAD_TIMESTAMP, "not an ISO 8601 timestamp", rid, field
                ) from exc
        if value.tzinfo is None or value.utcoffset() is None:
            raise self.fail(
                PolicyLoadReason.BAD_TIMESTAMP, "timestamp needs a UTC offset", rid, field
            )
        return value.astimezone(dt.UTC)

    def _condition(self, raw: ConditionModel, rid: str, field: str) -> Condition:
        if not _TEXT.fullmatch(raw.attr):
            raise self.fail(PolicyLoadReason.BAD_CONDITION, "invalid attr", rid, f"{field}.attr")
        ops = [
            (op, v)
            for op, v in (
                (ConditionOp.EQUALS, raw.equals),
                (ConditionOp.IN, raw.in_),
                (ConditionOp.PREFIX, raw.prefix),
            )
            if v is not None
        ]
        if len(ops) != 1:
            raise self.fail(
                PolicyLoadReason.BAD_CONDITION,
                "a condition has exactly one of equals, in, prefix",
                rid,
                field,
            )
        op, value = ops[0]
        if isinstance(value, list):
            if not value or len(value) > _MAX_LIST or len({type(v) for v in value}) != 1:
                raise self.fail(
                    PolicyLoadReason.BAD_CONDITION,
                    "'in' takes a non-empty list of values of one type",
                    rid,
                    f"{field}.in",
                )
            return Condition(raw.attr, op, tuple(sorted(set(value))))
        return Condition(raw.attr, op, value)
