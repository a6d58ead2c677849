"""flux_runtime — the envelope and the thin agent loop; composes every flux package.

The envelope: an operation :class:`Catalog` (data plus one handler over the port
Protocols), :class:`Executor` (``dispatch``: refuse unknown → validate → policy →
approval → guarded IO → redact → evidence), approvers, action batches and one-shot
receipts. The loop: :class:`Turn` over a :class:`Provider`, with sessions in a
:class:`SessionStore`.
"""

from __future__ import annotations

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
