"""Process trees: who belongs to a child's tree, and killing + reaping all of it.

Mechanism (docs/decisions/0020-tree-kill.md): every child leads its own process group;
when a writable cgroup v1 ``pids`` hierarchy exists, each tree also gets its own pids
cgroup, entered by the spawning *thread* just around the fork (v1 moves single
threads), so the child is born inside it with no code between fork and exec. A
descendant can leave a process group (``setsid``) but not a cgroup; the cgroup is the
tree's identity and its ``pids.max`` enforces a process limit even for root. The
parent is a child subreaper, so orphans of the tree are re-parented to it and reaped
here, not left as zombies.

Guarantee (with the cgroup): after :meth:`Tree.kill` returns, no process of the tree
is alive, including daemonised ``setsid`` double-forked grandchildren. Without a
writable cgroup only the process group and live descendants are killed, and
:attr:`Tree.contained` is ``False`` so callers can report it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import errno
import itertools
import os
import select
import signal
import threading
import time
import typing
from collections.abc import Iterator

__all__ = ["Tree", "cgroup_available", "ensure_subreaper"]

_PR_SET_CHILD_SUBREAPER = 36
_PIDS_ROOT = "/sys/fs/cgroup/pids"
# Kill rounds over cgroup.procs before giving up: each round SIGKILLs every member, so
# only a member that forked between the read and the kill survives a round.
_MAX_KILL_ROUNDS = 1000
# How long one kill round waits for SIGKILLed members to exit (D-state can delay it).
_EXIT_WAIT_S = 2.0
# Bound on the recursive /proc descendant walk of the fallback path.
_MAX_DESCENDANTS = 65536
# Stale per-process cgroups looked at when this process creates its own.
_MAX_STALE = 4096

_lock = threading.Lock()
_subreaper_set = False
_counter = itertools.count()
_cgroup_state: dict[str, object] = {}


def ensure_subreaper() -> None:
    """Make this process a child subreaper (idempotent, process-wide).

    Side effect, documented: orphans of *any* child of this process are re-parented
    here instead of to init.
    """
    global _subreaper_set  # noqa: PLW0603
    if _subreaper_set:
        return
    with _lock:
        if _subreaper_set:
            return
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _subreaper_set = True


def _cgroup_base() -> str | None:
    """The per-process parent cgroup under the pids hierarchy, created once; or None."""
    if "base" in _cgroup_state:
        return typing.cast("str | None", _cgroup_state["base"])
    with _lock:
        if "base" in _cgroup_state:
            return typing.cast("str | None", _cgroup_state["base"])
        base: str | None = None
        try:
            with open("/proc/self/cgroup", encoding="ascii") as fh:
                mine = next(
                    (ln.split(":", 2)[2].strip() for ln in fh if ln.split(":")[1] == "pids"),
                    None,
                )
            if mine is not None:
                here = os.path.join(_PIDS_ROOT, mine.lstrip("/"))
                _remove_stale(here)
                candidate = os.path.join(here, f"flux-{os.getpid()}")
                with contextlib.suppress(FileExistsError):
                    os.mkdir(candidate, 0o700)
                tasks = os.open(os.path.join(here, "tasks"), os.O_WRONLY | os.O_CLOEXEC)
                _cgroup_state["home_tasks"] = tasks
                atexit.register(_remove_base, candidate)
                base = candidate
        except (OSError, IndexError, StopIteration):
            base = None
        _cgroup_state["base"] = base
        return base


def _remove_base(base: str) -> None:
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            if name.startswith("t"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(base, name))
        os.rmdir(base)


def _remove_stale(here: str) -> None:
    """Remove the (empty) cgroups left by flux processes that no longer exist."""
    with contextlib.suppress(OSError):
        for name in os.listdir(here)[:_MAX_STALE]:
            pid = name.removeprefix("flux-")
            if name.startswith("flux-") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                _remove_base(os.path.join(here, name))


def cgroup_available() -> bool:
    """Whether trees get their own pids cgroup on this host."""
    return _cgroup_base() is not None


def _group_and_session(pid: int) -> tuple[str, int, int] | None:
    """``(state, pgid, sid)`` of *pid* from ``/proc/PID/stat``, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode("ascii"), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _wait_readable(fds: list[int], budget_s: float) -> None:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    pending = len(fds)
    end = time.monotonic() + budget_s
    while pending:
        left = end - time.monotonic()
        if left <= 0:
            return
        for fd, _ in poller.poll(int(left * 1000) + 1):
            poller.unregister(fd)
            pending -= 1


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


@typing.final
class Tree:
    """The processes of one child's tree (internal; created by the spawn builder)."""

    __slots__ = ("_closed", "_dir", "_nproc", "contained", "pgid")

    def __init__(self, *, nproc: int | None, want_cgroup: bool) -> None:
        self.pgid = 0
        self._closed = False
        self._nproc = nproc
        self._dir: str | None = None
        base = _cgroup_base() if want_cgroup else None
        if base is not None:
            path = os.path.join(base, f"t{next(_counter)}")
            try:
                os.mkdir(path, 0o700)
                if nproc is not None:
                    # +1: the spawning thread is a member while it forks.
                    _write(os.path.join(path, "pids.max"), str(nproc + 1))
                self._dir = path
            except OSError:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
        self.contained = self._dir is not None

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the fork inside the tree's cgroup: move this thread in, then back out."""
        if self._dir is None:
            yield
            return
        tid = str(threading.get_native_id()).encode("ascii")
        home = typing.cast(int, _cgroup_state["home_tasks"])
        _write(os.path.join(self._dir, "tasks"), tid.decode("ascii"))
        try:
            yield
        finally:
            os.write(home, tid)
            if self._nproc is not None:
                with contextlib.suppress(OSError):
                    _write(os.path.join(self._dir, "pids.max"), str(self._nproc))

    @staticmethod
    def _members(path: str) -> list[int]:
        try:
            with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as fh:
                return [int(x) for x in fh.read().split()]
        except FileNotFoundError:
            return []

    def kill(self, leader: int) -> bool:
        """SIGKILL every process of the tree and reap the re-parented ones.

        The leader itself is not reaped here (its owner reaps it). Returns whether the
        tree is known to be empty. After :meth:`close` (leader reaped) it does nothing:
        the pgid and pid may have been reused.
        """
        if self._closed:
            return True
        if self.pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)
        groups = {self.pgid} if self.pgid else set()
        sessions: set[int] = set()
        path = self._dir  # read once: another thread may close() the tree meanwhile
        if path is None:
            self._kill_descendants(leader)
            self._reap_adopted(leader, groups, sessions)
            return False
        empty = False
        for _ in range(_MAX_KILL_ROUNDS):
            members = self._members(path)
            if not members:
                empty = True
                break
            pidfds: list[int] = []
            try:
                for pid in members:
                    ids = _group_and_session(pid)
                    if ids is not None:
                        groups.add(ids[1])
                        sessions.add(ids[2])
                    with contextlib.suppress(OSError):
                        pidfd = os.pidfd_open(pid)
                        pidfds.append(pidfd)
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                # Wait until they have exited: only then are their children re-parented.
                _wait_readable(pidfds, _EXIT_WAIT_S)
            finally:
                for pidfd in pidfds:
                    os.close(pidfd)
        self._reap_adopted(leader, groups, sessions)
        return empty

    @staticmethod
    def _reap_adopted(leader: int, groups: set[int], sessions: set[int]) -> None:
        """Kill and reap our (subreaper-adopted) children that belong to the tree.

        A child of ours whose process group or session was one of the tree's is a tree
        member: a pgid/sid is never reused while a process still carries it. This
        catches members that exited on their own (zombies no longer in the cgroup).
        """
        me = os.getpid()
        kids: list[int] = []
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{me}/task"):
                path = f"/proc/{me}/task/{tid}/children"
                with contextlib.suppress(OSError), open(path, encoding="ascii") as fh:
                    kids.extend(int(x) for x in fh.read().split())
        for pid in kids[:_MAX_DESCENDANTS]:
            if pid == leader:
                continue
            ids = _group_and_session(pid)
            if ids is None or (ids[1] not in groups and ids[2] not in sessions):
                continue
            Tree._kill_and_reap(pid, leader)  # SIGKILL (if alive) + reap

    @staticmethod
    def _kill_and_reap(pid: int, leader: int) -> None:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            if pid != leader:
                # Reaps it when it was re-parented to us (subreaper); else not ours.
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
        finally:
            os.close(pidfd)

    @staticmethod
    def _kill_descendants(leader: int) -> None:
        seen = 0
        stack = [leader]
        while stack and seen < _MAX_DESCENDANTS:
            pid = stack.pop()
            seen += 1
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                        stack.extend(int(x) for x in fh.read().split())
            except OSError:
                pass
            if pid != leader:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Remove the tree's cgroup (it is empty after :meth:`kill`); call after reaping."""
        self._closed = True
        self.pgid = 0
        if self._dir is None:
            return
        try:
            os.rmdir(self._dir)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                return
        self._dir = None
