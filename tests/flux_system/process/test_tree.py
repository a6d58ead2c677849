"""No survivors: timeouts, floods, daemons, cancellation, fork bombs, close (real processes)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from flux_system import (
    Limits,
    Privileges,
    ProcessError,
    ProcessReason,
    ProcessTimeoutError,
    SpawnError,
    System,
)
from flux_system.process._cgroup import process_limit_available
from flux_system.process._reap import cgroup_available
from tests._capabilities import require
from tests.flux_system.process._process_support import (
    PIDS_LIMIT,
    PYTHON,
    REPO,
    make_ws,
    procs,
    survivors,
)

# Prints its pid and the pid of a grandchild that left the session (setsid + fork),
# then keeps running.
DAEMON = 'echo $$; setsid sh -c "sleep 60 >/dev/null 2>&1 & echo \\$!"; sleep 60'
UNPRIVILEGED = 64999  # an otherwise unused uid, so RLIMIT_NPROC counts only this tree


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    with System(make_ws(tmp_path)) as s:
        yield s


def _watch_pids(lines: list[bytes], count: int) -> list[psutil.Process]:
    end = time.monotonic() + 10
    while time.monotonic() < end:
        pids = [int(x) for line in list(lines) for x in line.split() if x.isdigit()]
        if len(pids) >= count:
            return procs(pids)
        time.sleep(0.01)
    raise AssertionError("the child did not report its pids")


def test_daemonised_grandchild_does_not_survive_run(system: System) -> None:
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    result = system.run(["sh", "-c", 'setsid sh -c "sleep 60 >/dev/null 2>&1 & echo \\$!"'])
    watched = procs([int(result.stdout)])
    assert result.tree_contained
    assert survivors(watched) == []


def test_sleep_past_timeout_raises_with_output_and_kills_tree(system: System) -> None:
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    lines: list[bytes] = []
    observer_done = threading.Event()

    def observe(stream: str, line: bytes) -> None:
        lines.append(line)
        if len(lines) >= 2:
            observer_done.set()

    with pytest.raises(ProcessTimeoutError) as ei:
        system.run(["sh", "-c", DAEMON], timeout=0.5, observer=observe)
    err = ei.value
    assert err.reason is ProcessReason.TIMEOUT and err.timeout == 0.5
    pids = [int(x) for x in err.stdout.split()]
    assert len(pids) == 2
    assert survivors(procs(pids)) == []


def test_yes_flood_is_capped_and_killed(system: System) -> None:
    with pytest.raises(ProcessTimeoutError) as ei:
        system.run(["yes"], timeout=0.3)
    assert len(ei.value.stdout) == 1 << 20
    assert set(ei.value.stdout) == set(b"y\n")


def test_arun_cancellation_kills_and_reaps_tree(system: System) -> None:
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    lines: list[bytes] = []

    async def main() -> list[psutil.Process]:
        task = asyncio.create_task(
            system.arun(["sh", "-c", DAEMON], observer=lambda s, line: lines.append(line))
        )
        while len(lines) < 2:
            await asyncio.sleep(0.01)
        watched = procs([int(line) for line in lines])
        assert len(watched) == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return watched

    watched = asyncio.run(main())
    assert survivors(watched) == []


def test_arun_timeout(system: System) -> None:
    with pytest.raises(ProcessTimeoutError):
        asyncio.run(system.arun(["sleep", "30"], timeout=0.2))
    assert asyncio.run(system.arun(["echo", "ok"])).stdout == b"ok\n"


def test_keyboard_interrupt_kills_tree_before_propagating(system: System) -> None:
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    lines: list[bytes] = []
    main = threading.main_thread().ident
    assert main == threading.get_ident()

    def observe(stream: str, line: bytes) -> None:
        lines.append(line)
        if len(lines) == 2:
            threading.Timer(0.05, signal.pthread_kill, (main, signal.SIGINT)).start()

    with pytest.raises(KeyboardInterrupt):
        system.run(["sh", "-c", DAEMON], observer=observe)
    assert survivors(procs([int(line) for line in lines])) == []


def test_fork_bomb_unprivileged_uid_under_nproc(tmp_path: Path) -> None:
    priv = Privileges(uid=UNPRIVILEGED, gid=UNPRIVILEGED)
    # Whether the bomb's own shell can still fork `sleep` once the limit is reached is
    # a race, so the call may end by timeout or by the shell giving up; either way the
    # limit must have refused forks, and nothing of the tree may survive.
    with System(make_ws(tmp_path), privileges=priv) as s:
        try:
            result = s.run(
                ["sh", "-c", "f() { f | f & }; f; sleep 60"], timeout=1.0, limits=Limits(nproc=30)
            )
            stderr = result.stderr
        except ProcessTimeoutError as exc:
            stderr = exc.stderr
    assert b"fork" in stderr.lower()  # the limit refused forks
    left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"].real == UNPRIVILEGED]
    assert left == []


def test_fork_bomb_as_root_contained_by_pids_cgroup(system: System) -> None:
    require(process_limit_available(), PIDS_LIMIT)
    script = "i=0; while [ $i -lt 50 ]; do sleep 60 & i=$((i+1)); done; echo started"
    result = system.run(["sh", "-c", script], limits=Limits(nproc=10), timeout=30)
    assert result.tree_contained
    assert b"fork" in result.stderr.lower()  # the 11th process was refused
    assert psutil.Process().children(recursive=True) == []


def test_spawn_read_output_status_kill_and_wait(system: System) -> None:
    child = system.spawn(["sh", "-c", "echo one; echo two >&2; sleep 60"])
    got = b""
    end = time.monotonic() + 5
    while b"one" not in got and time.monotonic() < end:
        got += child.read_output().stdout
        time.sleep(0.01)
    assert got == b"one\n"
    assert child.status().running
    child.kill()
    assert asyncio.run(child.wait()) == -9
    status = child.status()
    assert (status.running, status.exit_code, status.signal) == (False, -9, 9)


def test_spawn_bounded_buffer_counts_dropped(system: System) -> None:
    child = system.spawn(["head", "-c", "10000", "/dev/zero"], buffer_cap=1000)
    assert child.join(10)
    out = child.read_output()
    assert len(out.stdout) == 1000 and out.stdout_dropped == 9000


def test_max_children_and_close(tmp_path: Path) -> None:
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    s = System(make_ws(tmp_path), max_children=1)
    child = s.spawn(["sh", "-c", 'setsid sh -c "sleep 60 & echo \\$!"; sleep 60'])
    with pytest.raises(SpawnError) as ei:
        s.run(["true"])
    assert ei.value.reason is ProcessReason.TOO_MANY_CHILDREN
    end = time.monotonic() + 5
    out = b""
    while not out.strip() and time.monotonic() < end:
        out += child.read_output().stdout
        time.sleep(0.01)
    watched = procs([child.pid, int(out)])
    s.close()
    assert not child.status().running
    assert survivors(watched) == []
    with pytest.raises(ProcessError) as ei2:
        s.run(["true"])
    assert ei2.value.reason is ProcessReason.CLOSED


def test_interpreter_exit_kills_children(system: System) -> None:
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    code = (
        "import sys, time, pathlib\n"
        f"sys.path.insert(0, {REPO!r})\n"
        "from tests.flux_system.process._process_support import make_ws\n"
        "from flux_system import System\n"
        "s = System(make_ws(pathlib.Path('.')))\n"
        f"c = s.spawn(['sh', '-c', {DAEMON!r}])\n"
        "out = b''\n"
        "while out.count(b'\\n') < 2: out += c.read_output().stdout; time.sleep(0.01)\n"
        "print(out.decode(), flush=True)\n"
    )
    result = system.run([PYTHON, "-c", code], timeout=30)
    assert result.exit_code == 0, result.stderr_text
    pids = [int(x) for x in result.stdout.split()]
    assert len(pids) == 2
    assert survivors(procs(pids)) == []


def test_limits_applied_before_exec(system: System) -> None:
    out = system.run(
        ["sh", "-c", "ulimit -n; ulimit -f"], limits=Limits(open_files=17, file_size=1024)
    )
    assert out.stdout.split() == [b"17", b"2"]  # ulimit -f counts 512-byte blocks
    big = system.run(["sh", "-c", "head -c 4096 /dev/zero > f"], limits=Limits(file_size=1024))
    assert big.exit_code != 0
    cpu = system.run([PYTHON, "-S", "-c", "while True: pass"], limits=Limits(cpu_s=1), timeout=20)
    assert cpu.signal in (9, 24)  # SIGXCPU at the soft limit (= hard limit) or SIGKILL


def test_unenforceable_limit_reported(system: System) -> None:
    with pytest.raises(SpawnError) as ei:
        system.run(["true"], limits=Limits(open_files=1 << 40))
    assert ei.value.reason is ProcessReason.LIMIT_UNENFORCEABLE


def test_nproc_for_root_without_pids_cgroup_is_unenforceable(tmp_path: Path) -> None:
    # _contain=False is the real code path of a host without a writable pids cgroup.
    with System(make_ws(tmp_path), _contain=False) as s:
        assert not s.run(["true"]).tree_contained
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        with pytest.raises(SpawnError) as ei:
            s.run(["sh", "-c", "sleep 60"], limits=Limits(nproc=5))
        assert ei.value.reason is ProcessReason.LIMIT_UNENFORCEABLE
        assert {p.pid for p in psutil.Process().children(recursive=True)} == before
    # An unprivileged child gets RLIMIT_NPROC, which the kernel enforces: accepted.
    priv = Privileges(uid=UNPRIVILEGED, gid=UNPRIVILEGED)
    with System(make_ws(tmp_path), _contain=False, privileges=priv) as s:
        assert s.run(["true"], limits=Limits(nproc=5)).exit_code == 0


def test_nproc_for_root_with_pids_cgroup_is_enforced(system: System) -> None:
    # The control of the test above: the same request succeeds with containment.
    require(process_limit_available(), PIDS_LIMIT)
    assert system.run(["true"], limits=Limits(nproc=5)).exit_code == 0


def test_concurrent_runs_never_kill_or_reap_each_other(system: System) -> None:
    # Each run leaves a member behind, so its kill looks for adopted orphans; those
    # share this process's session, which must not make another run's leader a match.
    failures: list[BaseException] = []
    codes: list[int] = []

    def work() -> None:
        try:
            for _ in range(15):
                codes.append(system.run(["sh", "-c", "sleep 0.001 & true"]).exit_code)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert codes == [0] * 60
