"""A root child's process limit is the tree's pids cgroup alone (no RLIMIT_NPROC).

RLIMIT_NPROC does not bind host root, and setting it needs code between fork and exec
(fork instead of vfork); the cgroup bounds the tree either way.
"""

from __future__ import annotations

import os
from pathlib import Path

from flux_system import Limits, System, Workspace
from flux_system.process._reap import cgroup_available
from tests._capabilities import require


def test_root_child_gets_the_cgroup_bound_not_the_rlimit(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "root (the cgroup path is root's)")
    require(cgroup_available(), "a writable pids cgroup (v1)")
    with Workspace(tmp_path) as ws, System(ws) as system:
        r = system.run(
            ["/bin/sh", "-c", "grep 'Max processes' /proc/self/limits"], limits=Limits(nproc=7)
        )
        assert r.exit_code == 0
        assert r.stdout_text.split()[2] != "7"  # the soft limit is the parent's
        bomb = system.run(
            ["/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 1 & done; wait"],
            limits=Limits(nproc=7),
            timeout=30,
        )
    assert "fork" in bomb.stderr_text.lower() or "resource" in bomb.stderr_text.lower()
