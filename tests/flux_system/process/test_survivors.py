"""Nothing of a tree survives its kill: the members the cgroup lists, on every path.

Regressions of issue 12 §1 (docs/decisions/0024). Each failed before its fix:
- a member whose main thread exited (cgroup v1 shows ``/`` in its /proc/PID/cgroup)
  was taken for a non-member and outlived every kill path and the interpreter;
- a pooled cgroup was re-read through a kept ``cgroup.procs`` fd that repeats its
  first listing forever, so right after a run whose daemon was killed the next tree
  looked empty and its setsid child survived the timeout;
- a cgroup removed under a pooled lease made the next spawn raise a bare OSError.
Run in a simulated v2-only host and a no-cgroup host too (test_hosts.py).
"""

from __future__ import annotations

import asyncio
import errno
import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from flux_system import (
    ManagedChild,
    Privileges,
    ProcessReason,
    ProcessTimeoutError,
    SpawnError,
    System,
)
from flux_system.process._reap import cgroup_available
from tests._capabilities import require
from tests.flux_system.process._process_support import (
    PYTHON,
    REPO,
    SYSTEM_PYTHON,
    make_ws,
    procs,
    survivors,
)

CONTAINED = "a usable cgroup (v1 pids or v2) for tree containment"
REPEAT = 5

# The child, made observable: the surviving thread reports the process's pid
# once its main thread is gone (state Z with the thread group alive), the positive
# control that the case under test really happened. PARENT_S: how long its parent
# (the tree's leader) lives; 0 waits for a signal.
HALF_DEAD = textwrap.dedent(
    """
    import os, sys, threading, time, ctypes
    parent_s = float(sys.argv[1])
    if os.fork() == 0:
        os.setsid()
        me = os.getpid()
        def report():
            while True:
                with open(f"/proc/{me}/task/{me}/stat", "rb") as fh:
                    if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                        break
                time.sleep(0.005)
            os.write(1, b"half-dead %d %d\\n" % (me, os.getuid()))
            time.sleep(30)
        threading.Thread(target=report).start()
        time.sleep(0.05)
        ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: ends only the main thread
    else:
        time.sleep(parent_s if parent_s else 60)
    """
)


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    with System(make_ws(tmp_path)) as s:
        yield s


def _half_dead(out: bytes) -> list[psutil.Process]:
    pids = [int(line.split()[1]) for line in out.splitlines() if line.startswith(b"half-dead")]
    assert len(pids) == 1, out  # the control: the main thread exited, the process lived
    return procs(pids)


def _wait_for(child: ManagedChild) -> bytes:
    end = time.monotonic() + 20
    data = b""
    while time.monotonic() < end:
        data += child.read_output().stdout
        if b"half-dead" in data and data.endswith(b"\n"):
            return data
        time.sleep(0.01)
    raise AssertionError("the child did not report")


def test_half_dead_member_killed_on_normal_exit(system: System) -> None:
    require(cgroup_available(), CONTAINED)
    for _ in range(REPEAT):
        result = system.run([PYTHON, "-S", "-c", HALF_DEAD, "0.4"], timeout=30)
        assert result.exit_code == 0 and result.tree_contained
        assert survivors(_half_dead(result.stdout)) == []


def test_half_dead_member_killed_on_timeout(system: System) -> None:
    require(cgroup_available(), CONTAINED)
    for _ in range(4):
        with pytest.raises(ProcessTimeoutError) as ei:  # long enough for a loaded host
            system.run([PYTHON, "-S", "-c", HALF_DEAD, "0"], timeout=2.5)
        assert survivors(_half_dead(ei.value.stdout)) == []


@pytest.mark.parametrize("how", ["kill", "close"])
def test_half_dead_member_killed_by_kill_and_close(tmp_path: Path, how: str) -> None:
    require(cgroup_available(), CONTAINED)
    for _ in range(REPEAT):
        s = System(make_ws(tmp_path))
        child = s.spawn([PYTHON, "-S", "-c", HALF_DEAD, "0"])
        watched = _half_dead(_wait_for(child))
        if how == "kill":
            child.kill()
            assert child.join(30)
        s.close()
        assert survivors(watched) == []


def test_half_dead_member_killed_when_arun_is_cancelled(system: System) -> None:
    require(cgroup_available(), CONTAINED)

    async def once() -> list[psutil.Process]:
        lines: list[bytes] = []
        task = asyncio.create_task(
            system.arun(
                [PYTHON, "-S", "-c", HALF_DEAD, "0"], observer=lambda s, ln: lines.append(ln)
            )
        )
        while not any(b"half-dead" in ln for ln in lines):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return _half_dead(b"".join(lines))

    for _ in range(REPEAT):
        assert survivors(asyncio.run(once())) == []


def test_half_dead_member_of_an_unprivileged_child_is_killed(tmp_path: Path) -> None:
    require(cgroup_available(), CONTAINED)
    os.chmod(tmp_path, 0o755)
    priv = Privileges(uid=65534, gid=65534)
    with System(make_ws(tmp_path), privileges=priv) as s:
        for _ in range(REPEAT):
            result = s.run([SYSTEM_PYTHON, "-S", "-I", "-c", HALF_DEAD, "0.4"], timeout=30)
            assert result.exit_code == 0, result.stderr_text
            assert result.stdout.split()[2] == b"65534"  # the member ran unprivileged
            assert survivors(_half_dead(result.stdout)) == []


def test_half_dead_member_does_not_outlive_the_interpreter(system: System) -> None:
    require(cgroup_available(), CONTAINED)
    code = textwrap.dedent(
        f"""
        import sys, time, pathlib
        sys.path.insert(0, {REPO!r})
        from tests.flux_system.process._process_support import make_ws
        from flux_system import System
        s = System(make_ws(pathlib.Path('.')))
        c = s.spawn([sys.executable, '-S', '-c', {HALF_DEAD!r}, '0'])
        out = b''
        while b'half-dead' not in out or not out.endswith(b'\\n'):
            out += c.read_output().stdout
            time.sleep(0.01)
        print(out.decode(), end='', flush=True)
        """
    )
    for _ in range(3):
        result = system.run([PYTHON, "-c", code], timeout=60)
        assert result.exit_code == 0, result.stderr_text
        assert survivors(_half_dead(result.stdout)) == []


def test_timeout_right_after_a_killed_daemon_kills_the_new_tree(system: System) -> None:
    # No pause between the runs: the second tree gets the first one's pooled cgroup.
    require(cgroup_available(), CONTAINED)
    for _ in range(12):
        first = system.run(["sh", "-c", 'setsid sh -c "sleep 60 >/dev/null 2>&1 & echo \\$!"'])
        daemon = procs([int(first.stdout)])
        with pytest.raises(ProcessTimeoutError) as ei:  # 1.5 s: room for a loaded host
            system.run(["sh", "-c", "setsid sleep 60 & echo $!; exec sleep 60"], timeout=1.5)
        assert ei.value.stdout.strip().isdigit()  # the control: the setsid child ran
        child = procs([int(ei.value.stdout)])
        assert survivors(daemon + child) == []
        assert psutil.Process().children(recursive=True) == []


def test_vanished_pooled_cgroup_is_a_typed_spawn_error(system: System) -> None:
    # The pooled cgroup is removed under the pool (it is empty, so rmdir succeeds):
    # the next spawn cannot enter it. A typed SpawnError, nothing started, and the
    # spawn after it gets a fresh cgroup.
    require(cgroup_available(), CONTAINED)
    for _ in range(REPEAT):
        assert system.run(["true"]).tree_contained
        free = list(system._cgroups._free)
        assert len(free) == 1
        resident = free[0].resident
        if resident is not None:  # v1: our thread lives there, so the kernel refuses...
            with pytest.raises(OSError) as busy:
                os.rmdir(free[0].path)
            assert busy.value.errno == errno.EBUSY
            resident.close()  # ...until it is gone (as if it had died)
        os.rmdir(free[0].path)
        with pytest.raises(SpawnError) as ei:
            system.run(["true"])
        assert ei.value.reason is ProcessReason.SPAWN_FAILED
        assert psutil.Process().children() == []
        assert system.run(["true"]).exit_code == 0
