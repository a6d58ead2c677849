"""Shared helpers for benchmarks: side-by-side timing and ``bench/results.json``.

Benchmarks measure a ratio against a baseline run side by side in the same process
(interleaved rounds, best-of and median), never an absolute time as pass/fail.
"""

from __future__ import annotations

import fcntl
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results.json"


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
