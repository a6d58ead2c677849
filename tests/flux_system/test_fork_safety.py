"""Fork safety of System and Workspace: real threads, real ``os.fork()`` (decisions 0011, 0022).

Each scenario runs in a fresh interpreter (its fork then copies only that interpreter's
state, not pytest's); forked children end with ``sys.exit`` where the interpreter-exit
hooks are the point, else ``os._exit``. A child that hangs is killed after a generous
bound and reported as ``hung``: the bound only stops a deadlock, nothing is timed.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux_system import System
from flux_system.process._reap import cgroup_available
from tests._capabilities import require
from tests.flux_system.process._process_support import PYTHON, REPO, make_ws

# Waits for a forked child: ``wait_child(pid)`` -> "exit N" / "signal N" / "hung".
_PRELUDE = """
import os, sys, time, signal, threading, pathlib
sys.path.insert(0, {repo!r})

def wait_child(pid):
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "exit %d" % os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"
"""


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    with System(make_ws(tmp_path)) as s:
        yield s


def _nested(system: System, body: str) -> list[str]:
    code = _PRELUDE.format(repo=REPO) + textwrap.dedent(body)
    result = system.run([PYTHON, "-c", code], timeout=120)
    assert result.exit_code == 0, result.stderr_text
    return result.stdout_text.split("\n")[:-1]


def test_forked_child_exit_leaves_the_parents_children_and_cgroups_alone(
    system: System,
) -> None:
    # The child inherits the parent's System: its pidfds, process groups, pooled
    # cgroups and the list of background children whose drain threads do not exist
    # in the child. Its use is refused (FORKED) and its interpreter exit (atexit:
    # System close, cgroup pool finalizer) neither kills the parent's child, nor hangs
    # joining threads it does not have, nor removes or freezes the parent's cgroups.
    lines = _nested(
        system,
        """
        from flux_system import ProcessError, System, Workspace
        s = System(Workspace(pathlib.Path('.')))
        s.run(['true'])  # a pooled cgroup exists now
        mc = s.spawn(['sleep', '60'])
        pid = os.fork()
        if pid == 0:
            try:
                s.run(['true'])
                print('run ok', flush=True)
            except ProcessError as exc:
                print('run', exc.reason.name, flush=True)
            try:
                s.spawn(['true'])
                print('spawn ok', flush=True)
            except ProcessError as exc:
                print('spawn', exc.reason.name, flush=True)
            s.close()
            sys.exit(0)  # a normal exit: the interpreter's exit hooks run
        print(wait_child(pid), flush=True)
        print('running', mc.status().running, flush=True)
        print('parent run', s.run(['true']).exit_code, flush=True)
        s.close()
        print('reaped', mc.join(30), flush=True)
        """,
    )
    assert lines == [
        "run FORKED",
        "spawn FORKED",
        "exit 0",
        "running True",
        "parent run 0",
        "reaped True",
    ]


def test_locks_held_by_another_thread_at_fork_do_not_deadlock_a_new_system(
    system: System,
) -> None:
    # Another thread is inside the process-wide cgroup/tree bookkeeping when the fork
    # happens (held here deterministically): the child's own new System must work, its
    # trees contained in its own cgroups, and the child a subreaper again.
    require(cgroup_available(), "a writable cgroup v1 pids hierarchy")
    lines = _nested(
        system,
        """
        import ctypes, ctypes.util
        from flux_system import System, Workspace
        from flux_system.process import _cgroup, _reap
        System(Workspace(pathlib.Path('.'))).run(['true'])  # the parent's base exists
        held, release = threading.Event(), threading.Event()
        def hold():
            with _cgroup._lock, _reap._lock:
                held.set()
                release.wait()
        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            out = []
            def use():
                s = System(Workspace(pathlib.Path('.')))
                r = s.run(['true'])
                out.append((r.exit_code, r.tree_contained))
                s.close()
            u = threading.Thread(target=use, daemon=True)
            u.start()
            u.join(20)
            libc = ctypes.CDLL(ctypes.util.find_library('c'))
            flag = ctypes.c_int(0)
            libc.prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
            print(out, flag.value, flush=True)
            os._exit(0)
        print(wait_child(pid), flush=True)
        release.set()
        t.join()
        """,
    )
    assert lines == ["[(0, True)] 1", "exit 0"]


def test_workspace_close_in_a_child_forked_during_a_close_does_not_deadlock(
    system: System,
) -> None:
    # Another thread is inside Workspace.close() (its lock held, here deterministically)
    # when the fork happens: the child's close() and __del__ must not wait forever on a
    # lock no thread of the child will release, and the child's copy ends closed.
    lines = _nested(
        system,
        """
        from flux_system import Workspace, WorkspaceError
        ws = Workspace(pathlib.Path('.'))
        ws.write_bytes('f', b'x')
        held, release = threading.Event(), threading.Event()
        def hold():
            with ws._close_lock:
                held.set()
                release.wait()
        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            done = []
            def use():
                ws.close()
                try:
                    ws.read_bytes('f')
                except WorkspaceError as exc:
                    done.append(exc.reason.name)
            u = threading.Thread(target=use, daemon=True)
            u.start()
            u.join(20)
            print(done, flush=True)
            os._exit(0)
        print(wait_child(pid), flush=True)
        release.set()
        t.join()
        print(ws.read_bytes('f'), flush=True)  # the parent's copy is still open
        """,
    )
    assert lines == ["['CLOSED']", "exit 0", "b'x'"]
