"""The canonical form of a policy and its digest.

The canonical form is JSON with sorted keys, no insignificant whitespace, UTF-8, of a
document in which every order that carries no meaning is fixed: rules sorted by id,
list members sorted and deduplicated (the loader already did that), timestamps as UTC
``YYYY-MM-DDTHH:MM:SS.ffffffZ``, conditions in a fixed order. Defaults are written out,
so a field left out and the same field given its default value digest the same.

Guarantee: equal meaning in, equal digest out, across loads, processes, key orders and
rule orders. The digest is prefixed by a domain tag so it cannot collide with another
flux digest of the same bytes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

from flux_policy._policy import Condition, Policy, Rule

__all__ = ["canonical_bytes", "policy_digest"]

_DOMAIN = b"flux-policy/v1\n"


def _ts(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _condition(cond: Condition) -> dict[str, Any]:
    value = list(cond.value) if isinstance(cond.value, tuple) else cond.value
    return {"attr": cond.attr, "op": cond.op.value, "value": value}


def _rule(rule: Rule) -> dict[str, Any]:
    conditions = sorted(
        (_condition(c) for c in rule.when),
        key=lambda c: json.dumps(c, sort_keys=True, ensure_ascii=False),
    )
    return {
        "id": rule.id,
        "kind": rule.kind.value,
        "subjects": list(rule.subjects),
        "actions": list(rule.actions),
        "resources": list(rule.resources),
        "min_trust": rule.min_trust,
        "max_trust": rule.max_trust,
        "scopes": list(rule.scopes),
        "requires_approval": rule.requires_approval,
        "not_before": _ts(rule.not_before),
        "not_after": _ts(rule.not_after),
        "when": conditions,
    }


def canonical_bytes(policy: Policy) -> bytes:
    """The canonical serialisation of *policy* (what the digest is computed over)."""
    doc = {
        "version": policy.version,
        "trust_levels": list(policy.trust_levels),
        "groups": {name: sorted(set(members)) for name, members in policy.groups.items()},
        "rules": [_rule(r) for r in sorted(policy.rules, key=lambda r: r.id)],
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def policy_digest(policy: Policy) -> str:
    """``"sha256:" + hex`` of the domain tag and the canonical form of *policy*."""
    return "sha256:" + hashlib.sha256(_DOMAIN + canonical_bytes(policy)).hexdigest()
