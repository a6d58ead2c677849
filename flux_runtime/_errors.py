"""The runtime's error: one class with an ``op``, a ``target`` and a ``reason`` enum.

Guarantee: the message names the operation and its target, never a secret (callers
redact before building one). Every refusal of the envelope and the loop is one of
these, so a caller branches on ``reason``, never on message text.
"""

from __future__ import annotations

import enum

__all__ = ["EnvelopeError", "EnvelopeReason"]


class EnvelopeReason(enum.Enum):
    """Why the envelope or the loop refused or stopped."""

    UNKNOWN_OPERATION = "unknown_operation"
    NOT_OFFERED = "not_offered"
    INVALID_INPUT = "invalid_input"
    POLICY_DENIED = "policy_denied"
    APPROVAL_DENIED = "approval_denied"
    RECEIPT_INVALID = "receipt_invalid"
    OPERATION_FAILED = "operation_failed"
    SECRET_UNRESOLVED = "secret_unresolved"  # noqa: S105 (a reason, not a secret)
    BAD_CATALOG = "bad_catalog"
    BAD_STAGE_OUTPUT = "bad_stage_output"
    MODEL_CALLS_EXCEEDED = "model_calls_exceeded"
    ITERATIONS_EXCEEDED = "iterations_exceeded"
    BAD_BOUND = "bad_bound"
    PROVIDER_FAILED = "provider_failed"
    SESSION = "session"
    SANDBOX = "sandbox"
    UNSUPPORTED_CONTENT = "unsupported_content"
    TOO_LARGE = "too_large"


class EnvelopeError(Exception):
    """A refusal or failure of the runtime.

    Attributes:
        op: the operation or stage concerned (``read``, ``explore``, ``session``...).
        target: what it was about (a path, a command, a session id), or ``None``.
        reason: the :class:`EnvelopeReason`.
    """

    def __init__(
        self, message: str, *, op: str, reason: EnvelopeReason, target: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.op = op
        self.target = target
        self.reason = reason

    def __str__(self) -> str:
        where = f" ({self.target})" if self.target else ""
        return f"{self.op}{where}: {self.message}"
