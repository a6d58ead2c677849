"""Action batches and one-shot receipts.

A :class:`ActionBatch` freezes the effectful calls a turn captured (``{op, input}``)
with a digest over their canonical JSON. :meth:`ReceiptBook.issue` returns a
:class:`Receipt` bound to (batch digest, session, caller, policy digest) and MAC'd with
a key only the book holds, so a model cannot mint one. :meth:`ReceiptBook.consume`
checks every binding, the age and the MAC, then marks the receipt used in its
:class:`Ledger` — atomically, so a receipt is consumed at most once even across a
restart when the ledger is durable (the session store).

Guarantee: a changed batch, another session, caller or policy, a receipt older than
``max_age_s``, a forged or reused receipt: all raise
:class:`~flux_runtime.EnvelopeError` with ``RECEIPT_INVALID``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flux_runtime._errors import EnvelopeError, EnvelopeReason

__all__ = ["Action", "ActionBatch", "Ledger", "MemoryLedger", "Receipt", "ReceiptBook"]


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Action:
    op: str
    input_json: str  # canonical JSON: the action cannot change under the digest

    @classmethod
    def of(cls, op: str, inp: Mapping[str, Any]) -> Action:
        return cls(op, _canonical(dict(inp)).decode())

    @property
    def input(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.input_json)
        return value

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "input": self.input}


@dataclass(frozen=True, slots=True)
class ActionBatch:
    """An immutable, ordered batch of actions and the digest that names it."""

    actions: tuple[Action, ...]
    digest: str

    @classmethod
    def freeze(cls, actions: Sequence[Action]) -> ActionBatch:
        items = tuple(actions)
        body = _canonical([a.to_json() for a in items])
        return cls(items, "sha256:" + hashlib.sha256(body).hexdigest())

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "actions": [a.to_json() for a in self.actions]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ActionBatch:
        """Rebuild and re-digest; the stored digest must match (else: changed)."""
        batch = cls.freeze([Action.of(a["op"], a["input"]) for a in data["actions"]])
        if batch.digest != data.get("digest"):
            raise _invalid("the stored batch does not match its digest", batch.digest)
        return batch


@dataclass(frozen=True, slots=True)
class Receipt:
    id: str
    batch_digest: str
    session: str
    caller: str
    policy_digest: str
    issued_at: float
    mac: str

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Receipt:
        return cls(**{k: data[k] for k in cls.__slots__})


@typing.runtime_checkable
class Ledger(typing.Protocol):
    """Where consumed receipt ids live. ``consume`` is atomic: True the first time only."""

    def consume(self, receipt_id: str, session: str) -> bool: ...


class MemoryLedger:
    """A process-local :class:`Ledger` (tests, one-shot runs)."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._lock = threading.Lock()

    def consume(self, receipt_id: str, session: str) -> bool:
        with self._lock:
            if receipt_id in self._used:
                return False
            self._used.add(receipt_id)
            return True


def _invalid(why: str, target: str | None = None) -> EnvelopeError:
    return EnvelopeError(why, op="receipt", reason=EnvelopeReason.RECEIPT_INVALID, target=target)


class ReceiptBook:
    """Issues and consumes receipts (see the module docstring)."""

    def __init__(self, ledger: Ledger, *, key: bytes | None = None, max_age_s: float = 900.0):
        self._ledger = ledger
        self._key = key if key is not None else os.urandom(32)
        self._max_age = max_age_s

    def _mac(self, fields: Sequence[object]) -> str:
        return hmac.new(self._key, _canonical(list(fields)), hashlib.sha256).hexdigest()

    def issue(
        self, batch: ActionBatch, *, session: str, caller: str, policy_digest: str
    ) -> Receipt:
        rid, now = os.urandom(16).hex(), time.time()
        mac = self._mac([rid, batch.digest, session, caller, policy_digest, now])
        return Receipt(rid, batch.digest, session, caller, policy_digest, now, mac)

    def consume(
        self,
        receipt: Receipt,
        batch: ActionBatch,
        *,
        session: str,
        caller: str,
        policy_digest: str,
    ) -> None:
        """Check *receipt* against what is about to run, then use it up.

        Raises:
            EnvelopeError: RECEIPT_INVALID, saying which binding failed.
        """
        r = receipt
        want = self._mac([r.id, r.batch_digest, r.session, r.caller, r.policy_digest, r.issued_at])
        if not hmac.compare_digest(want, r.mac):
            raise _invalid("receipt not issued by this runtime", r.id)
        if r.batch_digest != batch.digest:
            raise _invalid("the batch changed after approval", batch.digest)
        if r.session != session:
            raise _invalid("receipt belongs to another session", session)
        if r.caller != caller:
            raise _invalid("receipt belongs to another caller", caller)
        if r.policy_digest != policy_digest:
            raise _invalid("the policy changed after approval", policy_digest)
        if not 0 <= time.time() - r.issued_at <= self._max_age:
            raise _invalid("receipt is stale", r.id)
        if not self._ledger.consume(r.id, session):
            raise _invalid("receipt already used", r.id)
