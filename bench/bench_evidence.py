"""Evidence log throughput: appends/s per durability mode, and verify MB/s.

Run: ``python bench/bench_evidence.py`` (about a minute on 2 cores).

What is measured, side by side in one run (interleaved rounds, medians), on files in
the system temp directory (its filesystem is named in the output):

- appends/s of ``EvidenceLog.append`` with ``fsync="never"`` (one thread),
  ``"always"`` (one thread, and 8 threads) and ``"batch"`` (8 threads appending
  concurrently: group commit), each a ~380-byte tool-call-like record;
- the baselines: a bare ``os.write`` of an equally long pre-built line per append (what
  ``never`` costs without encoding, chaining and indexing), and ``os.write`` +
  ``fdatasync`` (the floor under ``always``);
- on a shared machine wall-clock rates depend on the load, so ``never`` appends and
  verify are also reported per CPU-second of the benchmark process;
- ``verify_bytes`` MB/s on an in-memory log of 20,000 records (~300 B and ~1 KiB
  records), against a bare JSONL parse (``json.loads`` per line) and one ``sha256``
  over the same bytes.

Targets (issue 7): >= 100k appends/s with ``never``; ``batch`` with 8 threads >= 5x
``always``; verify >= 50 MB/s.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record, side_by_side
from flux_evidence import EvidenceLog, MemoryEvidenceLog, verify_bytes

ROUNDS = 5
N_NEVER = 20_000
N_ALWAYS = 600
THREADS = 8
N_BATCH_PER_THREAD = 500


def _payload(i: int) -> dict[str, Any]:
    return {
        "op": "fs.read",
        "args": {"path": f"src/module_{i % 97}.py", "limit": 65536},
        "result": {"bytes": 1234 + i % 1000, "truncated": False},
    }


def _appends(directory: str, mode: str, n: int, threads: int = 1) -> tuple[float, float, float]:
    """Return (appends per wall second, appends per CPU second of this process,
    appends per group fsync — batch only, else 0)."""
    path = os.path.join(directory, f"{mode}-{time.monotonic_ns()}.jsonl")
    with EvidenceLog.open(path, fsync=mode) as log:  # type: ignore[arg-type]
        barrier = threading.Barrier(threads + 1)

        def worker() -> None:
            barrier.wait()
            for i in range(n):
                log.append("tool_call", _payload(i), session="sess-1", turn=i, actor="agent")

        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for th in pool:
            th.start()
        barrier.wait()
        start, cpu = time.perf_counter(), time.process_time()
        for th in pool:
            th.join()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    fsyncs = log._fsyncs if mode == "batch" else 0
    os.unlink(path)
    group = n * threads / fsyncs if fsyncs else 0.0
    return n * threads / elapsed, n * threads / max(cpu, 1e-9), group


def _raw_writes(directory: str, n: int, *, sync: bool, line_len: int) -> float:
    path = os.path.join(directory, f"raw-{time.monotonic_ns()}.jsonl")
    line = b"x" * (line_len - 1) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        start = time.perf_counter()
        for _ in range(n):
            os.write(fd, line)
            if sync:
                os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return n / elapsed


def _filesystem(directory: str) -> str:
    try:
        out = (
            subprocess.run(["df", "-T", directory], capture_output=True, text=True, check=True)
            .stdout.splitlines()[-1]
            .split()
        )
        return out[1]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def bench_appends(directory: str) -> dict[str, float]:
    probe = MemoryEvidenceLog()
    probe.append("tool_call", _payload(0), session="sess-1", turn=0, actor="agent")
    line_len = len(probe.to_bytes().splitlines()[1]) + 1
    keys = ("never", "never_cpu", "raw", "always", "always8", "raw_sync", "batch8", "group")
    rows: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(ROUNDS):
        rows["raw"].append(_raw_writes(directory, N_NEVER, sync=False, line_len=line_len))
        wall, cpu, _ = _appends(directory, "never", N_NEVER)
        rows["never"].append(wall)
        rows["never_cpu"].append(cpu)
        rows["raw_sync"].append(_raw_writes(directory, N_ALWAYS, sync=True, line_len=line_len))
        rows["always"].append(_appends(directory, "always", N_ALWAYS)[0])
        wall, _, group = _appends(directory, "batch", N_BATCH_PER_THREAD, THREADS)
        rows["batch8"].append(wall)
        rows["group"].append(group)
        rows["always8"].append(_appends(directory, "always", N_BATCH_PER_THREAD, THREADS)[0])
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"record line: {line_len} bytes; files on {_filesystem(directory)}")
    print(f"never         {med['never']:>10,.0f} appends/s  (raw os.write {med['raw']:,.0f}/s)")
    print(f"never, per CPU-second of this process: {med['never_cpu']:,.0f} appends/s")
    raw_sync = med["raw_sync"]
    print(f"always        {med['always']:>10,.0f} appends/s  (write+fdatasync {raw_sync:,.0f}/s)")
    print(f"always, 8 thr {med['always8']:>10,.0f} appends/s")
    print(
        f"batch, 8 thr  {med['batch8']:>10,.0f} appends/s  ({med['group']:.1f} appends per fsync)"
    )
    per_round = " ".join(
        f"{b / a:.1f}x" for a, b in zip(rows["always"], rows["batch8"], strict=True)
    )
    sync_us = " ".join(f"{1e6 / r:.0f}" for r in rows["raw_sync"])
    print(f"write+fdatasync µs per round: {sync_us}; batch(8)/always per round: {per_round}")
    ratio = med["batch8"] / med["always"]
    ratio8 = med["batch8"] / med["always8"]
    print(f"batch(8) / always(1) = {ratio:.1f}x   (target >= 5x)")
    print(f"batch(8) / always(8) = {ratio8:.1f}x")
    print(f"never           = {med['never'] / 1000:.0f}k appends/s (target >= 100k)")
    return {
        "record_line_bytes": line_len,
        "never_appends_per_s": round(med["never"]),
        "never_appends_per_cpu_s": round(med["never_cpu"]),
        "raw_write_per_s": round(med["raw"]),
        "always_appends_per_s": round(med["always"]),
        "raw_write_fdatasync_per_s": round(med["raw_sync"]),
        "batch8_appends_per_s": round(med["batch8"]),
        "batch8_appends_per_fsync": round(med["group"], 1),
        "write_fdatasync_us": round(1e6 / med["raw_sync"]),
        "always8_appends_per_s": round(med["always8"]),
        "batch8_over_always": round(ratio, 2),
        "batch8_over_always8": round(ratio8, 2),
        "never_over_raw_write": round(med["never"] / med["raw"], 3),
    }


def _log_bytes(n: int, pad: int) -> bytes:
    log = MemoryEvidenceLog()
    for i in range(n - 1):
        data = _payload(i)
        if pad:
            data["output"] = ("line of tool output " * (pad // 20))[:pad]
        log.append("tool_call", data, session="sess-1", turn=i, actor="agent")
    return log.to_bytes()


def bench_verify() -> dict[str, float]:
    figures: dict[str, float] = {}
    for label, pad in (("small", 0), ("1k", 700)):
        data = _log_bytes(20_000, pad)
        lines = data.splitlines()
        mb = len(data) / 1e6

        def parse_only(lines: list[bytes] = lines) -> None:
            for line in lines:
                json.loads(line)

        def run_verify(data: bytes = data) -> None:
            verify_bytes(data)

        def run_sha(data: bytes = data) -> None:
            hashlib.sha256(data).digest()

        res = side_by_side(run_verify, parse_only, number=1, rounds=ROUNDS)
        cpu = time.process_time()
        run_verify()
        verify_cpu_mbs = mb / max(time.process_time() - cpu, 1e-9)
        sha = side_by_side(run_sha, parse_only, number=3, rounds=ROUNDS)
        verify_mbs = mb / res["candidate_s"]
        parse_mbs = mb / res["baseline_s"]
        sha_mbs = mb / sha["candidate_s"]
        avg = len(data) / len(lines)
        print(
            f"verify ({avg:.0f} B records) {verify_mbs:6.1f} MB/s; json.loads per line "
            f"{parse_mbs:6.1f} MB/s (verify/parse time {res['ratio']:.2f}x); "
            f"sha256 {sha_mbs:,.0f} MB/s; verify per CPU-second {verify_cpu_mbs:.1f} MB/s"
        )
        figures[f"verify_{label}_record_bytes"] = round(avg)
        figures[f"verify_{label}_mb_per_s"] = round(verify_mbs, 1)
        figures[f"verify_{label}_mb_per_cpu_s"] = round(verify_cpu_mbs, 1)
        figures[f"parse_{label}_mb_per_s"] = round(parse_mbs, 1)
        figures[f"verify_over_parse_time_{label}"] = round(res["ratio"], 2)
        figures[f"sha256_{label}_mb_per_s"] = round(sha_mbs)
    print("target: verify >= 50 MB/s")
    return figures


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-evidence-") as directory:
        figures = bench_appends(directory)
    figures.update(bench_verify())
    record("evidence", figures)


if __name__ == "__main__":
    main()
