"""Process trees: who belongs to a child's tree, and killing + reaping all of it.

Mechanism (docs/decisions/0020, 0021): every child leads its own process group; when
a writable cgroup v1 ``pids`` hierarchy exists, each tree also gets its own pids
cgroup (a :class:`~flux_system.process._cgroup.Lease`), entered by the spawning *thread* just
around the fork (v1 moves single threads), so the child is born inside it with no code
between fork and exec. A descendant can leave a process group (``setsid``) but not a
cgroup; the cgroup is the tree's identity and its ``pids.max`` enforces a process limit
even for root. The parent is a child subreaper, so orphans of the tree are re-parented
to it and reaped here, not left as zombies.

Guarantee (with the cgroup): after :meth:`Tree.kill` returns, no process of the tree
is alive, including daemonised ``setsid`` double-forked grandchildren and processes in
cgroups nested below the tree's. The leader is reaped only by :meth:`Tree.reap`, under
the same lock as :meth:`Tree.kill` and after marking the tree closed, so a kill never
signals a process group or pid that was reused. Without a writable cgroup only the
process group and live descendants are killed, and :attr:`Tree.contained` is
``False`` so callers can report it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import signal
import threading
import time
import typing
from collections.abc import Callable

from flux_system.process._cgroup import CgroupPool, Lease, pids_hierarchy_available

__all__ = ["Tree", "cgroup_available", "ensure_subreaper"]

_PR_SET_CHILD_SUBREAPER = 36
_PIDS_PREFIX = "/sys/fs/cgroup/pids"
# Kill rounds over cgroup.procs before giving up: each round SIGKILLs every member, so
# only a member that forked between the read and the kill survives a round.
_MAX_KILL_ROUNDS = 1000
# How long one kill round waits for SIGKILLed members to exit (D-state can delay it).
_EXIT_WAIT_S = 2.0
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
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _subreaper_set = True


def cgroup_available() -> bool:
    """Whether trees get their own pids cgroup on this host."""
    return pids_hierarchy_available()


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


def _in_cgroup(pid: int, rel: str) -> bool:
    """Whether live *pid* is in the pids cgroup *rel* or below it (``/proc/PID/cgroup``).

    An exiting task shows ``/`` on v1 hierarchies: it is not (or no longer) a member.
    """
    try:
        with open(f"/proc/{pid}/cgroup", encoding="ascii") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3 and "pids" in parts[1].split(","):
                    return parts[2] == rel or parts[2].startswith(rel + "/")
    except OSError:
        pass
    return False


def _wait_readable(fds: list[int], budget_s: float | None) -> None:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    pending = len(fds)
    end = None if budget_s is None else time.monotonic() + budget_s
    while pending:
        if end is None:
            wait_ms = None
        else:
            left = end - time.monotonic()
            if left <= 0:
                return
            wait_ms = int(left * 1000) + 1
        for fd, _ in poller.poll(wait_ms):
            poller.unregister(fd)
            pending -= 1


def _exited(pidfd: int) -> bool:
    """Whether the process of *pidfd* has exited (every thread; maybe not yet reaped)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _our_children() -> list[int]:
    """Our children (direct and subreaper-adopted), bounded."""
    me = os.getpid()
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{me}/task"):
            path = f"/proc/{me}/task/{tid}/children"
            with contextlib.suppress(OSError), open(path, encoding="ascii") as fh:
                kids.extend(int(x) for x in fh.read().split())
    return kids[:_MAX_DESCENDANTS]


def _zombie_children() -> frozenset[int]:
    """Our zombie children that are not the leader of a tree (those have owners)."""
    with _lock:
        leaders = set(_leaders)
    out = set()
    for pid in _our_children():
        ids = _group_and_session(pid)
        if pid not in leaders and ids is not None and ids[0] == "Z":
            out.add(pid)
    return frozenset(out)


def _reap_unseen_zombies(lease: Lease) -> None:
    """Reap the zombies the tree left that no kill round ever saw alive.

    A member that exited before any kill (a ``setsid`` fork-and-exit chain leaves one
    per hop) is re-parented to us as a zombie with a pgid and session we never saw, and
    shows ``/`` as its v1 cgroup. It is still charged to the tree's cgroup until reaped,
    and with every member dead it is our child. So when our non-leader zombie children
    are exactly as many as the zombies charged to the tree (``pids.current`` less the
    unreaped leader), read twice around the count to catch a change, they are the
    tree's: reap them. Otherwise (another zombie child of ours is pending, e.g. a
    concurrent tree's or the application's own) nothing is reaped: never a child that
    may be someone else's.
    """
    try:
        if lease.current() <= 1:
            return
        before = _zombie_children()
        charged = lease.current() - 1
        after = _zombie_children()
    except (OSError, ValueError):
        return
    if not after or before != after or len(after) != charged:
        return
    for pid in after:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:  # the pidfd pins it: still our zombie, or reaped by someone else meanwhile
            ids = _group_and_session(pid)
            if ids is not None and ids[0] == "Z":
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
        finally:
            os.close(pidfd)


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
        if lease is not None and nproc is not None:
            try:
                lease.set_max(nproc + 1)  # +1: the spawning thread is a member while it forks
            except OSError:
                pool.release(lease, known_empty=False)
                lease = None
        self._lease = lease
        self.contained = lease is not None

    def enter(self, tid: bytes) -> None:
        """Move this thread (native id *tid*, ASCII) into the tree's cgroup for the fork.

        Not a context manager (hot path): callers pair it with :meth:`leave` in
        ``try``/``finally``, passing the same *tid* (the calling thread's own).
        """
        lease = self._lease
        if lease is not None:
            lease.enter(tid)

    def leave(self, tid: bytes) -> None:
        """Move this thread back to our own cgroup (after the fork, success or not)."""
        lease = self._lease
        if lease is None:
            return
        # The limit first: once this thread has left, the child could fork up to the
        # nproc + 1 the fork needed. (A v1 move is never refused by pids.max.)
        if self._nproc is not None:
            with contextlib.suppress(OSError):
                lease.set_max(self._nproc)
        os.write(self._pool.home(), tid)

    def started(self, pid: int, pidfd: int) -> None:
        """Record the leader: its pid is the tree's pgid; *pidfd* pins its identity."""
        self.pgid = pid
        self.leader_fd = pidfd
        with _lock:
            _leaders.add(pid)

    def our_members(self) -> list[int]:
        """Our direct children in the tree's cgroup (a leader whose pid was lost)."""
        lease = self._lease
        if lease is None:
            return []
        try:
            members = set(lease.members())
        except OSError:
            return []
        return [pid for pid in _our_children() if pid in members]

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
            with contextlib.suppress(OSError, ValueError):
                if lease.current() <= 1:  # only the exited, unreaped leader: none alive
                    self._known_empty = True
                    return True
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
        empty = self._kill_members(lease, groups, sessions)
        self._reap_adopted(self.pgid, groups, sessions)
        if empty:
            _reap_unseen_zombies(lease)
        return empty

    def _kill_members(self, lease: Lease, groups: set[int], sessions: set[int]) -> bool:
        rel = lease.path.removeprefix(_PIDS_PREFIX)
        me = os.getpid()
        mine = (os.getpgid(0), os.getsid(0))
        for _ in range(_MAX_KILL_ROUNDS):
            try:
                members = [pid for pid in lease.members() if pid != me]
            except OSError:
                return False
            if not members:
                return True
            # Freeze forks first (pids.max = 0; reset when the lease is released): a
            # fork-and-exit chain then cannot outrun the rounds or add zombies.
            with contextlib.suppress(OSError):
                if not lease.frozen:
                    lease.set_max(0)
            pidfds: list[int] = []
            alive = 0
            try:
                for pid in members:
                    try:
                        pidfd = os.pidfd_open(pid)
                    except OSError:
                        continue
                    pidfds.append(pidfd)
                    # The pidfd pins the process: if it is still alive, /proc/PID is it,
                    # so a pid reused by a non-member between the read and the open is
                    # never signalled. (Dead: the signal below is a no-op.)
                    if pid != self.pgid and not _in_cgroup(pid, rel):
                        continue
                    ids = _group_and_session(pid)
                    # Our own group/session is not the tree's identity: every child
                    # starts in our session, so matching it would take other trees.
                    if ids is not None and ids[1] != mine[0]:
                        groups.add(ids[1])
                    if ids is not None and ids[2] != mine[1]:
                        sessions.add(ids[2])
                    # The dead leader stays listed until it is reaped: not a member. (Its
                    # state "Z" would not do: a process whose main thread exited shows
                    # "Z" while its other threads run; the pidfd polls readable only
                    # once the whole thread group has exited.)
                    if _exited(pidfd):
                        continue
                    alive += 1
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                if not alive:
                    return True
                # Wait until they have exited: only then are their children re-parented.
                _wait_readable(pidfds, _EXIT_WAIT_S)
            finally:
                for pidfd in pidfds:
                    os.close(pidfd)
        return False

    @staticmethod
    def _reap_adopted(leader: int, groups: set[int], sessions: set[int]) -> None:
        """Kill and reap our (subreaper-adopted) children that belong to the tree.

        A child of ours whose process group or session was one of the tree's is a tree
        member: a pgid/sid is never reused while a process still carries it. This
        catches members that exited on their own (zombies no longer in the cgroup).
        """
        with _lock:
            leaders = set(_leaders)
        for pid in _our_children():
            if pid == leader or pid in leaders:  # another tree's leader: its owner reaps
                continue
            ids = _group_and_session(pid)
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
            _wait_readable([self.leader_fd], None)
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
