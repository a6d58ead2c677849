"""Reap bubblewrap's init, which outlives bwrap's own process (``--info-fd``).

bwrap (no ``--as-pid-1``) runs its own init as pid 1 of the sandbox, the command as its
child. When the command exits, bwrap's monitor exits at once with its status, and the
init — in its own session — ends a moment later: an orphan this process (a child
subreaper) adopts and that no tree of the spawn builder recognises. bwrap tells us the
init's pid on ``--info-fd`` (``{"child-pid": N, ...}``); after the run this reaps it.

Kept rather than ``--as-pid-1`` (decision 0081): with the command as pid 1 its own
signals (``kill $$``, a terminal's SIGINT) are ignored and its orphans are never reaped.

Guarantee: only our own zombie-or-dying child named ``bwrap`` with that pid, started
no earlier than the run's leader, is waited for (never another child of ours); a wait
is bounded (then SIGKILL, then waited).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal

__all__ = ["reap_init"]

_MAX_INFO = 4096  # bwrap writes a one-line JSON object
_EXIT_WAIT_MS = 5000  # the init exits right after the command; a bound all the same


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(comm, state-ppid..., ) of /proc/PID/stat: comm, ppid, start time, state."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    try:
        lp, rp = data.index(b"("), data.rindex(b")")
        comm = data[lp + 1 : rp].decode("ascii", "replace")
        rest = data[rp + 2 :].split()
        return comm, int(rest[1]), int(rest[19]), ord(rest[0][:1])
    except (ValueError, IndexError):
        return None


def reap_init(info_fd: int, leader_start: int | None) -> None:
    """Read bwrap's info from *info_fd* and reap its init if it is our child. Never raises."""
    try:
        os.set_blocking(info_fd, False)
        data = os.read(info_fd, _MAX_INFO)
    except OSError:
        return
    try:
        pid = int(json.loads(data.split(b"\n\n")[0] or b"{}").get("child-pid", 0))
    except (ValueError, AttributeError):
        return
    if pid <= 1:
        return
    st = _stat(pid)
    if st is None:
        return  # already reaped
    comm, ppid, start, _ = st
    if comm != "bwrap" or ppid != os.getpid():
        return  # not ours (still bwrap's? then bwrap reaps it) or not the init
    if leader_start is not None and start < leader_start:
        return
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(_EXIT_WAIT_MS):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
    finally:
        os.close(pidfd)


def start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of *pid*, or ``None``."""
    st = _stat(pid)
    return None if st is None else st[2]
