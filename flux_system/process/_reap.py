"""Process trees: who belongs to a child's tree, and killing + reaping all of it.

Mechanism (docs/decisions/0020, 0021, 0024, 0025, 0028): every child leads its own
process group and, when a usable cgroup hierarchy exists, gets its own tree cgroup (a
:class:`~flux_system.process._lease.Lease`). On cgroup v1 (``pids``) a thread of ours
lives in it and forks the tree's children (v1 places single threads; the thread entered
once, when the cgroup was made), so the child is born inside it with no code between
fork and exec and no thread moves per spawn; on v2, which moves whole processes only,
the child writes itself into ``cgroup.procs`` before exec (a ``preexec_fn``, paid only
on v2). A descendant can leave a process group (``setsid``) but not a cgroup; the
cgroup is the tree's identity and its ``pids.max`` (v1, or v2 when delegated) enforces
a process limit even for root. The parent is a child subreaper, so orphans of the tree
are re-parented to it and reaped here, not left as zombies.

Guarantee (with the cgroup): after :meth:`Tree.kill` returns ``True``, no process of
the tree is alive, including daemonised ``setsid`` double-forked grandchildren,
processes whose main thread exited and processes in cgroups nested below the tree's.
The leader is reaped only by :meth:`Tree.reap`, under the same lock as
:meth:`Tree.kill` and after marking the tree closed, so a kill never signals a process
group or pid that was reused. Without a usable cgroup only the process group and live
descendants are killed, and :attr:`Tree.contained` is ``False`` so callers can report
it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import typing
from collections.abc import Callable

from flux_system.process._cgroup import CgroupPool, Lease, pids_hierarchy_available
from flux_system.process._members import (
    child_holding,
    group_and_session,
    kill_v1,
    kill_v2,
    our_children,
    reap_unseen_zombies_v1,
    reap_zombies_v2,
    wait_readable,
)
from flux_system.process._resident import Resident

__all__ = ["Tree", "cgroup_available", "ensure_subreaper"]

_PR_SET_CHILD_SUBREAPER = 36
# Bound on the recursive /proc descendant walk of the fallback path.
_MAX_DESCENDANTS = 65536

_lock = threading.Lock()
_subreaper_set = False
# Leaders of live trees (direct children, reaped only by their owner's Tree.reap).
_leaders: set[int] = set()


def _after_fork_in_child() -> None:
    """Reset what a forked child does not inherit: a lock held by another thread at the
    fork, the subreaper flag (``PR_SET_CHILD_SUBREAPER`` is not inherited by ``fork``),
    and the parent's tree leaders (not the child's children)."""
    global _lock, _subreaper_set, _leaders  # noqa: PLW0603 - reset once per fork
    _lock = threading.Lock()
    _subreaper_set = False
    _leaders = set()


os.register_at_fork(after_in_child=_after_fork_in_child)


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
        # The process's own symbols (libc among them): no find_library, which runs
        # `ldconfig -p` as a child process.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _subreaper_set = True


def _live_leaders() -> set[int]:
    with _lock:
        return set(_leaders)


def cgroup_available() -> bool:
    """Whether trees get their own pids cgroup on this host."""
    return pids_hierarchy_available()


@typing.final
class Tree:
    """The processes of one child's tree (internal; created by the spawn builder).

    Life: ``Tree(pool)`` → fork between :meth:`enter` and :meth:`leave` → :meth:`started` →
    :meth:`kill` (any thread, any number of times) → :meth:`reap` (once, by the
    owner) → :meth:`release`.
    """

    __slots__ = (
        "_closed",
        "_known_empty",
        "_lease",
        "_lock",
        "_nproc",
        "_pool",
        "contained",
        "leader_fd",
        "limits_processes",
        "pgid",
    )

    def __init__(self, pool: CgroupPool, *, nproc: int | None) -> None:
        self.pgid = 0
        self.leader_fd = -1
        self._lock = threading.Lock()
        self._closed = False
        self._known_empty = False
        self._nproc = nproc
        self._pool = pool
        lease: Lease | None = pool.acquire()
        if lease is not None and nproc is not None and lease.has_pids:
            try:
                # v1: +1, the spawning thread is a member while it forks.
                lease.set_max(nproc + 1 if lease.version == 1 else nproc)
            except OSError:
                pool.release(lease, known_empty=False)
                lease = None
        self._lease = lease
        self.contained = lease is not None
        # Whether pids.max holds the tree's process count (a root child's nproc).
        self.limits_processes = lease is not None and lease.has_pids

    @property
    def resident(self) -> Resident | None:
        """v1: the thread living in the tree's cgroup that forks there, if any."""
        lease = self._lease
        return lease.resident if lease is not None else None

    def before_resident_fork(self) -> None:
        """The fork comes from the resident (already charged): the tree's own limit now.

        No thread moves in for it, so the +1 of a moving thread is not needed.
        """
        lease = self._lease
        if lease is not None and self._nproc is not None and lease.has_pids:
            lease.set_max(self._nproc)

    def enter(self, tid: bytes) -> None:
        """Move this thread (native id *tid*, ASCII) into the tree's cgroup for the fork.

        Not a context manager (hot path): callers pair it with :meth:`leave` in
        ``try``/``finally``, passing the same *tid* (the calling thread's own).
        """
        lease = self._lease
        if lease is not None and lease.version == 1:
            lease.enter(tid)

    def leave(self, tid: bytes) -> None:
        """Move this thread back to our own cgroup (after the fork, success or not)."""
        lease = self._lease
        if lease is None or lease.version != 1:
            return
        # The limit first: once this thread has left, the child could fork up to the
        # nproc + 1 the fork needed. (A v1 move is never refused by pids.max.)
        if self._nproc is not None:
            with contextlib.suppress(OSError):
                lease.set_max(self._nproc)
        os.write(self._pool.home(), tid)

    def child_preexec(self, inner: Callable[[], None] | None) -> Callable[[], None] | None:
        """The ``preexec_fn`` for the child: *inner*, preceded on v2 by the cgroup entry.

        v2 moves whole processes only, so the child writes ``0`` (itself) into the
        tree's ``cgroup.procs`` through an fd opened here, before exec and before
        *inner* applies limits; a failed write fails the spawn (never an uncontained
        child). v1 and no cgroup: *inner* unchanged (the vfork fast path stays).
        """
        lease = self._lease
        if lease is None or lease.version != 2:
            return inner
        entry = lease.entry_fd
        write = os.write

        def _enter_tree_cgroup() -> None:
            write(entry, b"0")
            if inner is not None:
                inner()

        return _enter_tree_cgroup

    def cgroup_gone(self) -> bool:
        """Whether the tree's cgroup was removed under us (a failed entry's cause)."""
        lease = self._lease
        return lease is not None and not os.path.isdir(lease.path)

    def started(self, pid: int, pidfd: int) -> None:
        """Record the leader: its pid is the tree's pgid; *pidfd* pins its identity."""
        self.pgid = pid
        self.leader_fd = pidfd
        with _lock:
            _leaders.add(pid)

    @staticmethod
    def holder_of(inode: int) -> int | None:
        """Our child holding the pipe *inode* (a spawn's pid lost to a signal)."""
        return child_holding(inode, _live_leaders())

    def our_members(self) -> list[int]:
        """Our direct children in the tree's cgroup (a leader whose pid was lost)."""
        lease = self._lease
        if lease is None:
            return []
        try:
            members = set(lease.members())
        except OSError:
            return []
        return [pid for pid in our_children() if pid in members]

    def kill(self, *, leader_exited: bool = False) -> bool:
        """SIGKILL every process of the tree and reap the re-parented ones.

        Safe from any thread at any time: the leader is reaped only by :meth:`reap`,
        under the same lock, after the tree is marked closed — so while this runs the
        leader's pid and pgid still belong to the tree (an unreaped zombie pins both),
        and after :meth:`reap` it does nothing. Returns whether the tree is known empty.
        """
        with self._lock:
            if self._closed:
                return True
            return self._kill_locked(leader_exited)

    def _kill_locked(self, leader_exited: bool) -> bool:
        lease = self._lease
        if lease is not None and leader_exited:
            try:  # not contextlib.suppress: every run's hot path
                if lease.has_pids:
                    if lease.current() <= 1:  # only the exited, unreaped leader: none alive
                        self._known_empty = True
                        return True
                elif not lease.populated():  # v2 without pids: zombies do not populate
                    reap_zombies_v2(lease, _live_leaders())
                    return True
            except (OSError, ValueError):  # unreadable: the full kill below decides
                pass
        if self.leader_fd >= 0 and not leader_exited:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.leader_fd, signal.SIGKILL)
        if self.pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)
        groups = {self.pgid} if self.pgid else set()
        sessions: set[int] = set()
        if lease is None:
            self._kill_descendants(self.pgid)
            self._reap_adopted(self.pgid, groups, sessions)
            return False
        if lease.version == 2:
            empty = kill_v2(lease, groups, sessions)
            self._reap_adopted(self.pgid, groups, sessions)
            reap_zombies_v2(lease, _live_leaders())
            return empty
        empty = kill_v1(lease, groups, sessions)
        self._reap_adopted(self.pgid, groups, sessions)
        if empty:
            reap_unseen_zombies_v1(lease, _live_leaders())
        return empty

    @staticmethod
    def _reap_adopted(leader: int, groups: set[int], sessions: set[int]) -> None:
        """Kill and reap our (subreaper-adopted) children that belong to the tree.

        A child of ours whose process group or session was one of the tree's is a tree
        member: a pgid/sid is never reused while a process still carries it. This
        catches members that exited on their own (zombies no longer in the cgroup).
        """
        leaders = _live_leaders()
        for pid in our_children():
            if pid == leader or pid in leaders:  # another tree's leader: its owner reaps
                continue
            ids = group_and_session(pid)
            if ids is None or (ids[1] not in groups and ids[2] not in sessions):
                continue
            Tree._kill_and_reap(pid)

    @staticmethod
    def _kill_and_reap(pid: int) -> None:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
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

    def reap(self, wait: Callable[[], int], *, exited: bool = False) -> int:
        """Reap the leader with *wait* once it has exited; later kills do nothing.

        The exit is awaited on the pidfd (which does not reap) unless the caller saw it
        (*exited*), then the tree is marked closed and *wait* runs under the kill lock:
        no :meth:`kill` can be between its check and its signals when the leader's pid
        and pgid are released.
        """
        if self.leader_fd >= 0 and not exited:
            wait_readable([self.leader_fd], None)
        with self._lock:
            self._closed = True
            try:
                return wait()
            finally:
                with _lock:
                    _leaders.discard(self.pgid)

    def release(self) -> None:
        """Give the cgroup back to the pool (reused if empty, else removed); after reap."""
        self._closed = True
        lease, self._lease = self._lease, None
        if lease is not None:
            self._pool.release(lease, known_empty=self._known_empty)
