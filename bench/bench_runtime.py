"""The envelope's cost: ``Executor.dispatch`` of ``read`` against ``Workspace.read_bytes``.

Run: ``python bench/bench_runtime.py`` (well under a minute on 2 cores).

What is measured, side by side in one run (interleaved rounds, medians): dispatching
``read`` of a 4 KiB file through the whole envelope (catalog lookup, schema
validation, a policy decision, the handler over the FilesPort, redaction of both
result faces with 100 registered secrets, one evidence record with
``fsync="never"``) against ``Workspace.read_bytes`` of the same file — the guarded
read the handler itself performs, so the ratio is the price of the envelope around a
read. Each stage is also timed on its own with the same inputs.

Target (issue 17): ratio <= 8x.
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record, side_by_side, time_per_call
from flux_evidence import EvidenceLog
from flux_policy import IndexedEvaluator, Request
from flux_runtime import Call, Context, Executor, default_catalog, default_policy
from flux_runtime._schema import validate
from flux_secret import Redactor
from flux_system import Workspace
from flux_system.port import Substrate

NUMBER = 2000


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        (root / "f.txt").write_text(("lorem ipsum dolor sit amet " * 160)[:4096])
        ws = Workspace(root)
        log = EvidenceLog.open(Path(tmp) / "ev.jsonl", fsync="never")
        redactor = Redactor()
        for i in range(100):
            redactor.register(f"secret-value-{i:04d}-{'x' * 16}", name=f"s{i}")
        policy = default_policy()
        evaluator = IndexedEvaluator(policy)
        catalog = default_catalog()
        ex = Executor(
            Substrate.native(ws),
            catalog,
            evaluator=evaluator,
            policy_digest=policy.digest,
            redactor=redactor,
            evidence=log,
        )
        ctx = Context("bench", "agent")
        call = Call("read", {"path": "f.txt"})
        assert ex.dispatch(call, ctx).ok
        text = (root / "f.txt").read_text()
        op = catalog.get("read")
        record_data = next(r.data for r in log if r.kind == "operation")  # a real one

        total = side_by_side(
            lambda: ex.dispatch(call, ctx), lambda: ws.read_bytes("f.txt"), number=NUMBER
        )
        stages = {
            "validation_us": time_per_call(lambda: validate(call.input, op.schema), number=NUMBER),
            "policy_us": time_per_call(
                lambda: evaluator.evaluate(
                    Request("agent", "read", "workspace/f.txt", now=dt.datetime.now(dt.UTC))
                ),
                number=NUMBER,
            ),
            "redaction_us": time_per_call(
                lambda: (
                    redactor.redact_obj({"path": "f.txt", "text": text}),
                    redactor.redact(text),
                ),
                number=NUMBER,
            ),
            "evidence_us": time_per_call(
                lambda: log.append("operation", record_data, session="bench"), number=NUMBER
            ),
            "read_us": time_per_call(lambda: ws.read_text("f.txt"), number=NUMBER),
        }
        stages = {k: v * 1e6 for k, v in stages.items()}
        log.close()
        ws.close()
    figures = {
        "dispatch_us": total["candidate_s"] * 1e6,
        "read_bytes_us": total["baseline_s"] * 1e6,
        "ratio": total["ratio"],
        "target_ratio": 8.0,
        **stages,
    }
    print(f"dispatch(read 4 KiB)   {figures['dispatch_us']:8.1f} us")
    print(f"Workspace.read_bytes   {figures['read_bytes_us']:8.1f} us")
    print(f"ratio                  {figures['ratio']:8.2f} x   (target <= 8x)")
    for k, v in stages.items():
        print(f"  stage {k:<16} {v:8.1f} us")
    record("runtime", figures)


if __name__ == "__main__":
    main()
