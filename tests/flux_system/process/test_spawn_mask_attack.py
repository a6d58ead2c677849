"""An outside attack on the child's signal mask and the spawn's audit event.

The claims attacked (decision 0138, as fixed after the first attack on it): the child's
signal mask is the *requesting* thread's on every path — ``posix_spawn`` with its
``SETSIGMASK`` attribute sets (cached per distinct mask, at most 64 kept), and ``Popen``
when another thread forks (the v1 cgroup's resident thread, the sandbox's spawner
thread), which takes the caller's mask for the job and gets its own back afterwards,
also when the job fails; and no process is created without an audit event.

Each check reads the child's ``SigBlk`` from ``cat /proc/self/status`` (not Python), and
the forking thread's own mask from ``/proc/self/task/<tid>/status``. The forking
thread is made to have a mask of its own (``SIGUSR2`` blocked when it was created), so
that a mask left behind or not taken shows. Real processes only.

One difference found, in bubblewrap itself: under that backend the command gets
``SIGCHLD`` unblocked whatever the caller's mask (bwrap blocks it for its own signalfd
and unblocks it before its exec). It is documented in docs/sandbox.md ("Not
guaranteed") and its test is a strict xfail: it fails the suite the day it passes.
Every other attack held.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flux_system import Limits, SpawnError, System
from flux_system.process import Privileges
from flux_system.process import _posix_spawn as posix_spawn
from tests._capabilities import require
from tests.flux_system.process._process_support import PYTHON, REPO, make_ws

_OWN = signal.SIGUSR2  # blocked in the thread that makes the resident / spawner thread


def _bits(signals: set[int] | frozenset[int]) -> int:
    out = 0
    for sig in signals:
        out |= 1 << (int(sig) - 1)
    return out


def _status_blk(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigBlk in {text!r}")


def _child_blk(system: System, **kwargs: Any) -> int:
    result = system.run(["cat", "/proc/self/status"], **kwargs)
    assert result.exit_code == 0, result.stderr
    return _status_blk(result.stdout.decode())


def _thread_blk(tid: int) -> int:
    return _status_blk(Path(f"/proc/self/task/{tid}/status").read_text())


def _here_blk() -> int:
    return _status_blk(Path("/proc/thread-self/status").read_text())


class _Masked:
    """This thread's signal mask set to *signals* for a ``with`` block."""

    def __init__(self, signals: set[int]) -> None:
        self.signals = signals

    def __enter__(self) -> None:
        self.old = signal.pthread_sigmask(signal.SIG_SETMASK, self.signals)

    def __exit__(self, *_: object) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old)


def _in_thread(fn: Callable[[], Any], mask: set[int]) -> Any:
    """Run *fn* in a fresh thread whose signal mask is *mask*; return its result."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def main() -> None:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            out.append(fn())
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    t = threading.Thread(target=main)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return out[0]


def _forkers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record (path, native tid) of every thread that runs a spawn path's fork."""
    seen: list[tuple[str, int]] = []
    real_spawn = posix_spawn.spawn
    real_fork_exec = subprocess._fork_exec  # type: ignore[attr-defined]

    def spawn(*args: Any, **kwargs: Any) -> int:
        seen.append(("posix_spawn", threading.get_native_id()))
        return real_spawn(*args, **kwargs)

    def fork_exec(*args: Any, **kwargs: Any) -> int:
        seen.append(("popen", threading.get_native_id()))
        pid: int = real_fork_exec(*args, **kwargs)
        return pid

    monkeypatch.setattr(posix_spawn, "spawn", spawn)
    monkeypatch.setattr(subprocess, "_fork_exec", fork_exec)
    return seen


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    with System(make_ws(tmp_path)) as s:
        _in_thread(lambda: s.run(["true"]), {_OWN})  # the cgroup and its resident made here
        yield s


def _resident_tid(system: System, monkeypatch: pytest.MonkeyPatch) -> int:
    """The thread forking this System's children, shown to be another thread with a
    mask of its own (the positive control for every resident test)."""
    seen = _forkers(monkeypatch)
    assert _child_blk(system) == _here_blk() == 0
    monkeypatch.undo()
    assert len(seen) == 1
    tid = seen[0][1]
    require(tid != threading.get_native_id(), "a v1 cgroup resident thread forking")
    assert _thread_blk(tid) == _bits({_OWN})
    return tid


# -- the posix_spawn path's attribute cache ------------------------------------------------


def test_more_distinct_masks_than_the_cache_keeps_each_child_gets_its_own(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = [signal.SIGRTMIN, signal.SIGRTMIN + 1, 40, 50, 60, signal.SIGRTMAX - 1, signal.SIGRTMAX]
    masks = [{rt[j] for j in range(7) if i >> j & 1} for i in range(1, 81)]
    masks = [m | ({signal.SIGUSR1} if i >= 60 else set()) for i, m in enumerate(masks)]
    seen = _forkers(monkeypatch)
    got = []
    for mask in [*masks, *masks[:5], *masks[-5:]]:  # cached ones, then uncached again
        with _Masked(mask):
            got.append((_child_blk(system), _here_blk()))
    assert [path for path, _ in seen] == ["posix_spawn"] * len(got)
    assert posix_spawn._lib is not None and len(posix_spawn._lib._attrs) == 64
    assert [child for child, _ in got] == [here for _, here in got]
    assert [here for _, here in got] == [_bits(m) for m in [*masks, *masks[:5], *masks[-5:]]]


def test_kill_and_stop_in_the_mask_are_dropped_as_the_kernel_drops_them(
    system: System,
) -> None:
    with _Masked({signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGRTMAX}):
        here = _here_blk()
        child = _child_blk(system)
        limited = _child_blk(system, limits=Limits(open_files=64))
    assert here == _bits({signal.SIGTERM, signal.SIGRTMAX})  # the attack's mask was set
    assert child == limited == here


def test_distinct_masks_in_threads_spawning_at_once(system: System) -> None:
    results: dict[int, list[tuple[int, int]]] = {}
    start = threading.Barrier(6)

    def work(i: int) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, {signal.SIGRTMIN + i, signal.SIGHUP})
        start.wait()
        limits = Limits(open_files=64) if i % 2 else None
        results[i] = [(_child_blk(system, limits=limits), _here_blk()) for _ in range(4)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(6):
        want = _bits({signal.SIGRTMIN + i, signal.SIGHUP})
        assert results[i] == [(want, want)] * 4, i


# -- the Popen path through the resident thread -------------------------------------------


@pytest.mark.parametrize("mode", ["limits", "no_new_privs", "failed_posix_spawn"])
def test_the_popen_path_through_the_resident_takes_the_callers_mask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    priv = Privileges(no_new_privs=True) if mode == "no_new_privs" else None
    with System(make_ws(tmp_path), privileges=priv) as system:
        _in_thread(lambda: system.run(["true"]), {_OWN})
        resident = _resident_tid(system, monkeypatch)
        seen = _forkers(monkeypatch)
        with _Masked({signal.SIGTERM, signal.SIGRTMIN}):
            if mode == "failed_posix_spawn":
                with pytest.raises(SpawnError):
                    system.run(["/nonexistent/prog"])
            else:
                limits = Limits(open_files=64) if mode == "limits" else None
                blk = _child_blk(system, limits=limits)
                assert blk == _bits({signal.SIGTERM, signal.SIGRTMIN})
        popen = [tid for path, tid in seen if path == "popen"]
        assert popen == [resident]  # the Popen job ran on the resident
        assert _thread_blk(resident) == _bits({_OWN})  # its own mask is back
        assert _child_blk(system) == 0  # and the next (empty-mask) child has none
        if mode == "no_new_privs":
            assert _child_blk(system, limits=Limits(open_files=64)) == 0


@pytest.mark.parametrize("limits", [None, Limits(open_files=64)], ids=["default", "limits"])
def test_a_failing_popen_job_gives_the_resident_its_mask_back(
    system: System, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, limits: Limits | None
) -> None:
    resident = _resident_tid(system, monkeypatch)
    seen = _forkers(monkeypatch)
    with _Masked({signal.SIGTERM}), pytest.raises(SpawnError) as info:
        system.run(["missing-program-atk8"], limits=limits)
    assert "missing-program-atk8" in str(info.value.target)
    assert ("popen", resident) in seen or seen == []  # missing from PATH: no fork at all
    monkeypatch.undo()
    assert _thread_blk(resident) == _bits({_OWN})
    assert _child_blk(system, limits=limits) == 0
    # A program found on PATH that cannot be exec'd: posix_spawn fails, Popen repeats it.
    bad = tmp_path / "notexec"
    bad.write_text("no shebang\n")
    bad.chmod(0o644)
    seen = _forkers(monkeypatch)
    with _Masked({signal.SIGTERM}), pytest.raises(SpawnError):
        system.run(["./notexec"], limits=limits)
    assert ("popen", resident) in seen  # positive control: the resident ran Popen
    monkeypatch.undo()
    assert _thread_blk(resident) == _bits({_OWN})
    assert _child_blk(system) == 0


def test_an_interrupt_raised_after_the_fork_on_the_resident_restores_its_mask(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    resident = _resident_tid(system, monkeypatch)
    real_fork_exec = subprocess._fork_exec  # type: ignore[attr-defined]
    forked: list[tuple[int, int]] = []

    def fork_exec(*args: Any, **kwargs: Any) -> int:
        pid: int = real_fork_exec(*args, **kwargs)
        forked.append((pid, threading.get_native_id()))
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "_fork_exec", fork_exec)
    with _Masked({signal.SIGTERM}), pytest.raises(KeyboardInterrupt):
        system.run(["sleep", "30"], limits=Limits(open_files=64))
    monkeypatch.undo()
    assert len(forked) == 1 and forked[0][1] == resident  # the child was made there
    assert not Path(f"/proc/{forked[0][0]}").exists()  # killed and reaped
    assert _thread_blk(resident) == _bits({_OWN})
    assert _child_blk(system, limits=Limits(open_files=64)) == 0


def test_background_spawn_and_arun_take_the_requesting_threads_mask(system: System) -> None:
    with _Masked({signal.SIGTERM}):
        child = system.spawn(["cat", "/proc/self/status"])
        assert child.join(timeout=10)
    spawned = _status_blk(child.read_output().stdout.decode())

    async def arun() -> tuple[int, int]:
        with _Masked({signal.SIGHUP}):
            result = await system.arun(["cat", "/proc/self/status"])
            limited = await system.arun(["cat", "/proc/self/status"], limits=Limits(open_files=64))
        return _status_blk(result.stdout.decode()), _status_blk(limited.stdout.decode())

    assert spawned == _bits({signal.SIGTERM})
    assert asyncio.run(arun()) == (_bits({signal.SIGHUP}),) * 2


def test_a_caller_with_fds_0_to_2_closed_gives_its_mask_on_the_popen_path() -> None:
    script = """
        import json, os, signal, subprocess, tempfile, threading
        from flux_system import System, Workspace
        calls = []
        real = subprocess._fork_exec
        def fork_exec(*a, **k):
            calls.append(threading.get_native_id())
            return real(*a, **k)
        subprocess._fork_exec = fork_exec
        report = os.dup(1)
        system = System(Workspace(tempfile.mkdtemp()))
        def first():
            signal.pthread_sigmask(signal.SIG_SETMASK, {signal.SIGUSR2})
            system.run(["true"])
        t = threading.Thread(target=first); t.start(); t.join()
        for fd in (0, 1, 2):
            os.close(fd)
        def blk(text):
            return [l for l in text.splitlines() if l.startswith("SigBlk")][0].split()[1]
        signal.pthread_sigmask(signal.SIG_SETMASK, {signal.SIGTERM})
        child = blk(system.run(["cat", "/proc/self/status"]).stdout.decode())
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        after = blk(system.run(["cat", "/proc/self/status"]).stdout.decode())
        me = threading.get_native_id()
        system.close()
        os.write(report, json.dumps([child, after, calls, me]).encode())
        """
    done = subprocess.run(
        [PYTHON, "-c", textwrap.dedent(script)],
        env={**os.environ, "PYTHONPATH": REPO},
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    child, after, calls, me = json.loads(done.stdout)
    assert len(calls) == 2 and me not in calls  # both on Popen (fds < 3), another thread
    assert int(child, 16) == _bits({signal.SIGTERM})
    assert int(after, 16) == 0


# -- the sandbox ---------------------------------------------------------------------------


def _sandboxed(backend: str, tmp_path: Path) -> System:
    from flux_system.sandbox import Sandbox, SandboxSettings
    from tests.flux_system.sandbox._support import require_backend

    require_backend(backend)
    sandbox = Sandbox.resolve(SandboxSettings(mode="on", backend=backend))
    system = _in_thread(lambda: System(make_ws(tmp_path), sandbox=sandbox), {_OWN})
    assert isinstance(system, System)
    return system


def test_the_landlock_spawner_takes_the_callers_mask_and_gets_its_own_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = _sandboxed("landlock", tmp_path)
    try:
        _in_thread(lambda: system.run(["/bin/true"]), {_OWN})
        seen = _forkers(monkeypatch)
        with _Masked({signal.SIGTERM, signal.SIGCHLD, signal.SIGRTMIN}):
            blk = _child_blk(system)
            with pytest.raises(SpawnError):
                system.run(["/nonexistent/prog"])
        monkeypatch.undo()
        spawner = {tid for path, tid in seen if path == "popen"}
        assert len(spawner) == 1 and threading.get_native_id() not in spawner
        (tid,) = spawner
        assert _thread_blk(tid) == _bits({_OWN})  # restored, after the failed job too
        assert blk == _bits({signal.SIGTERM, signal.SIGCHLD, signal.SIGRTMIN})
        assert _child_blk(system) == 0
    finally:
        system.close()


@pytest.mark.xfail(
    strict=True,
    reason="bubblewrap unblocks SIGCHLD before it execs the command (docs/sandbox.md)",
)
def test_a_bwrap_sandboxed_child_keeps_the_callers_blocked_sigchld(tmp_path: Path) -> None:
    # The same request unsandboxed and under the Landlock backend gives a child with
    # SIGCHLD blocked (the tests above). Under bubblewrap the mask reaches bwrap (the
    # other signals arrive), but bwrap blocks SIGCHLD for its own signalfd and
    # *unblocks* it before exec'ing the command: the child's mask is no longer the
    # caller's, only under this backend.
    system = _sandboxed("bwrap", tmp_path)
    try:
        want: set[int] = {signal.SIGTERM, signal.SIGCHLD, signal.SIGRTMIN}
        with _Masked(want):
            blk = _child_blk(system)
        assert blk & _bits({signal.SIGTERM, signal.SIGRTMIN}) == _bits(
            {signal.SIGTERM, signal.SIGRTMIN}
        )  # positive control: the caller's mask reached the sandboxed command
        assert _child_blk(system) == 0
        assert blk == _bits(want), f"SigBlk {blk:x}, the caller's {_bits(want):x}"
    finally:
        system.close()


# -- audit events --------------------------------------------------------------------------


_AUDIT_SCRIPT = """
import json, sys, tempfile
import psutil
from flux_system import Limits, System, Workspace
from flux_system.process import Privileges
from flux_system.sandbox import Sandbox, SandboxSettings, _host
deny = [False]
events = []
def hook(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec",
                 "os.spawn", "os.system", "os.posix_spawnp", "pty.spawn"):
        events.append(event)
        if deny[0]:
            raise RuntimeError("refused")
sys.addaudithook(hook)
case = sys.argv[1]
res = {}
if case == "trial":
    deny[0] = True
    info = _host.probe().bwrap
    res["trial"] = [info.usable, info.reason, len(events)]
else:
    priv = Privileges(no_new_privs=True) if case == "no_new_privs" else None
    box = None
    if case in ("bwrap", "landlock"):
        box = Sandbox.resolve(SandboxSettings(mode="on", backend=case))
    system = System(Workspace(tempfile.mkdtemp()), privileges=priv, sandbox=box)
    limits = Limits(open_files=64) if case == "limits" else None
    def run():
        if case == "spawn":
            return system.spawn(["/bin/true"]).join(10)
        return system.run(["/bin/true"], limits=limits)
    run()  # allowed: the positive control that this path works and raises the event
    res["allowed_events"] = len(events)
    deny[0] = True
    kids = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        run()
        res["denied"] = "ran"
    except RuntimeError:
        res["denied"] = "refused"
    deny[0] = False
    now = {p.pid for p in psutil.Process().children(recursive=True)}
    res["new"] = len(now - kids)
    system.close()
print(json.dumps(res))
"""


@pytest.mark.parametrize(
    "case", ["default", "limits", "no_new_privs", "spawn", "bwrap", "landlock", "trial"]
)
def test_every_spawn_path_raises_a_process_creation_audit_event(case: str) -> None:
    # A host's audit hook refusing process creation must stop every path: the default
    # spawn, the Popen ones (limits, no_new_privs), a background spawn, both sandbox
    # backends, and the bwrap trial of the host probe (run by `flux doctor`); none
    # may leave a process made while it refused.
    if case in ("bwrap", "landlock"):
        from tests.flux_system.sandbox._support import require_backend

        require_backend(case)
    done = subprocess.run(
        [PYTHON, "-c", _AUDIT_SCRIPT, case],
        env={**os.environ, "PYTHONPATH": REPO},
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout)
    if case == "trial":
        usable, reason, events = res["trial"]
        assert usable is False and "refused" in reason and events >= 1, res
        return
    assert res["allowed_events"] >= 1, res  # positive control: the event was raised
    assert res["denied"] == "refused" and res["new"] == 0, res
