"""Shared helpers for benchmarks: side-by-side timing and ``bench/results.json``.

Benchmarks measure a ratio against a baseline run side by side in the same process
(interleaved rounds, best-of and median), never an absolute time as pass/fail.
"""

from __future__ import annotations

import compileall
import fcntl
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results.json"
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flux_system", "flux_runtime", "flux_policy", "flux_secret", "flux_evidence")


def compile_packages() -> None:
    """Byte-compile the project's packages, as ``pip install`` does for an installed one.

    A start-up figure then never includes compiling on every start (which happens when
    ``PYTHONDONTWRITEBYTECODE`` is set and the cached bytecode is stale).
    """
    for pkg in PACKAGES:
        compileall.compile_dir(str(ROOT / pkg), quiet=1)


def interpreter_of(script: str) -> str:
    """The interpreter a console script runs (its shebang): the fair start-up baseline.

    Never a ``python3`` found on PATH, which may be a shell shim (pyenv) far slower to
    start than the interpreter itself.
    """
    first = Path(script).read_bytes().split(b"\n", 1)[0]
    if first.startswith(b"#!"):
        return first[2:].decode().strip().split()[0]
    return sys.executable


def time_per_call(func: Callable[[], object], *, number: int) -> float:
    """Seconds per call of *func* over *number* calls."""
    start = time.perf_counter()
    for _ in range(number):
        func()
    return (time.perf_counter() - start) / number


def side_by_side(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    number: int,
    rounds: int = 7,
) -> dict[str, float]:
    """Interleave *rounds* of candidate and baseline; return medians and their ratio."""
    cand: list[float] = []
    base: list[float] = []
    for _ in range(rounds):
        base.append(time_per_call(baseline, number=number))
        cand.append(time_per_call(candidate, number=number))
    c, b = statistics.median(cand), statistics.median(base)
    return {"candidate_s": c, "baseline_s": b, "ratio": c / b}


def per_call(
    candidate: Callable[[], object], baseline: Callable[[], object], n: int
) -> dict[str, float]:
    """Alternate single calls (baseline, candidate, ...); medians of each call's time."""
    cand: list[float] = []
    base: list[float] = []
    for _ in range(n):
        base.append(time_per_call(baseline, number=1))
        cand.append(time_per_call(candidate, number=1))
    c, b = statistics.median(cand), statistics.median(base)
    return {"candidate_s": c, "baseline_s": b, "ratio": c / b}


def machine() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "processor": platform.processor() or "unknown",
    }


def record(topic: str, figures: dict[str, Any]) -> None:
    """Merge *figures* under *topic* into ``bench/results.json`` (locked read-modify-write)."""
    RESULTS.touch(exist_ok=True)
    with RESULTS.open("r+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        text = fh.read()
        data: dict[str, Any] = json.loads(text) if text.strip() else {}
        data[topic] = {"machine": machine(), "figures": figures, "when": time.time()}
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
