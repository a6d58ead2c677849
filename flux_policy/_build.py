"""Semantic validation: a shape-checked :class:`PolicyModel` into a :class:`Policy`.

Checks what pydantic cannot: rule ids (format, uniqueness across grants and denies),
patterns (``_pattern.py``), group names, references and cycles, trust names and
bounds, scopes, timestamps and windows, conditions. Every refusal is a
:class:`PolicyLoadError` naming the rule (or group) and the field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

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

__all__ = ["build_policy", "fail"]

_MAX_RULES = 100_000
_MAX_GROUPS = 10_000
_MAX_LIST = 10_000  # members of one list (subjects, group members, `in` operands, ...)
_MAX_TRUST_LEVELS = 64
# Groups nested deeper than this are refused: both evaluators walk the nesting by
# recursion, and no real role hierarchy is this deep.
MAX_GROUP_DEPTH = 32
# Bound on the flattened policy (an upper bound, duplicates counted): the groups' leaf
# counts plus, per rule, |subjects| + |actions| + |resources| x |actions| expanded —
# what the indexed evaluator materialises. A few hundred kB of groups can otherwise
# flatten to tens of millions of entries.
MAX_EXPANSION = 2_000_000
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,127}")
_GROUP_NAME = re.compile(r"(?:role|group):[A-Za-z0-9_.:@/+-]{1,128}")
_TEXT = re.compile(r"[^\x00-\x1f\x7f-\x9f\ud800-\udfff]{1,256}")
# A condition's string operand: any length, but UTF-8 encodable (it is digested).
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def fail(
    reason: PolicyLoadReason,
    message: str,
    source: str,
    rule: str | None = None,
    field: str | None = None,
) -> PolicyLoadError:
    return PolicyLoadError(message, reason=reason, source=source, rule=rule, field=field)


def build_policy(model: PolicyModel, source: str) -> Policy:
    """Validate *model* and return the :class:`Policy`, digest included."""
    return _Builder(model, source).build()


class _Builder:
    """Turns a shape-checked :class:`PolicyModel` into a validated :class:`Policy`."""

    def __init__(self, model: PolicyModel, source: str) -> None:
        self.model = model
        self.source = source
        self.levels: tuple[str, ...] = DEFAULT_TRUST_LEVELS
        self.groups: dict[str, tuple[str, ...]] = {}
        self.sizes: dict[str, int] = {}  # leaf count of each group (upper bound)
        self.expansion = 0  # running total against MAX_EXPANSION

    def fail(
        self, reason: PolicyLoadReason, msg: str, rule: str | None, field: str | None
    ) -> PolicyLoadError:
        return fail(reason, msg, self.source, rule, field)

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
            groups=MappingProxyType(dict(sorted(self.groups.items()))),
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
        self._check_groups()

    def _check_groups(self) -> None:
        """Refuse cycles, nesting over MAX_GROUP_DEPTH and flattening over MAX_EXPANSION."""
        # Iterative DFS (no recursion limit to hit); colours: 1 on the stack, 2 done.
        colour: dict[str, int] = {}
        depth: dict[str, int] = {}
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
                    self._measure(node, depth)
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

    def _measure(self, node: str, depth: dict[str, int]) -> None:
        depth[node] = 1 + max((depth[g] for g in self._subgroups(node)), default=0)
        if depth[node] > MAX_GROUP_DEPTH:
            raise self.fail(
                PolicyLoadReason.TOO_MANY,
                f"groups nested more than {MAX_GROUP_DEPTH} deep",
                node,
                f"groups.{node}",
            )
        self.sizes[node] = self._size(self.groups[node])
        self._spend(self.sizes[node], node, f"groups.{node}")

    def _size(self, entries: Sequence[str]) -> int:
        return sum(self.sizes.get(e, 1) if is_group_ref(e) else 1 for e in entries)

    def _spend(self, amount: int, rule: str, field: str) -> None:
        self.expansion += amount
        if self.expansion > MAX_EXPANSION:
            raise self.fail(
                PolicyLoadReason.TOO_MANY,
                f"policy flattens to more than {MAX_EXPANSION} entries",
                rule,
                field,
            )

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
        actions = self._size(raw.actions)
        cost = self._size(raw.subjects) + actions + self._size(raw.resources) * actions
        self._spend(cost, rid, prefix)
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
        try:
            return value.astimezone(dt.UTC)
        except OverflowError as exc:  # e.g. 0001-01-01T00:00:00+14:00 is before year 1 in UTC
            raise self.fail(
                PolicyLoadReason.BAD_TIMESTAMP, "timestamp out of range in UTC", rid, field
            ) from exc

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
        operands = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and _SURROGATE.search(v) for v in operands):
            raise self.fail(
                PolicyLoadReason.BAD_CONDITION,
                "a string operand holds a lone surrogate",
                rid,
                f"{field}.{op.value}",
            )
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
