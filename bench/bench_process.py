"""Process benchmarks against fair baselines, measured side by side in one run.

1. Spawn + wait of ``/bin/true``: ``System.run`` vs ``subprocess.run(["/bin/true"],
   capture_output=True, start_new_session=True)``, which has the same two capture
   pipes and its own session (target <= 1.15x). The bare ``subprocess.run`` (no pipes,
   no session) is kept as context.
2. Draining 1 GiB under the default 1 MiB cap, for a producer writing 1 MiB chunks
   (``dd bs=1M``) and one writing small chunks (``head -c``): ``System.run`` vs the
   better (lower median) of a plain ``os.read`` 64 KiB loop and a pipe + ``splice``
   loop to /dev/null, each reading the child's stdout pipe to EOF (target <= 1.05x for
   both), with the peak RSS growth of this process while draining.

Rounds are interleaved (baseline, candidate, ...); the figures are medians.
"""

from __future__ import annotations

import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import per_call, record, side_by_side, time_per_call
from flux_system import System, Workspace

GIB = 1 << 30
PRODUCERS = {
    "dd bs=1M": ["dd", "if=/dev/zero", "bs=1M", "count=1024", "status=none"],
    "head -c": ["head", "-c", str(GIB), "/dev/zero"],
}
_F_SETPIPE_SZ = 1031


def _read_loop(argv: list[str]) -> None:
    """Baseline: the child's stdout pipe read to EOF by plain 64 KiB ``os.read`` calls."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert child.stdout is not None
    fd = child.stdout.fileno()
    try:
        while os.read(fd, 1 << 16):
            pass
    finally:
        child.stdout.close()
        child.wait()


def _splice_loop(argv: list[str]) -> None:
    """Baseline: the same pipe, grown to 1 MiB, moved to /dev/null by ``splice``."""
    r, w = os.pipe()
    fcntl.fcntl(r, _F_SETPIPE_SZ, 1 << 20)
    child = subprocess.Popen(argv, stdout=w)
    os.close(w)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        while os.splice(r, null, 1 << 20):
            pass
    finally:
        os.close(r)
        os.close(null)
        child.wait()


def _interleaved(funcs: dict[str, Callable[[], object]], *, rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in funcs}
    for _ in range(rounds):
        for name, func in funcs.items():
            times[name].append(time_per_call(func, number=1))
    return {name: statistics.median(ts) for name, ts in times.items()}


class _PeakRss:
    def __init__(self) -> None:
        self._me = psutil.Process()
        self.base = self._me.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._me.memory_info().rss)
            self._stop.wait(0.002)

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _first_after_plain(system: System, fair: Callable[[], object], n: int) -> float:
    """Median time of a ``System.run`` that follows 25 plain spawns (no cgroup move)."""
    times: list[float] = []
    for _ in range(n):
        for _ in range(25):
            fair()
        times.append(time_per_call(lambda: system.run(["/bin/true"]), number=1))
    return statistics.median(times)


def _spawn(system: System) -> dict[str, float]:
    def fair() -> object:
        return subprocess.run(
            ["/bin/true"], capture_output=True, start_new_session=True, check=False
        )

    def bare() -> object:
        return subprocess.run(["/bin/true"], check=False)

    def run() -> object:
        return system.run(["/bin/true"])

    for _ in range(50):  # warm up every path
        run()
        fair()
        bare()
    spawn = side_by_side(run, fair, number=25, rounds=41)
    single = per_call(run, fair, 1000)
    context = side_by_side(run, bare, number=25, rounds=21)
    first = _first_after_plain(system, fair, 41)
    spawn["bare_subprocess_s"] = context["baseline_s"]
    spawn["vs_bare_ratio"] = context["ratio"]
    spawn["per_call_candidate_s"] = single["candidate_s"]
    spawn["per_call_baseline_s"] = single["baseline_s"]
    spawn["per_call_ratio"] = single["ratio"]
    spawn["first_after_plain_s"] = first
    print(
        f"spawn+wait /bin/true, blocks of 25: System.run {spawn['candidate_s'] * 1e6:.0f} us, "
        f"subprocess.run(capture_output, start_new_session) {spawn['baseline_s'] * 1e6:.0f} us, "
        f"ratio {spawn['ratio']:.3f}x (target <= 1.15x)"
    )
    print(
        f"  alternating single calls: {single['candidate_s'] * 1e6:.0f} vs "
        f"{single['baseline_s'] * 1e6:.0f} us, ratio {single['ratio']:.3f}x"
    )
    print(
        f"  the first System.run after 25 plain spawns: {first * 1e6:.0f} us (a v1 cgroup "
        "move after a pause waits for an RCU grace period; see bench/README.md)"
    )
    print(
        f"  context: bare subprocess.run {context['baseline_s'] * 1e6:.0f} us, "
        f"System.run {context['ratio']:.2f}x of it"
    )
    return spawn


def _drain(system: System, name: str, argv: list[str]) -> dict[str, float]:
    system.run(argv)  # warm up
    with _PeakRss() as rss:
        medians = _interleaved(
            {
                "read": lambda: _read_loop(argv),
                "splice": lambda: _splice_loop(argv),
                "system": lambda: system.run(argv),
            },
            rounds=7,
        )
    better = min(medians["read"], medians["splice"])
    figures = {
        "candidate_s": medians["system"],
        "read_loop_s": medians["read"],
        "splice_loop_s": medians["splice"],
        "baseline_s": better,
        "ratio": medians["system"] / better,
        "rss_growth_bytes": float(rss.peak - rss.base),
    }
    print(
        f"drain 1 GiB from {name} (1 MiB cap): System.run {medians['system']:.3f} s, "
        f"os.read loop {medians['read']:.3f} s, splice loop {medians['splice']:.3f} s, "
        f"ratio vs the better {figures['ratio']:.3f}x (target <= 1.05x); "
        f"peak RSS growth {figures['rss_growth_bytes'] / 2**20:.1f} MiB"
    )
    return figures


def main() -> None:
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as root, Workspace(root) as ws, System(ws) as system:
        figures["spawn_true"] = _spawn(system)
        for name, argv in PRODUCERS.items():
            key = "drain_1gib_" + name.split()[0]
            figures[key] = _drain(system, name, argv)
    record("process", figures)


if __name__ == "__main__":
    main()
