"""Real components for the runtime tests: a Workspace, a System, a file evidence log."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux_evidence import EvidenceLog, Record, verify
from flux_policy import IndexedEvaluator, Policy, load_policy_string
from flux_runtime import (
    Approver,
    Bounds,
    Executor,
    HeadlessApprover,
    ScriptedProvider,
    SessionStore,
    Turn,
    default_catalog,
    default_policy,
)
from flux_secret import Redactor, SecretResolver
from flux_system import System, Workspace
from flux_system.port import Substrate

PERMISSIVE = """
version = 1
[[grant]]
id = "everything"
subjects = ["**"]
actions = ["**"]
resources = ["**"]
"""


@dataclass
class Rig:
    root: Path
    substrate: Substrate
    executor: Executor
    log: EvidenceLog
    log_path: Path
    store: SessionStore
    redactor: Redactor

    def records(self) -> list[Record]:
        return list(self.log)

    def kinds(self) -> list[str]:
        return [r.kind for r in self.log if r.kind not in ("genesis",)]

    def ops(self) -> list[dict[str, Any]]:
        return [r.data for r in self.log if r.kind == "operation"]

    def verified(self) -> int:
        return verify(self.log_path).head.size

    def turn(self, replies: Sequence[object], approver: Approver | None = None, **kw: Any) -> Turn:
        lines = [r if isinstance(r, str) else json.dumps(r) for r in replies]
        return Turn(
            self.executor,
            ScriptedProvider(lines),
            self.store,
            approver or HeadlessApprover(),
            **kw,
        )


def make_executor(
    substrate: Substrate,
    log: EvidenceLog,
    policy: Policy,
    redactor: Redactor,
    environ: dict[str, str] | None = None,
) -> Executor:
    return Executor(
        substrate,
        default_catalog(),
        evaluator=IndexedEvaluator(policy),
        policy_digest=policy.digest,
        redactor=redactor,
        evidence=log,
        secrets=SecretResolver(environ=environ or {}, redactor=redactor),
    )


@contextlib.contextmanager
def rig(
    tmp_path: Path,
    *,
    policy: str | None = None,
    environ: dict[str, str] | None = None,
    substrate: Substrate | None = None,
) -> Iterator[Rig]:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    state = tmp_path / "state"
    ws = Workspace(root)
    system = System(ws)
    sub = substrate or Substrate.native(ws, processes=system)
    log_path = tmp_path / "evidence.jsonl"
    log = EvidenceLog.open(log_path, fsync="never")
    store = SessionStore(str(state / "sessions.db"))
    redactor = Redactor()
    pol = load_policy_string(policy) if policy else default_policy()
    try:
        yield Rig(
            root,
            sub,
            make_executor(sub, log, pol, redactor, environ),
            log,
            log_path,
            store,
            redactor,
        )
    finally:
        log.close()
        store.close()
        system.close()
        ws.close()


def intent(kind: str = "change") -> dict[str, Any]:
    return {"type": "intent", "intent": kind}


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"type": "calls", "calls": [{"op": op, "input": inp} for op, inp in items]}


DONE = {"type": "done"}


def answer(text: str = "done") -> dict[str, Any]:
    return {"type": "answer", "text": text}


BOUNDS = Bounds()
