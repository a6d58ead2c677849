"""The envelope's cost: ``Executor.dispatch`` of ``read`` against ``Workspace.read_bytes``.

Run: ``python bench/bench_runtime.py`` (about a minute on 2 cores).

What is measured, side by side in one run (the cases take turns in blocks of about
1 ms each, medians of the blocks; see :func:`interleaved`): dispatching
``read`` of a 4 KiB file through the whole envelope (catalog lookup, the
recordability check and redaction of the input, schema validation, a policy decision
on the path's name and on where it leads (one ``Workspace.link_free`` for a path with
no link, decision 0106), the handler over the FilesPort, redaction of both
result faces with 100 registered secrets, one evidence record with
``fsync="never"``) against ``Workspace.read_bytes`` of the same file — the guarded
read the handler itself performs, so the ratio is the price of the envelope around a
read. The executor's evaluator keeps decisions (``IndexedEvaluator(policy,
cache=4096)``, as ``flux run`` builds it); the same dispatch through an evaluator
without the cache is timed in the same rounds, so the price of a policy decision
that is not kept (a path seen for the first time) is shown too. Each stage is also
timed on its own with the same inputs, and — because a stage costs more inside the
pipeline than in a loop of its own (the other stages evict its caches) — each stage is
also timed *in place*: an executor whose stage methods are wrapped with clocks
dispatches the same call, and its stages plus the dispatch's own glue add up to that
dispatch's total (see :func:`in_place`). The load average is printed with the figures.

Target (issue 17): ratio <= 8x.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
# The executor's stages, in dispatch order (flux_runtime._executor): each is one method,
# timed in place by wrapping it on an instance. Nested: ``_targets`` runs inside
# ``_decide`` and the evidence append inside ``_record``; they are reported apart.
STAGES = ("_admit", "_decide", "_targets", "_authorize", "_run", "_redacted", "_record")
IN_PLACE_ROUNDS = 3000  # blocks of IN_PLACE_BLOCK timed dispatches
IN_PLACE_BLOCK = 5


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


class _Clocks:
    """Nanoseconds spent in each wrapped stage since the last :meth:`take`."""

    def __init__(self) -> None:
        self.spent: dict[str, int] = {}

    def wrap(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        clock, spent = time.perf_counter_ns, self.spent
        spent[name] = 0

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return func(*args, **kwargs)
            finally:
                spent[name] += clock() - start

        return timed

    def take(self) -> dict[str, int]:
        out = dict(self.spent)
        for name in self.spent:
            self.spent[name] = 0
        return out


class _TimedSink:
    """An evidence sink that times its inner sink's ``append``."""

    def __init__(self, inner: Any, clocks: _Clocks) -> None:
        self.append = clocks.wrap("append", inner.append)


def in_place(
    make: Callable[[Any], Executor], sink: Any, call: Call, ctx: Context
) -> dict[str, float]:
    """Microseconds per dispatch of each stage, timed in place.

    An executor like the measured one (*make* given its evidence sink) gets every
    method of :data:`STAGES` wrapped with a clock on the instance, and its evidence
    sink's ``append`` too. It dispatches *call* in blocks; the middle half of the
    blocks by total time is kept (the slowest quarter caught preemptions) and each
    stage's mean over those is reported, so the stages plus ``glue_us`` (what
    ``dispatch`` itself does between them, and the clocks' own cost) add up to
    ``total_us``, the timed dispatch; ``untimed_us`` is the same executor without the
    clocks, in turn with it block by block (the difference is what the clocks cost).
    Nested stages are reported apart: ``policy`` is ``_decide`` without ``_targets``
    (the time, the declared names, each ``Request`` and decision), ``record`` is
    ``_record`` without the append (the view's excerpt, length and sha256);
    ``handler`` is ``_run`` (the walk gate and the handler).
    """
    clocks = _Clocks()
    ex, bare = make(_TimedSink(sink, clocks)), make(sink)
    for name in STAGES:
        setattr(ex, name, clocks.wrap(name, getattr(ex, name)))
    for _ in range(50):
        ex.dispatch(call, ctx)
        bare.dispatch(call, ctx)
    clocks.take()
    clock = time.perf_counter_ns
    blocks: list[tuple[int, dict[str, int]]] = []
    plain: list[int] = []  # the same executor untimed, block by block in turn with it
    for _ in range(IN_PLACE_ROUNDS):
        start = clock()
        for _ in range(IN_PLACE_BLOCK):
            ex.dispatch(call, ctx)
        blocks.append((clock() - start, clocks.take()))
        start = clock()
        for _ in range(IN_PLACE_BLOCK):
            bare.dispatch(call, ctx)
        plain.append(clock() - start)
    blocks.sort(key=lambda b: b[0])
    plain.sort()
    kept = blocks[len(blocks) // 4 : len(blocks) * 3 // 4]
    n = len(kept) * IN_PLACE_BLOCK

    def mean(name: str) -> float:
        return sum(b[1][name] for b in kept) / n / 1000

    total = sum(b[0] for b in kept) / n / 1000
    stages = {
        "admit_us": mean("_admit"),
        "policy_us": mean("_decide") - mean("_targets"),
        "targets_us": mean("_targets"),
        "authorize_us": mean("_authorize"),
        "handler_us": mean("_run"),
        "redaction_us": mean("_redacted"),
        "record_us": mean("_record") - mean("append"),
        "evidence_us": mean("append"),
    }
    stages["glue_us"] = total - sum(stages.values())
    stages["total_us"] = total
    middle = plain[len(plain) // 4 : len(plain) * 3 // 4]
    stages["untimed_us"] = sum(middle) / (len(middle) * IN_PLACE_BLOCK) / 1000
    return stages


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

        def executor(ev: IndexedEvaluator, sink: Any = log) -> Executor:
            return Executor(
                Substrate.native(ws),
                catalog,
                evaluator=ev,
                policy_digest=policy.digest,
                redactor=redactor,
                evidence=sink,
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

        result = op.handler(ex.substrate, call.input)
        view = result.view  # the read's view: its excerpt and digest go into the record
        # Each stage of the pipeline alone, on the inputs it has in a dispatch (keys as
        # in the in-place breakdown), plus the pieces earlier runs reported.
        alone: dict[str, Callable[[], object]] = {
            "admit_us": lambda: ex._admit(call, ctx, {}),
            "policy_us": decide(evaluator),
            "targets_us": lambda: ex._targets(op, call.input, ["workspace/f.txt"]),
            "handler_us": lambda: op.handler(ex.substrate, call.input),
            "redaction_us": lambda: ex._redacted("read", result),
            "record_us": lambda: (
                view[:160],
                hashlib.sha256(view.encode("utf-8", "surrogatepass")).hexdigest(),
            ),
            "evidence_us": lambda: log.append("operation", record_data, session="bench"),
            "validation_us": lambda: op.validate(call.input),
            "policy_uncached_us": decide(uncached),
            "read_us": lambda: ws.read_text("f.txt"),
            "redaction_two_walks_us": lambda: (  # what earlier runs reported as redaction
                redactor.redact_obj({"path": "f.txt", "text": text}),
                redactor.redact(text),
            ),
        }
        stages = {k: v * 1e6 for k, v in interleaved(alone).items()}
        placed = in_place(lambda sink: executor(evaluator, sink), log, call, ctx)
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
        "in_place": placed,
    }
    print(f"dispatch(read 4 KiB)   {figures['dispatch_us']:8.1f} us")
    print(f"Workspace.read_bytes   {figures['read_bytes_us']:8.1f} us")
    print(f"dispatch, uncached     {figures['dispatch_uncached_us']:8.1f} us")
    print(f"ratio                  {figures['ratio']:8.2f} x   (target <= 8x)")
    print(f"ratio, uncached policy {figures['ratio_uncached']:8.2f} x")
    print(f"load average           {load_before:.2f} -> {load_after:.2f}")
    print("stage                    alone    in place (a timed dispatch: they add up)")
    for k, v in placed.items():
        solo = f"{stages[k]:8.1f}" if k in stages else " " * 8
        print(f"  {k:<22} {solo} {v:8.1f} us")
    for k, v in stages.items():
        if k not in placed:
            print(f"  {k:<22} {v:8.1f}")
    record("runtime", figures)


if __name__ == "__main__":
    main()
