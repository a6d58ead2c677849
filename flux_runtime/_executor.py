"""``Executor.dispatch``: the one path every operation takes.

unknown operation refused → input validated against the schema → ``flux_policy``
decision for every resource the call touches → approval when the decision or the risk
requires it (destructive always asks; only an explicit yes approves; a consumed batch
receipt counts as the explicit yes for the actions it covers, each once, and only for a
batch :meth:`Executor.admit` was given) → ``secret:`` references
resolved (registered with the redactor first) → guarded IO through the substrate's
ports → both result faces and any error redacted → one evidence record per outcome,
with the policy digest.

Guarantee: :meth:`Executor.dispatch` never runs a handler before all of the above
passed, and returns an :class:`Outcome` for every call (it raises only when evidence
cannot be written — then nothing more should run). A workspace path is decided on the
name given and on where it resolves beneath the root (:mod:`._targets`); an input the
evidence log cannot hold (not JSON, NaN, a huge integer, a lone surrogate, nested past
64) is refused before anything runs and recorded as refused; a lone surrogate in a
result or error is escaped. Redaction covers a registered secret raw and in the
encodings flux_secret lists (base64, hex, JSON/``repr`` escapes, percent-encoding,
entities).
Not guaranteed: that the far side of a remote substrate did what it reported; that a
*transformed* secret (reversed, split, case-changed, base32, wrapped base64, compressed)
is redacted (decision 0108); a decision's hold against a concurrent third-party writer
of the workspace between decision and operation (decision 0106).
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

from flux_policy import Decision, Effect, Request
from flux_runtime._approval import ApprovalRequest, Approver, HeadlessApprover, ask
from flux_runtime._batch import Action, ActionBatch
from flux_runtime._catalog import Catalog, Operation, Result, Risk
from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_runtime._gate import WALK_GATE
from flux_runtime._recordable import text as _text
from flux_runtime._recordable import unrecordable
from flux_runtime._targets import Follow, resolved_resource
from flux_secret import RedactionError, Redactor, SecretError, SecretResolver

if typing.TYPE_CHECKING:
    from flux_system.port import Substrate

__all__ = ["Call", "Context", "EvidenceSink", "Executor", "Outcome", "PolicyEvaluator"]

_REF = re.compile(r"secret:(?:env|file)/[A-Za-z0-9_./-]+")
EXCERPT = 2000
_SHORTEST = 6  # bytes: no registered pattern is shorter (flux_secret's variants floor)
VIEW_EXCERPT = 160  # of a result's view, in its evidence record (with its sha256)
# Redactions done within one call, by the id of the string redacted: (it, redacted).
_Memo = dict[int, tuple[str, str]]
_now, _UTC = dt.datetime.now, dt.UTC
_ARRAY = (list, tuple)  # built once: ``list | tuple`` in isinstance builds a union per call
_SCALAR = (bool, int, float)
_RANK = {Effect.ALLOW: 0, Effect.APPROVAL_REQUIRED: 1, Effect.DENY: 2}


class EvidenceSink(typing.Protocol):
    def append(
        self,
        kind: str,
        data: Any,
        *,
        session: str | None = ...,
        turn: int | None = ...,
        actor: str | None = ...,
    ) -> Any: ...


class PolicyEvaluator(typing.Protocol):
    def evaluate(self, request: Request) -> Decision: ...


@dataclass(frozen=True, slots=True)
class Call:
    op: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Context:
    session: str
    caller: str
    turn: int = 0
    approver: Approver = field(default_factory=HeadlessApprover)
    trust: str | None = None
    batch_approved: str | None = None  # digest of the consumed batch this call is in
    offered: frozenset[str] | None = None  # operations the model was shown (None: all)


@dataclass(frozen=True, slots=True)
class Outcome:
    op: str
    ok: bool
    content: Any = None
    view: str = ""
    reason: EnvelopeReason | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "ok": self.ok,
            "view": self.view,
            "reason": self.reason.value if self.reason else None,
            "error": self.error,
        }


class Executor:
    """Dispatches calls against one substrate under one policy (module docstring)."""

    def __init__(
        self,
        substrate: Substrate,
        catalog: Catalog,
        *,
        evaluator: PolicyEvaluator,
        policy_digest: str,
        redactor: Redactor,
        evidence: EvidenceSink,
        secrets: SecretResolver | None = None,
    ) -> None:
        self.substrate, self.catalog, self.redactor = substrate, catalog, redactor
        self.policy_digest = policy_digest
        self._evaluator, self.evidence, self._secrets = evaluator, evidence, secrets
        # Each root's physical path (flux_runtime._targets), for the files port it was
        # taken from: a substrate replaced on this executor starts afresh.
        self._roots: tuple[object, dict[str, str]] = (None, {})
        self._admitted: dict[str, list[tuple[str, str]]] = {}  # batch digest -> actions left

    # -- the pipeline ------------------------------------------------------------
    # One method per stage (the bench times each in place by wrapping it on an
    # instance: bench/bench_runtime.py); the order is the module docstring's.
    def dispatch(self, call: Call, ctx: Context) -> Outcome:
        name = call.op
        if not (type(name) is str and len(name) <= 200 and name.isascii()):
            name = str(name)[:200].encode("utf-8", "replace").decode("utf-8")
        record: dict[str, Any] = {
            "op": name,
            "policy_digest": self.policy_digest,
            "batch": ctx.batch_approved,
        }
        try:
            op, inp = self._admit(call, ctx, record)
            decision = self._decide(op, inp, ctx)
            self._authorize(op, inp, ctx, decision, record)
            outcome = self._redacted(op.name, self._run(op, inp, ctx))
        except EnvelopeError as exc:
            outcome = self._failed(str(call.op), exc.reason, str(exc))
        except RedactionError as exc:  # a result it cannot walk: withheld, never shown raw
            why = f"the result could not be redacted ({exc}); it is withheld"
            outcome = self._failed(str(call.op), EnvelopeReason.OPERATION_FAILED, why)
        except SecretError as exc:
            outcome = self._failed(str(call.op), EnvelopeReason.SECRET_UNRESOLVED, str(exc))
        except Exception as exc:  # guarded IO refused or failed: a result, not a crash
            msg = f"{type(exc).__name__}: {exc}"
            outcome = self._failed(str(call.op), EnvelopeReason.OPERATION_FAILED, msg)
        self._record(record, outcome, ctx)
        return outcome

    def _admit(
        self, call: Call, ctx: Context, record: dict[str, Any]
    ) -> tuple[Operation, dict[str, Any]]:
        """The known, offered operation and its input, recorded (redacted) and
        checked against the schema; an input evidence cannot hold is refused first."""
        op = self.catalog.get(call.op)
        if ctx.offered is not None and op.name not in ctx.offered:
            raise EnvelopeError(
                "operation not offered in this stage",
                op=op.name,
                reason=EnvelopeReason.NOT_OFFERED,
            )
        given = call.input
        inp: Any = dict(given) if type(given) is dict or isinstance(given, Mapping) else given
        why = unrecordable(inp)
        if why is not None:  # refused before anything runs, and recorded as refused
            record["input"] = f"(not recorded: {why})"
            raise EnvelopeError(f"input {why}", op=op.name, reason=EnvelopeReason.INVALID_INPUT)
        record["input"] = self._redact_tree(inp, {})
        problems = op.validate(inp)
        if problems:
            raise EnvelopeError(
                "; ".join(problems)[:1000], op=op.name, reason=EnvelopeReason.INVALID_INPUT
            )
        return op, inp

    def _authorize(
        self,
        op: Operation,
        inp: dict[str, Any],
        ctx: Context,
        decision: Decision,
        record: dict[str, Any],
    ) -> None:
        """Record *decision*; refuse a deny, a batch claim not admitted, or a call
        that needs approval and does not get it."""
        record["decision"] = {
            # _value_ is .value without enum's Python-level property (3.11)
            "effect": decision.effect._value_,
            "rules": list(decision.determining_rules),
        }
        if decision.effect is Effect.DENY:
            raise EnvelopeError(
                "; ".join(decision.reasons) or "denied",
                op=op.name,
                reason=EnvelopeReason.POLICY_DENIED,
            )
        if ctx.batch_approved is not None:
            self._take_admitted(op, inp, ctx.batch_approved)
        if decision.effect is Effect.APPROVAL_REQUIRED or op.risk is Risk.DESTRUCTIVE:
            self._approve(op, inp, ctx, decision, record)  # (which checks the same again)

    def _run(self, op: Operation, inp: dict[str, Any], ctx: Context) -> Result:
        """The handler over the substrate, with the walk gate set for its run."""
        roots = self._kept_roots()
        gate = WALK_GATE.set(lambda name: self._allows(op, name, ctx, roots))
        try:
            return op.handler(self.substrate, self._resolve(op, inp) if op.secrets else inp)
        finally:
            WALK_GATE.reset(gate)

    def _record(self, record: dict[str, Any], outcome: Outcome, ctx: Context) -> None:
        """The one evidence record of the call: its outcome, the view's excerpt, length
        and sha256 (decision 0105)."""
        view = outcome.view
        reason = outcome.reason
        record["ok"] = outcome.ok
        record["reason"] = None if reason is None else reason.value
        record["error"] = outcome.error
        record["view"] = view[:VIEW_EXCERPT]
        record["view_chars"] = len(view)
        record["view_sha256"] = sha256(view.encode("utf-8", "surrogatepass")).hexdigest()
        self.evidence.append(
            "operation", record, session=ctx.session, turn=ctx.turn, actor=ctx.caller
        )

    def admissible(self, call: Call, ctx: Context) -> bool:
        """Whether *call* names a known, offered operation with valid input that the
        policy does not deny — checked without running or recording anything (the loop
        captures only admissible calls; the rest are dispatched to be refused)."""
        if call.op not in self.catalog or not isinstance(call.input, Mapping):
            return False
        op = self.catalog.get(call.op)
        if ctx.offered is not None and op.name not in ctx.offered:
            return False
        if op.validate(dict(call.input)) or unrecordable(call.input) is not None:
            return False
        try:
            return self._decide(op, call.input, ctx).effect is not Effect.DENY
        except Exception:  # e.g. an absolute path or an escaping link: refused when dispatched
            return False

    def _allows(self, op: Operation, name: str, ctx: Context, roots: dict[str, str]) -> bool:
        """Whether *op* may look at workspace file *name* without asking (walk gate):
        by its name and by where it resolves (a link to a denied file is skipped)."""
        now = _now(_UTC)
        evaluate = self._evaluator.evaluate
        resource = f"workspace/{posixpath.normpath(name)}"
        first = evaluate(Request(ctx.caller, op.name, resource, trust=ctx.trust, now=now))
        if first.effect is not Effect.ALLOW:
            return False
        try:
            target = resolved_resource(
                self.substrate.files, op.name, name, "target", writes=False, roots=roots
            )
        except Exception:  # not resolvable beneath the root: not looked at
            return False
        if target == resource:
            return True
        d = evaluate(Request(ctx.caller, op.name, target, trust=ctx.trust, now=now))
        return d.effect is Effect.ALLOW

    def admit(self, batch: ActionBatch) -> None:
        """Let *batch*'s actions run under ``Context(batch_approved=batch.digest)``, each
        once — called by the loop right after the batch's receipt was consumed. A call
        naming a digest not admitted, or an action not in it (or already run), is
        refused (``RECEIPT_INVALID``): the context's digest is a claim, this is proof."""
        left = self._admitted.setdefault(batch.digest, [])
        left.extend((a.op, a.input_json) for a in batch.actions)

    def _take_admitted(self, op: Operation, inp: Mapping[str, Any], digest: str) -> None:
        left = self._admitted.get(digest)
        key = (op.name, Action.of(op.name, inp).input_json)
        if left is None or key not in left:
            raise EnvelopeError(
                "not an action of a batch whose receipt was consumed here (or already run)",
                op=op.name,
                reason=EnvelopeReason.RECEIPT_INVALID,
                target=digest[:80],
            )
        left.remove(key)

    def _kept_roots(self) -> dict[str, str]:
        files = self.substrate.files
        if self._roots[0] is not files:
            self._roots = (files, {})
        return self._roots[1]

    def _targets(self, op: Operation, inp: Mapping[str, Any], names: list[str]) -> list[str]:
        """Where each workspace path *op* names resolves, beyond *names* (the names it
        declares): the policy decides on both (flux_runtime._targets)."""
        if op.paths is None:
            return []
        files, roots = self.substrate.files, self._kept_roots()
        writes = "write" in op.effects
        follow: Follow = "name" if op.follow == "name" else "target"
        out: list[str] = []
        for path in op.paths(inp):
            target = resolved_resource(files, op.name, path, follow, writes=writes, roots=roots)
            if target not in names and target not in out:
                out.append(target)
        return out

    def _decide(self, op: Operation, inp: Mapping[str, Any], ctx: Context) -> Decision:
        """The strictest decision over the declared names, then (unless those are
        denied already) over where the paths resolve."""
        now = _now(_UTC)
        worst: Decision | None = None
        evaluate, rank = self._evaluator.evaluate, _RANK
        names = list(op.resources(inp))
        for resource in names or ["-"]:
            d = evaluate(Request(ctx.caller, op.name, resource, trust=ctx.trust, now=now))
            if worst is None or rank[d.effect] > rank[worst.effect]:
                worst = d
        assert worst is not None
        if worst.effect is Effect.DENY:
            return worst
        for resource in self._targets(op, inp, names):
            d = evaluate(Request(ctx.caller, op.name, resource, trust=ctx.trust, now=now))
            if rank[d.effect] > rank[worst.effect]:
                worst = d
        return worst

    def _approve(
        self,
        op: Operation,
        inp: Mapping[str, Any],
        ctx: Context,
        decision: Decision,
        record: dict[str, Any],
    ) -> None:
        needs = decision.effect is Effect.APPROVAL_REQUIRED or op.risk is Risk.DESTRUCTIVE
        if not needs:
            return
        if ctx.batch_approved is not None:  # checked (and used up) before: admitted
            record["approval"] = {"by": "receipt", "batch": ctx.batch_approved}
            return
        req = ApprovalRequest(
            "operation",
            op.name,
            ({"op": op.name, "input": dict(inp)},),
            (op.risk.value,),
            "policy" if decision.effect is Effect.APPROVAL_REQUIRED else "destructive",
        )
        granted = ask(ctx.approver, req)
        self.evidence.append(
            "approval",
            {
                "op": op.name,
                "granted": granted,
                "reason": req.reason,
                "policy_digest": self.policy_digest,
            },
            session=ctx.session,
            turn=ctx.turn,
            actor=ctx.caller,
        )
        record["approval"] = {"by": "approver", "granted": granted}
        if not granted:
            raise EnvelopeError("not approved", op=op.name, reason=EnvelopeReason.APPROVAL_DENIED)

    def _resolve(self, op: Operation, inp: dict[str, Any]) -> dict[str, Any]:
        if not op.secrets:
            return inp
        resolved: Any = self._walk(inp)
        out: dict[str, Any] = resolved
        return out

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return _REF.sub(lambda m: self._secret(m.group(0)), value)
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        if isinstance(value, dict):
            return {k: self._walk(v) for k, v in value.items()}
        return value

    def _secret(self, ref: str) -> str:
        if self._secrets is None:
            raise EnvelopeError(
                "no secret resolver configured",
                op="secret",
                reason=EnvelopeReason.SECRET_UNRESOLVED,
                target=ref,
            )
        value = self._secrets.resolve(ref)  # registers with the redactor before returning
        raw = value.expose_secret()
        return raw if isinstance(raw, str) else raw.decode("utf-8", "replace")

    def _redacted(self, name: str, result: Result) -> Outcome:
        memo: _Memo = {}  # each string object redacted once (the view is the content text)
        content = self._redact_tree(result.content, memo)
        return Outcome(name, True, content, self._redact_str(result.view, memo))

    def _redact_str(self, text: str, memo: _Memo) -> str:
        # Every pattern a Redactor matches is at least 6 bytes long (flux_secret.variants).
        if len(text) < _SHORTEST:
            if str.isascii(text):  # valid Unicode as it is (what _text returns)
                return text
            if len(text.encode("utf-8", "surrogatepass")) < _SHORTEST:
                return _text(text)
        # Keyed by identity, not value: no hashing of a large text, and no __eq__ or
        # __hash__ of a str subclass consulted. The memo holds *text*, so its id is
        # not reused while the memo lives.
        seen = memo.get(id(text))
        if seen is not None and seen[0] is text:
            return seen[1]
        done = self.redactor.redact(text)
        if not str.isascii(done):
            done = _text(done)
        memo[id(text)] = (text, done)
        return done

    def _redact_tree(self, value: Any, memo: _Memo) -> Any:
        """Redact every str (keys included) and bytes in a JSON-like tree; other
        objects go through the redactor's own structure walk. (A short ASCII ``str``
        key or value cannot hold a pattern: it is kept as it is without a call.)"""
        if isinstance(value, str):
            return self._redact_str(value, memo)
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                k, v = key, item
                if not (type(key) is str and len(key) < _SHORTEST and str.isascii(key)):
                    k = self._redact_tree(key, memo)
                if type(item) is str:
                    if not (len(item) < _SHORTEST and str.isascii(item)):
                        v = self._redact_str(item, memo)
                else:
                    v = self._redact_tree(item, memo)
                out[k] = v
            return out
        if isinstance(value, _ARRAY):
            return [self._redact_tree(v, memo) for v in value]
        if value is None or isinstance(value, _SCALAR):
            return value
        if isinstance(value, Mapping):
            return self._redact_tree(dict(value), memo)
        return self.redactor.redact_obj(value)

    def _failed(self, name: str, reason: EnvelopeReason, message: str) -> Outcome:
        text = _text(self.redactor.redact(message))[:EXCERPT]
        return Outcome(name[:200], False, None, f"error ({reason.value}): {text}", reason, text)
