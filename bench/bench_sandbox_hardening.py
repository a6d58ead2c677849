"""What the third review's bubblewrap options cost: bare bwrap with and without them.

Both sides are ``subprocess.run`` of the bwrap command line the backend builds for
``/bin/true`` (default profile, network none; read from its ``--args`` memfd, seccomp
program included, the same pipes), interleaved rounds, medians. The baseline is the
same line with this review's additions taken out — ``--remount-ro /dev --remount-ro
/`` (decision 0118), the three ``--size N`` (0118) and the six more ``/dev/null`` binds
over ``/proc`` files (0116, amendment) — so the ratio is their cost alone, on the
floor every sandboxed run pays.

Run: ``python bench/bench_sandbox_hardening.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record, side_by_side
from bench.bench_sandbox import _bare_bwrap
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings

NEW_HIDDEN = ("kpageflags", "kpagecount", "kpagecgroup", "slabinfo", "pagetypeinfo", "vmallocinfo")


def _without_review(opts: list[bytes]) -> list[bytes]:
    """*opts* without this review's options (the baseline)."""
    out: list[bytes] = []
    i = 0
    while i < len(opts):
        o = opts[i]
        if o in (b"--remount-ro", b"--size"):
            i += 2
            continue
        if o == b"--ro-bind-try" and opts[i + 2].decode().removeprefix("/proc/") in NEW_HIDDEN:
            i += 3
            continue
        out.append(o)
        i += 1
    assert len(out) < len(opts), "the review's options were not found"
    return out


def main() -> None:
    box = Sandbox.resolve(SandboxSettings(mode="require", profile="default"))
    with tempfile.TemporaryDirectory() as root, Workspace(root) as ws, System(ws, sandbox=box) as s:
        with_review = _bare_bwrap(s)
        without = _bare_bwrap(s, edit=_without_review)
        for _ in range(10):
            with_review()
            without()
        got = side_by_side(with_review, without, number=5, rounds=15)
    load = os.getloadavg()[0]
    print(
        f"bare bwrap, default profile: {got['candidate_s'] * 1e3:.2f} ms with the review's "
        f"options, {got['baseline_s'] * 1e3:.2f} ms without, ratio {got['ratio']:.3f}x "
        f"(load {load:.2f})"
    )
    record("sandbox_hardening", {"bare_bwrap_with_vs_without": got, "load": load})


if __name__ == "__main__":
    main()
