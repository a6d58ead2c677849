"""Pydantic models of the policy file (shape only: keys and types).

These models check the *shape* of a policy document — unknown keys are refused
(``extra="forbid"``), types are strict (no coercion: ``"1"`` is not ``1``, ``1`` is not
``true``). Meaning (patterns, groups, trust names, windows) is checked afterwards by
``_load.py``, which turns these models into the plain values of ``_policy.py``.

File format (version 1)::

    version = 1
    trust_levels = ["untrusted", "low", "medium", "high", "system"]   # optional
    [groups]
    "role:dev" = ["user:alice", "role:admins"]
    [[grant]]
    id = "..."; subjects = [...]; actions = [...]; resources = [...]
    min_trust = "low"; max_trust = "high"; scopes = ["repo"]
    requires_approval = false; not_before = ...; not_after = ...
    when = [{ attr = "env", equals = "prod" }]
    [[deny]]            # same fields as a grant, without requires_approval
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

__all__ = ["ConditionModel", "DenyModel", "GrantModel", "PolicyModel", "Scalar"]

Scalar = StrictBool | StrictInt | StrictStr
Timestamp = dt.datetime | StrictStr

_CONFIG = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)


class ConditionModel(BaseModel):
    """One typed condition on a request context attribute: exactly one operator."""

    model_config = _CONFIG

    attr: StrictStr
    equals: Scalar | None = None
    in_: Annotated[list[Scalar] | None, Field(alias="in")] = None
    prefix: StrictStr | None = None


class _RuleModel(BaseModel):
    model_config = _CONFIG

    id: StrictStr
    subjects: list[StrictStr]
    actions: list[StrictStr]
    resources: list[StrictStr]
    min_trust: StrictStr | None = None
    max_trust: StrictStr | None = None
    scopes: list[StrictStr] = []
    not_before: Timestamp | None = None
    not_after: Timestamp | None = None
    when: list[ConditionModel] = []


class GrantModel(_RuleModel):
    """A ``[[grant]]`` table."""

    requires_approval: StrictBool = False


class DenyModel(_RuleModel):
    """A ``[[deny]]`` table (a deny has no approval: it always denies when it applies)."""


class PolicyModel(BaseModel):
    """A whole policy document."""

    model_config = _CONFIG

    version: StrictInt
    trust_levels: list[StrictStr] | None = None
    groups: dict[StrictStr, list[StrictStr]] = {}
    grant: list[GrantModel] = []
    deny: list[DenyModel] = []
