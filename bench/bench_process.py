"""Process benchmarks: spawn+wait overhead and draining past the cap (ratios, same run).

1. ``System.run(["/bin/true"])`` vs ``subprocess.run(["/bin/true"])`` (target <= 1.25x).
2. Draining 1 GiB of stdout under the default 1 MiB cap vs
   ``subprocess.run(..., stdout=DEVNULL)`` (target <= 2x), with the peak RSS growth of
   this process while draining.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record, side_by_side
from flux_system import System, Workspace

GIB_CMD = ["dd", "if=/dev/zero", "bs=1M", "count=1024", "status=none"]


def _pipe_floor(argv: list[str]) -> None:
    r, w = os.pipe()
    fcntl.fcntl(r, 1031, 1 << 20)  # F_SETPIPE_SZ, as System does
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


def main() -> None:
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as root, Workspace(root) as ws, System(ws) as system:
        for _ in range(50):  # warm up both paths
            system.run(["/bin/true"])
            subprocess.run(["/bin/true"], check=False)
        spawn = side_by_side(
            lambda: system.run(["/bin/true"]),
            lambda: subprocess.run(["/bin/true"], check=False),
            number=25,  # short interleaved batches: less exposed to load swings
            rounds=41,
        )
        print(
            f"spawn+wait /bin/true: System.run {spawn['candidate_s'] * 1e6:.0f} us, "
            f"subprocess.run {spawn['baseline_s'] * 1e6:.0f} us, ratio {spawn['ratio']:.2f}x "
            "(target <= 1.25x)"
        )
        figures["spawn_true"] = spawn

        me = psutil.Process()
        base_rss = me.memory_info().rss
        peak = [base_rss]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], me.memory_info().rss)
                stop.wait(0.002)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            drain = side_by_side(
                lambda: system.run(GIB_CMD),
                lambda: subprocess.run(GIB_CMD, stdout=subprocess.DEVNULL, check=False),
                number=1,
                rounds=5,
            )
        finally:
            stop.set()
            sampler.join()
        growth = peak[0] - base_rss
        drain["rss_growth_bytes"] = growth
        # The floor of any capture through a pipe: the child's writes copy every byte
        # into the pipe, which DEVNULL never does. Same loop with a bare splice drain.
        floor = side_by_side(
            lambda: system.run(GIB_CMD),
            lambda: _pipe_floor(GIB_CMD),
            number=1,
            rounds=3,
        )
        drain["vs_pipe_floor_ratio"] = floor["ratio"]
        drain["pipe_floor_s"] = floor["baseline_s"]
        print(
            f"drain 1 GiB (1 MiB cap): System.run {drain['candidate_s']:.3f} s, "
            f"subprocess.run DEVNULL {drain['baseline_s']:.3f} s, ratio "
            f"{drain['ratio']:.2f}x (target <= 2x); peak RSS growth {growth / 2**20:.1f} MiB"
        )
        print(f"  vs a bare pipe+splice drain ({floor['baseline_s']:.3f} s): {floor['ratio']:.2f}x")
        figures["drain_1gib"] = drain
    record("process", figures)


if __name__ == "__main__":
    main()
