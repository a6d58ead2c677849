"""Cases for the simulated hosts only (collected by name from test_hosts.py, never alone).

Run inside a private mount namespace where ``/sys/fs/cgroup`` is cgroup2 alone
(``FLUX_TEST_CGROUP_HOST=v2``) or a tmpfs (``none``): the hierarchy found must be
the one mounted, v2 trees must die by freeze + ``cgroup.kill`` + pidfd rounds and by
freeze + SIGKILL alone (a kernel without ``cgroup.kill``), and without any cgroup the
fallback (process group, descendants, subreaper) must kill what it can see and say
the tree was not contained.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux_system import Limits, ProcessReason, ProcessTimeoutError, SpawnError, System
from flux_system.process import _members
from flux_system.process._cgroup import hierarchy_version
from tests.flux_system.process._process_support import (
    HOST_MODE,
    PYTHON,
    make_ws,
    procs,
    survivors,
)
from tests.flux_system.process.test_survivors import HALF_DEAD, _half_dead

if HOST_MODE not in ("v2", "none"):  # pragma: no cover - a wrong invocation
    raise RuntimeError("hosts_cases.py runs only in a simulated host (see test_hosts.py)")

# A chain of setsid fork-and-exit hops racing the kill, then a sleeper.
CHAIN = 'for i in 1 2 3 4 5 6 7 8; do setsid sh -c "sleep 60 &" ; done; echo started; sleep 60'


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    with System(make_ws(tmp_path)) as s:
        yield s


def test_the_hierarchy_found_is_the_one_mounted() -> None:
    assert hierarchy_version() == (2 if HOST_MODE == "v2" else None)
    with open("/proc/self/cgroup", encoding="ascii") as fh:
        assert ":pids:" in fh.read()  # the kernel still lists v1: mountinfo decides


def test_tree_contained_is_reported(system: System) -> None:
    assert system.run(["true"]).tree_contained is (HOST_MODE == "v2")


@pytest.mark.parametrize("atomic", [True, False], ids=["cgroup.kill", "freeze-only"])
def test_v2_kill_paths_leave_no_survivor(
    system: System, monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> None:
    if HOST_MODE != "v2":
        pytest.skip("v2 only")
    monkeypatch.setattr(_members, "USE_CGROUP_KILL", atomic)
    for _ in range(3):
        with pytest.raises(ProcessTimeoutError) as ei:
            system.run(["sh", "-c", CHAIN], timeout=2.0)
        assert b"started" in ei.value.stdout
        with pytest.raises(ProcessTimeoutError) as ei:
            system.run([PYTHON, "-S", "-c", HALF_DEAD, "0"], timeout=2.5)
        assert survivors(_half_dead(ei.value.stdout)) == []
        result = system.run([PYTHON, "-S", "-c", HALF_DEAD, "0.4"], timeout=30)
        assert survivors(_half_dead(result.stdout)) == []


def test_v2_freeze_is_undone_after_the_kill(system: System) -> None:
    if HOST_MODE != "v2":
        pytest.skip("v2 only")
    with pytest.raises(ProcessTimeoutError):
        system.run(["sh", "-c", "sleep 60 & sleep 60"], timeout=0.5)
    # The pooled cgroup the next tree gets is thawed: the child runs to its end.
    assert system.run(["sh", "-c", "echo ran"], timeout=30).stdout == b"ran\n"
    for lease in system._cgroups._free:
        with open(os.path.join(lease.path, "cgroup.freeze"), encoding="ascii") as fh:
            assert fh.read().strip() == "0"


def test_without_a_cgroup_the_process_group_and_descendants_die(system: System) -> None:
    if HOST_MODE != "none":
        pytest.skip("no-cgroup host only")
    result = system.run(["sh", "-c", "sleep 60 >/dev/null & echo $!"], timeout=30)
    assert not result.tree_contained
    assert survivors(procs([int(result.stdout)])) == []
    child = system.spawn(["sh", "-c", "sh -c 'sleep 60 & echo $!; wait' & wait"])
    out = b""
    end = time.monotonic() + 30  # a hang guard
    while not out.endswith(b"\n") and time.monotonic() < end:
        out += child.read_output().stdout
        time.sleep(0.01)
    watched = procs([int(out)])
    assert watched  # the control: the grandchild ran
    child.kill()
    assert child.join(30)
    assert survivors(watched) == []


def test_without_a_cgroup_a_root_process_limit_is_refused(system: System) -> None:
    if HOST_MODE != "none":
        pytest.skip("no-cgroup host only")
    with pytest.raises(SpawnError) as ei:
        system.run(["true"], limits=Limits(nproc=5))
    assert ei.value.reason is ProcessReason.LIMIT_UNENFORCEABLE
