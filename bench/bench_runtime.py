"""The envelope's cost: ``Executor.dispatch`` of ``read`` against ``Workspace.read_bytes``.

Run: ``python bench/bench_runtime.py`` (about a minute on 2 cores).

What is measured, side by side in one run (the cases take turns in blocks of about
1 ms each, medians of the blocks; see :func:`interleaved`): dispatching
``read`` of a 4 KiB file through the whole envelope (catalog lookup, schema
validation, a policy decision, the handler over the FilesPort, redaction of both
result faces with 100 registered secrets, one evidence record with
``fsync="never"``) against ``Workspace.read_bytes`` of the same file — the guarded
read the handler itself performs, so the ratio is the price of the envelope around a
read. The executor's evaluator keeps decisions (``IndexedEvaluator(policy,
cache=4096)``, as ``flux run`` builds it); the same dispatch through an evaluator
without the cache is timed in the same rounds, so the price of a policy decision
that is not kept (a path seen for the first time) is shown too. Each stage is also
timed on its own with the same inputs. The load average is printed with the figures.

Target (issue 17): ratio <= 8x.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record
from flux_evidence import EvidenceLog
from flux_policy import IndexedEvaluator, Request
from flux_runtime import Call, Context, Executor, default_catalog, default_policy
from flux_secret import Redactor
from flux_system import Workspace
from flux_system.port import Substrate

BLOCK_S = 0.001  # wall time of one timed block, whatever the case
ROUNDS = 1500  # blocks of every case, interleaved


def interleaved(cases: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Seconds per call of each case: the cases take turns block by block, each block
    as many calls as fill about BLOCK_S (calibrated first), and the median block of
    each case. Blocks of equal wall time are equally likely to catch a preemption on
    a shared machine (the median drops those), and within a block a case runs warm,
    as in a loop of its own — neither case is favoured."""
    clock = time.perf_counter
    counts: dict[str, int] = {}
    for name, func in cases.items():
        for _ in range(20):
            func()  # warm
        start = clock()
        for _ in range(50):
            func()
        counts[name] = max(1, round(BLOCK_S / ((clock() - start) / 50)))
    per: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(ROUNDS):
        for name, func in cases.items():
            count = counts[name]
            start = clock()
            for _ in range(count):
                func()
            per[name].append((clock() - start) / count)
    return {k: statistics.median(v) for k, v in per.items()}


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
        evaluator = IndexedEvaluator(policy, cache=4096)
        uncached = IndexedEvaluator(policy)
        catalog = default_catalog()

        def executor(ev: IndexedEvaluator) -> Executor:
            return Executor(
                Substrate.native(ws),
                catalog,
                evaluator=ev,
                policy_digest=policy.digest,
                redactor=redactor,
                evidence=log,
            )

        ex, ex_uncached = executor(evaluator), executor(uncached)
        ctx = Context("bench", "agent")
        call = Call("read", {"path": "f.txt"})
        assert ex.dispatch(call, ctx).ok and ex_uncached.dispatch(call, ctx).ok
        text = (root / "f.txt").read_text()
        op = catalog.get("read")
        record_data = next(r.data for r in log if r.kind == "operation")  # a real one

        load_before = os.getloadavg()[0]
        total = interleaved(
            {
                "read_bytes": lambda: ws.read_bytes("f.txt"),
                "dispatch": lambda: ex.dispatch(call, ctx),
                "dispatch_uncached": lambda: ex_uncached.dispatch(call, ctx),
            }
        )
        load_after = os.getloadavg()[0]

        def decide(ev: IndexedEvaluator) -> Callable[[], object]:
            return lambda: ev.evaluate(
                Request("agent", "read", "workspace/f.txt", now=dt.datetime.now(dt.UTC))
            )

        stages = interleaved(
            {
                "validation_us": lambda: op.validate(call.input),
                "policy_kept_us": decide(evaluator),
                "policy_uncached_us": decide(uncached),
                "redaction_us": lambda: (
                    redactor.redact_obj({"path": "f.txt", "text": text}),
                    redactor.redact(text),
                ),
                "evidence_us": lambda: log.append("operation", record_data, session="bench"),
                "read_us": lambda: ws.read_text("f.txt"),
            }
        )
        stages = {k: v * 1e6 for k, v in stages.items()}
        log.close()
        ws.close()
    base = total["read_bytes"]
    figures = {
        "dispatch_us": total["dispatch"] * 1e6,
        "dispatch_uncached_us": total["dispatch_uncached"] * 1e6,
        "read_bytes_us": base * 1e6,
        "ratio": total["dispatch"] / base,
        "ratio_uncached": total["dispatch_uncached"] / base,
        "target_ratio": 8.0,
        "load_average": [round(load_before, 2), round(load_after, 2)],
        **stages,
    }
    print(f"dispatch(read 4 KiB)   {figures['dispatch_us']:8.1f} us")
    print(f"Workspace.read_bytes   {figures['read_bytes_us']:8.1f} us")
    print(f"dispatch, uncached     {figures['dispatch_uncached_us']:8.1f} us")
    print(f"ratio                  {figures['ratio']:8.2f} x   (target <= 8x)")
    print(f"ratio, uncached policy {figures['ratio_uncached']:8.2f} x")
    print(f"load average           {load_before:.2f} -> {load_after:.2f}")
    for k, v in stages.items():
        print(f"  stage {k:<16} {v:8.1f} us")
    record("runtime", figures)


if __name__ == "__main__":
    main()
