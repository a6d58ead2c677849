"""flux_runtime — the envelope and the thin agent loop; composes every flux package.

The envelope: an operation :class:`Catalog` (data plus one handler over the port
Protocols), :class:`Executor` (``dispatch``: refuse unknown → validate → policy →
approval → guarded IO → redact → evidence), approvers, action batches and one-shot
receipts. The loop: :class:`Turn` over a :class:`Provider`, with sessions in a
:class:`SessionStore`.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from flux_runtime._approval import (
        ApprovalRequest,
        Approver,
        AutoLowApprover,
        HeadlessApprover,
        ScriptedApprover,
        TerminalApprover,
    )
    from flux_runtime._batch import Action, ActionBatch, MemoryLedger, Receipt, ReceiptBook
    from flux_runtime._catalog import EFFECTS, Catalog, Operation, Result, Risk, parse_effects
    from flux_runtime._defaults import DEFAULT_POLICY, default_catalog, default_policy
    from flux_runtime._errors import EnvelopeError, EnvelopeReason
    from flux_runtime._executor import Call, Context, Executor, Outcome
    from flux_runtime._loop import Bounds, Turn, TurnResult
    from flux_runtime._provider import ModelRequest, Provider, ScriptedProvider
    from flux_runtime._session import SessionStore, default_store_path

# Loaded on first use, so that ``flux exec`` (which imports ``flux_runtime.cli``) does
# not pay for pydantic and the policy engine (DESIGN §5).
_LAZY = {
    "Action": "flux_runtime._batch",
    "ActionBatch": "flux_runtime._batch",
    "ApprovalRequest": "flux_runtime._approval",
    "Approver": "flux_runtime._approval",
    "AutoLowApprover": "flux_runtime._approval",
    "Bounds": "flux_runtime._loop",
    "Call": "flux_runtime._executor",
    "Catalog": "flux_runtime._catalog",
    "Context": "flux_runtime._executor",
    "DEFAULT_POLICY": "flux_runtime._defaults",
    "EFFECTS": "flux_runtime._catalog",
    "EnvelopeError": "flux_runtime._errors",
    "EnvelopeReason": "flux_runtime._errors",
    "Executor": "flux_runtime._executor",
    "HeadlessApprover": "flux_runtime._approval",
    "MemoryLedger": "flux_runtime._batch",
    "ModelRequest": "flux_runtime._provider",
    "Operation": "flux_runtime._catalog",
    "Outcome": "flux_runtime._executor",
    "Provider": "flux_runtime._provider",
    "Receipt": "flux_runtime._batch",
    "ReceiptBook": "flux_runtime._batch",
    "Result": "flux_runtime._catalog",
    "Risk": "flux_runtime._catalog",
    "ScriptedApprover": "flux_runtime._approval",
    "ScriptedProvider": "flux_runtime._provider",
    "SessionStore": "flux_runtime._session",
    "TerminalApprover": "flux_runtime._approval",
    "Turn": "flux_runtime._loop",
    "TurnResult": "flux_runtime._loop",
    "default_catalog": "flux_runtime._defaults",
    "default_policy": "flux_runtime._defaults",
    "default_store_path": "flux_runtime._session",
    "parse_effects": "flux_runtime._catalog",
}

__all__ = [
    "Action",
    "ActionBatch",
    "ApprovalRequest",
    "Approver",
    "AutoLowApprover",
    "Bounds",
    "Call",
    "Catalog",
    "Context",
    "DEFAULT_POLICY",
    "EFFECTS",
    "EnvelopeError",
    "EnvelopeReason",
    "Executor",
    "HeadlessApprover",
    "MemoryLedger",
    "ModelRequest",
    "Operation",
    "Outcome",
    "Provider",
    "Receipt",
    "ReceiptBook",
    "Result",
    "Risk",
    "ScriptedApprover",
    "ScriptedProvider",
    "SessionStore",
    "TerminalApprover",
    "Turn",
    "TurnResult",
    "default_catalog",
    "default_policy",
    "default_store_path",
    "parse_effects",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flux_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
