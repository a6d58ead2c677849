"""Killing what a tree's cgroup lists, v1 and v2, and reaping what it left behind.

Membership is what the cgroup lists, nothing else (docs/decisions/0024): a process
listed in ``cgroup.procs`` is a member even when ``/proc/PID/cgroup`` says otherwise —
cgroup v1 shows ``/`` there for a leader thread that has exited while its other threads
run, and such a process was once taken for a non-member and survived every kill. A pid
read from the listing is signalled only through a pidfd opened on it, and only if a
listing read *after* the open still shows it (alive and pinned by the pidfd, the number
is that process's: a pid reused by a non-member between the read and the open is never
signalled). A tree is empty only when a fresh listing says so.

- v1 (no atomic kill): forks are stopped with ``pids.max = 0``, then rounds of SIGKILL
  over the listing, each waiting on the pidfds until the members have exited (so their
  children were re-parented and are listed, or are zombies of ours).
- v2: ``cgroup.freeze`` stops every member (a fork race cannot outrun a frozen tree),
  ``cgroup.kill`` (Linux 5.14+) kills the subtree at once, and every member still
  listed is SIGKILLed by pidfd (fatal signals reach frozen tasks; ``cgroup.kill``
  skips a process whose main thread exited); thawed once no longer populated.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

from flux_system.process._lease import Lease

__all__ = [
    "EXIT_WAIT_S",
    "exited",
    "child_holding",
    "group_and_session",
    "kill_v1",
    "kill_v2",
    "our_children",
    "reap_unseen_zombies_v1",
    "reap_zombies_v2",
    "wait_readable",
]

# Kill rounds over cgroup.procs before giving up: each round SIGKILLs every member, so
# only a member that forked between the read and the kill survives a round.
_MAX_KILL_ROUNDS = 1000
# How long one kill round waits for SIGKILLed members to exit (D-state can delay it).
EXIT_WAIT_S = 2.0
# How long a v2 freeze may take to settle before the members are killed anyway.
_FREEZE_WAIT_S = 2.0
# Bound on our children looked at (direct and adopted).
_MAX_CHILDREN = 65536
# Bound on the fds of one child looked at when searching for a lost pid.
_MAX_FDS = 4096
# Tests set this to False to exercise the path of a kernel without cgroup.kill (Linux
# 5.2-5.13: freeze and SIGKILL only).
USE_CGROUP_KILL = True


def group_and_session(pid: int) -> tuple[str, int, int] | None:
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


def wait_readable(fds: list[int], budget_s: float | None) -> None:
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


def exited(pidfd: int) -> bool:
    """Whether the process of *pidfd* has exited (every thread; maybe not yet reaped)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def our_children() -> list[int]:
    """Our children (direct and subreaper-adopted), bounded."""
    me = os.getpid()
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{me}/task"):
            path = f"/proc/{me}/task/{tid}/children"
            with contextlib.suppress(OSError), open(path, encoding="ascii") as fh:
                kids.extend(int(x) for x in fh.read().split())
    return kids[:_MAX_CHILDREN]


def _open_pidfds(pids: list[int]) -> dict[int, int]:
    fds: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fds[pid] = os.pidfd_open(pid)
    return fds


def _note(pid: int, mine: tuple[int, int], groups: set[int], sessions: set[int]) -> None:
    ids = group_and_session(pid)
    # Our own group/session is not the tree's identity: every child starts in our
    # session, so matching it would take other trees.
    if ids is not None and ids[1] != mine[0]:
        groups.add(ids[1])
    if ids is not None and ids[2] != mine[1]:
        sessions.add(ids[2])


def kill_v1(lease: Lease, groups: set[int], sessions: set[int]) -> bool:
    """SIGKILL every process the v1 cgroup lists, in rounds; whether it is now empty.

    Records the process group and session of each member in *groups*/*sessions* (the
    reap of adopted zombies matches them).
    """
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
        pidfds = _open_pidfds(members)
        try:
            try:
                listed = set(lease.members())
            except OSError:
                return False
            for pid, pidfd in pidfds.items():
                if pid not in listed:  # gone, or a reused number: not the member read
                    continue
                _note(pid, mine, groups, sessions)
                # An exited member stays listed only until its exit completes; a
                # process whose main thread exited is listed and alive (its pidfd
                # polls readable only once the whole thread group has exited).
                if not exited(pidfd):
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            # Until they have exited: only then are their children re-parented.
            wait_readable(list(pidfds.values()), EXIT_WAIT_S)
        finally:
            for pidfd in pidfds.values():
                os.close(pidfd)
    return False


def _settle_frozen(lease: Lease) -> None:
    end = time.monotonic() + _FREEZE_WAIT_S
    while not lease.frozen_v2() and time.monotonic() < end:
        time.sleep(0.001)


def kill_v2(lease: Lease, groups: set[int], sessions: set[int]) -> bool:
    """Kill everything in the v2 cgroup and below; whether it is no longer populated.

    Freeze first (no member can fork while the kill runs), then ``cgroup.kill``, then
    SIGKILL by pidfd every member still listed, in rounds: ``cgroup.kill`` skips a
    process whose main thread has exited (seen on Linux 6.18: its live threads ran on),
    so the atomic kill alone is not enough. Thawed at the end, whatever happened.
    """
    mine = (os.getpgid(0), os.getsid(0))
    frozen = False
    try:
        if not lease.populated():
            return True
        for pid in lease.members():
            _note(pid, mine, groups, sessions)
        lease.freeze(True)
        frozen = True
        _settle_frozen(lease)
        if USE_CGROUP_KILL:
            lease.kill_all()
        for _ in range(_MAX_KILL_ROUNDS):
            if not lease.populated():
                return True
            pidfds = _open_pidfds(lease.members())
            try:
                listed = set(lease.members())
                for pid, pidfd in pidfds.items():
                    if pid in listed:  # see kill_v1: a reused number is not signalled
                        _note(pid, mine, groups, sessions)
                        with contextlib.suppress(OSError):
                            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                wait_readable(list(pidfds.values()), EXIT_WAIT_S)
            finally:
                for pidfd in pidfds.values():
                    os.close(pidfd)
        return False
    except OSError:
        return False
    finally:
        if frozen:
            with contextlib.suppress(OSError):
                lease.freeze(False)


def _reap_zombie(pid: int) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:  # the pidfd pins it: still our zombie, or reaped by someone else meanwhile
        ids = group_and_session(pid)
        if ids is not None and ids[0] == "Z":
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
    finally:
        os.close(pidfd)


def _v2_cgroup_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return line[3:].rstrip("\n").removesuffix(" (deleted)")
    except (OSError, UnicodeDecodeError):
        pass
    return None


def reap_zombies_v2(lease: Lease, leaders: set[int]) -> None:
    """Reap our zombie children that died in the tree's v2 cgroup (or below it).

    v2 keeps an exited task's cgroup in ``/proc/PID/cgroup`` until it is reaped, so a
    member that exited on its own before any kill (re-parented to us, its group and
    session never seen) is still recognisable. Leaders of live trees are left to their
    owners.
    """
    inside = lease.proc + "/"
    for pid in our_children():
        if pid in leaders:
            continue
        ids = group_and_session(pid)
        if ids is None or ids[0] != "Z":
            continue
        where = _v2_cgroup_of(pid)
        if where is not None and (where == lease.proc or where.startswith(inside)):
            _reap_zombie(pid)


def _zombie_children(leaders: set[int]) -> frozenset[int]:
    """Our zombie children that are not the leader of a tree (those have owners)."""
    out = set()
    for pid in our_children():
        ids = group_and_session(pid)
        if pid not in leaders and ids is not None and ids[0] == "Z":
            out.add(pid)
    return frozenset(out)


def reap_unseen_zombies_v1(lease: Lease, leaders: set[int]) -> None:
    """v1: reap the zombies the tree left that no kill round ever saw alive.

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
        before = _zombie_children(leaders)
        charged = lease.current() - 1
        after = _zombie_children(leaders)
    except (OSError, ValueError):
        return
    if not after or before != after or len(after) != charged:
        return
    for pid in after:
        _reap_zombie(pid)


def child_holding(inode: int, leaders: set[int]) -> int | None:
    """Our child (not a live tree's leader) that holds the pipe *inode* open, if any.

    For a spawn interrupted right after the fork, before the pid was stored: the pipe
    was made for that spawn alone, so the child holding it is that spawn's child,
    whether or not it has entered its cgroup yet (v2 enters before exec).
    """
    link = f"pipe:[{inode}]"
    for pid in our_children():
        if pid in leaders:
            continue
        with contextlib.suppress(OSError):
            for name in os.listdir(f"/proc/{pid}/fd")[:_MAX_FDS]:
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{name}") == link:
                        return pid
    return None
