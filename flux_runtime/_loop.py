"""The thin adaptive loop: intent → explore → freeze → approve → execute → present.

- **intent**: the model names an intent (``inspect`` or ``change``) and may narrow the
  operations it wants; intent narrows what the model is *shown*, never what it may do.
- **explore** (one iteration per model call): gather-safe operations (by catalog
  metadata, :attr:`Operation.gather_safe`) run at once through the executor and their
  views go back to the model; every other call is captured as ``{op, input}``. A
  call to an operation not offered is refused and recorded.
- **freeze / approve**: the captured calls become an :class:`ActionBatch`; the approver
  sees it whole; approval yields a one-shot receipt bound to the batch, session, caller
  and policy digest.
- **execute**: the receipt is consumed (durably) first, then the actions run in order;
  a failed action skips the rest. A session found mid-execution on resume is refused —
  completed effects are never replayed.
- **present**: the model's answer, over what happened.

A ``question`` at any stage suspends the turn (state saved); :meth:`Turn.resume`
continues with the user's answer. Bounds: ``max_model_calls`` across the whole session
and ``max_iterations`` explore rounds per turn; exceeding either fails the turn; an
explore reply of more than :data:`MAX_CALLS_PER_REPLY` calls is refused whole (none
runs), and a batch holds at most :data:`MAX_BATCH` actions.
Every step is an evidence record, in order.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flux_runtime._approval import ApprovalRequest, Approver, ask
from flux_runtime._batch import Action, ActionBatch, Receipt, ReceiptBook
from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_runtime._executor import Call, Context, Executor
from flux_runtime._provider import ModelRequest, Provider
from flux_runtime._session import SessionStore
from flux_runtime._stages import STAGE_TAGS, excerpt, parse_stage

__all__ = ["MAX_BATCH", "MAX_CALLS_PER_REPLY", "Bounds", "Turn", "TurnResult"]

# One explore reply's calls, and the actions one batch may hold: the iteration bound
# counts replies, so without these one reply could carry any number of operations
# (each dispatched and recorded) and one approval prompt any number of actions.
MAX_CALLS_PER_REPLY = 64
MAX_BATCH = 100


@dataclass(frozen=True, slots=True)
class Bounds:
    max_model_calls: int = 50
    max_iterations: int = 50

    def __post_init__(self) -> None:
        if not 1 <= self.max_iterations <= 1000:
            raise EnvelopeError(
                "max_iterations must be within 1..1000",
                op="bounds",
                reason=EnvelopeReason.BAD_BOUND,
                target=str(self.max_iterations),
            )
        if self.max_model_calls < 1:
            raise EnvelopeError(
                "max_model_calls must be at least 1",
                op="bounds",
                reason=EnvelopeReason.BAD_BOUND,
                target=str(self.max_model_calls),
            )


@dataclass(frozen=True, slots=True)
class TurnResult:
    session: str
    status: str  # done | suspended | failed
    answer: str | None = None
    question: str | None = None
    error: EnvelopeError | None = None
    outcomes: tuple[dict[str, Any], ...] = ()


class Turn:
    """Runs turns of one session store with one executor, provider and approver."""

    def __init__(
        self,
        executor: Executor,
        provider: Provider,
        store: SessionStore,
        approver: Approver,
        *,
        caller: str = "agent",
        bounds: Bounds | None = None,
        book: ReceiptBook | None = None,
        show: Callable[[str], None] | None = None,
    ) -> None:
        self.ex, self.provider, self.store, self.approver = executor, provider, store, approver
        self.caller, self.bounds, self.show = caller, bounds or Bounds(), show
        self.book = book or ReceiptBook(store, key=store.receipt_key())

    # -- entry points --------------------------------------------------------------
    def start(self, prompt: str, session: str | None = None) -> TurnResult:
        sid = session or os.urandom(8).hex()
        st: dict[str, Any] = {
            "session": sid,
            "prompt": prompt,
            "stage": "intent",
            "messages": [{"role": "user", "content": prompt}],
            "model_calls": 0,
            "iterations": 0,
            "pending": [],
            "offered": None,
            "outcomes": [],
            "turn": 1,
        }
        self._log(
            st,
            "turn.start",
            {
                "prompt": self.ex.redactor.redact(prompt),
                "bounds": [self.bounds.max_model_calls, self.bounds.max_iterations],
            },
        )
        return self._drive(st)

    def resume(self, session: str, answer: str) -> TurnResult:
        st = self.store.load(session)
        if st["stage"] != "suspended":
            err = EnvelopeError(
                f"session is {st['stage']}, not waiting for an answer",
                op="resume",
                reason=EnvelopeReason.SESSION,
                target=session,
            )
            self._log(st, "turn.refused", {"reason": err.reason.value, "stage": st["stage"]})
            return TurnResult(session, "failed", error=err)
        st["stage"] = st.pop("resume_stage")
        st["messages"].append({"role": "user", "content": answer})
        self._log(
            st,
            "turn.resumed",
            {"stage": st["stage"], "answer": excerpt(self.ex.redactor.redact(answer))},
        )
        return self._drive(st)

    # -- the stages ------------------------------------------------------------------
    def _drive(self, st: dict[str, Any]) -> TurnResult:
        try:
            while True:
                stage = st["stage"]
                self.store.save(st["session"], st, stage)
                if stage == "intent":
                    self._intent(st)
                elif stage == "explore":
                    self._explore(st)
                elif stage == "approve":
                    self._approve(st)
                elif stage == "execute":
                    self._execute(st)
                elif stage == "executing":  # found mid-execution: never replay
                    raise EnvelopeError(
                        "the batch was already started; its completed effects are not replayed",
                        op="execute",
                        reason=EnvelopeReason.RECEIPT_INVALID,
                        target=st.get("batch", {}).get("digest"),
                    )
                elif stage == "present":
                    self._present(st)
                if st["stage"] in ("suspended", "done"):
                    self.store.save(st["session"], st, st["stage"])
                    return TurnResult(
                        st["session"],
                        st["stage"],
                        st.get("answer"),
                        st.get("question"),
                        None,
                        tuple(st["outcomes"]),
                    )
        except EnvelopeError as err:
            failed_at = st["stage"]
            st["stage"] = "failed" if failed_at != "executing" else "executing"
            self._log(
                st,
                "turn.failed",
                {
                    "stage": failed_at,
                    "reason": err.reason.value,
                    "error": self.ex.redactor.redact(str(err))[:1000],
                },
            )
            self.store.save(st["session"], st, "failed")
            return TurnResult(st["session"], "failed", error=err, outcomes=tuple(st["outcomes"]))

    def _model(self, st: dict[str, Any], stage: str, offered: list[str]) -> dict[str, Any]:
        if st["model_calls"] >= self.bounds.max_model_calls:
            raise EnvelopeError(
                f"model-call bound {self.bounds.max_model_calls} reached",
                op=stage,
                reason=EnvelopeReason.MODEL_CALLS_EXCEEDED,
            )
        ops = tuple(self.ex.catalog.get(n).describe() for n in offered)
        req = ModelRequest(stage, st["model_calls"], tuple(st["messages"]), ops, STAGE_TAGS[stage])
        st["model_calls"] += 1
        began = time.monotonic()
        try:
            reply = self.provider.complete(req)
        except EnvelopeError:
            raise
        except Exception as exc:  # the guard refused, the server failed: the turn stops
            raise EnvelopeError(
                self.ex.redactor.redact(f"{type(exc).__name__}: {exc}")[:1000],
                op=stage,
                reason=EnvelopeReason.PROVIDER_FAILED,
            ) from None
        wall = time.monotonic() - began
        schema_size = sum(len(str(o["input_schema"])) for o in ops)
        if self.show is not None:
            self.show(
                f"[loop] call {st['model_calls']} stage={stage} round={st['iterations']} "
                f"wall={wall * 1000:.1f}ms ops={len(ops)} schema={schema_size}B"
            )
        safe = self.ex.redactor.redact(reply)
        self._log(
            st,
            "model.call",
            {
                "stage": stage,
                "call": st["model_calls"],
                "offered": offered,
                "schema_bytes": schema_size,
            },
        )
        try:
            out = parse_stage(stage, reply)
        except EnvelopeError:
            self._log(st, "stage.rejected", {"stage": stage, "excerpt": excerpt(safe)})
            raise
        st["messages"].append({"role": "assistant", "content": safe})
        if out["type"] == "question":
            st["question"] = self.ex.redactor.redact(str(out.get("question", "")))
            st["resume_stage"], st["stage"] = stage, "suspended"
            self._log(st, "turn.suspended", {"stage": stage, "question": st["question"]})
        return out

    def _intent(self, st: dict[str, Any]) -> None:
        out = self._model(st, "intent", [o.name for o in self.ex.catalog.exposed()])
        if out["type"] != "intent":
            return
        intent = out.get("intent")
        if intent not in ("inspect", "change"):
            raise EnvelopeError(
                f"unknown intent {str(intent)[:40]!r}",
                op="intent",
                reason=EnvelopeReason.BAD_STAGE_OUTPUT,
            )
        ops = self.ex.catalog.exposed()
        names = [o.name for o in ops if intent == "change" or o.gather_safe]
        wanted = out.get("operations")
        if isinstance(wanted, list):  # narrowing only: never adds an operation
            names = [n for n in names if n in wanted]
        st.update(intent=intent, offered=names, stage="explore")
        self._log(st, "intent", {"intent": intent, "offered": names})

    def _explore(self, st: dict[str, Any]) -> None:
        if st["iterations"] >= self.bounds.max_iterations:
            raise EnvelopeError(
                f"iteration bound {self.bounds.max_iterations} reached",
                op="explore",
                reason=EnvelopeReason.ITERATIONS_EXCEEDED,
            )
        st["iterations"] += 1
        out = self._model(st, "explore", st["offered"])
        if out["type"] == "done":
            st["stage"] = "approve" if st["pending"] else "present"
        if out["type"] != "calls":
            return
        calls = out.get("calls")
        if not isinstance(calls, list):
            raise EnvelopeError(
                "calls must be a list", op="explore", reason=EnvelopeReason.BAD_STAGE_OUTPUT
            )
        if len(calls) > MAX_CALLS_PER_REPLY:  # refused whole: none of them runs
            raise EnvelopeError(
                f"{len(calls)} calls in one reply (at most {MAX_CALLS_PER_REPLY})",
                op="explore",
                reason=EnvelopeReason.BAD_STAGE_OUTPUT,
            )
        ctx = self._ctx(st, offered=frozenset(st["offered"]))
        for raw in calls:
            op = raw.get("op") if isinstance(raw, dict) else None
            inp = raw.get("input", {}) if isinstance(raw, dict) else {}
            call = Call(str(op), inp if isinstance(inp, dict) else {})
            ok = isinstance(op, str) and isinstance(inp, dict) and self.ex.admissible(call, ctx)
            if ok and not self.ex.catalog.get(str(op)).gather_safe:
                if len(st["pending"]) >= MAX_BATCH:
                    raise EnvelopeError(
                        f"a batch holds at most {MAX_BATCH} actions",
                        op="explore",
                        reason=EnvelopeReason.BAD_STAGE_OUTPUT,
                    )
                st["pending"].append({"op": op, "input": inp})
                self._log(st, "capture", {"op": op, "input": self.ex.redactor.redact_obj(inp)})
                st["messages"].append(
                    {"role": "tool", "op": op, "content": "captured for approval"}
                )
                continue
            outcome = self.ex.dispatch(call, ctx)  # runs a read, or records the refusal
            st["messages"].append({"role": "tool", "op": outcome.op, "content": outcome.view})

    def _approve(self, st: dict[str, Any]) -> None:
        batch = ActionBatch.freeze([Action.of(p["op"], p["input"]) for p in st["pending"]])
        st["batch"] = batch.to_json()
        self._log(st, "batch", st["batch"])
        risks = tuple(self.ex.catalog.get(a.op).risk.value for a in batch.actions)
        req = ApprovalRequest(
            "batch",
            batch.digest,
            tuple(a.to_json() for a in batch.actions),
            risks,
            "captured effects",
        )
        granted = ask(self.approver, req)
        self._log(
            st,
            "approval",
            {"batch": batch.digest, "granted": granted, "policy_digest": self.ex.policy_digest},
        )
        if not granted:
            st["messages"].append({"role": "tool", "content": "the batch was not approved"})
            st["outcomes"].append({"op": "batch", "ok": False, "reason": "approval_denied"})
            st["stage"] = "present"
            return
        receipt = self.book.issue(
            batch, session=st["session"], caller=self.caller, policy_digest=self.ex.policy_digest
        )
        st["receipt"], st["stage"] = receipt.to_json(), "execute"

    def _execute(self, st: dict[str, Any]) -> None:
        batch = ActionBatch.from_json(st["batch"])
        receipt = Receipt.from_json(st["receipt"])
        try:
            self.book.consume(
                receipt,
                batch,
                session=st["session"],
                caller=self.caller,
                policy_digest=self.ex.policy_digest,
            )
        except EnvelopeError as err:
            self._log(st, "receipt", {"id": receipt.id, "ok": False, "error": err.message})
            raise
        self._log(st, "receipt", {"id": receipt.id, "ok": True, "batch": batch.digest})
        self.ex.admit(batch)  # its actions may now run, each once
        st["stage"] = "executing"
        self.store.save(st["session"], st, "executing")  # before the first effect
        ctx = self._ctx(st, batch_approved=batch.digest)
        for i, action in enumerate(batch.actions):
            outcome = self.ex.dispatch(Call(action.op, action.input), ctx)
            st["outcomes"].append(outcome.to_json())
            st["messages"].append({"role": "tool", "op": action.op, "content": outcome.view})
            self.store.save(st["session"], st, "executing")
            if not outcome.ok:
                rest = len(batch.actions) - i - 1
                self._log(
                    st, "batch.stopped", {"batch": batch.digest, "failed": i, "skipped": rest}
                )
                st["messages"].append({"role": "tool", "content": f"{rest} actions skipped"})
                break
        st["stage"] = "present"

    def _present(self, st: dict[str, Any]) -> None:
        out = self._model(st, "present", [])
        if out["type"] == "answer":
            st["answer"] = self.ex.redactor.redact(str(out.get("text", "")))
            st["stage"] = "done"
            self._log(st, "turn.done", {"answer": excerpt(st["answer"])})

    # -- helpers -----------------------------------------------------------------------
    def _ctx(self, st: dict[str, Any], **kw: Any) -> Context:
        return Context(st["session"], self.caller, st["turn"], self.approver, **kw)

    def _log(self, st: dict[str, Any], kind: str, data: Any) -> None:
        self.ex.evidence.append(
            kind, data, session=st["session"], turn=st["turn"], actor=self.caller
        )
