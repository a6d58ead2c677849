"""Group commit for ``fsync="batch"``: appenders share one write and one fsync.

Leader/follower, about one thread hand-off per append. Under the log's append lock an
appender adds its line to the *open group* (a list of pending lines). If no flush is
under way it becomes the leader at once; otherwise it is a follower and blocks on the
group's latch. The leader, outside the lock, closes the open group (takes its lines
and opens the next one), writes them with one ``write``, ``fdatasync``s, marks the
group done and releases its latch; followers wake one another down a chain (each
releases the latch it acquired), with no shared lock to re-take. While the leader is
blocked in ``write``/``fdatasync`` (the GIL released) the other threads fill the next
group. If that group has appenders when the flush ends, the leader hands it over: the
first of its appenders to get its latch leads it (one hand-off per group, not per
append). Measured alternatives are in docs/decisions/0061.
"""

from __future__ import annotations

import contextlib
import threading
import typing
from collections.abc import Callable

from ._exceptions import EvidenceError, EvidenceReason

__all__ = ["GroupCommit"]

# A follower re-checks its group at least this often (seconds), should the wake-up
# chain ever be cut (an interrupt landing between a latch acquire and its release).
_RECHECK_S = 0.5


@typing.final
class _Group:
    """One generation: the appenders whose lines one ``write`` + ``fdatasync`` covers.

    ``latch`` is held (acquired at creation) until the group is done or handed over;
    whoever is responsible for the group releases it exactly once, and every waiter
    that acquires it releases it again for the next one.
    """

    __slots__ = ("done", "handoff", "latch", "ok")

    def __init__(self) -> None:
        self.latch = threading.Lock()
        self.latch.acquire()
        self.done = False  # flushed, or abandoned after a failure
        self.ok = False  # written and fsynced
        self.handoff = False  # the group needs a leader: the latch holder leads it


@typing.final
class GroupCommit:
    """The group-commit state of one log, guarded by the log's append lock.

    One leader at a time: groups are written in chain order, and after a failed write
    or fsync nothing more is flushed or acknowledged (the log is failed).

    Args:
        lock: the log's append lock (held by callers of :meth:`add` and :meth:`join`).
        write: writes the bytes it is given, completely; raises on failure.
        sync: fdatasyncs the file; raises on failure.
        fail: marks the log failed (called under the lock when a flush failed or was
            interrupted: what storage holds is then unknown).
        mark: called under the lock when a group is closed; what it returns (the log's
            head after the group's last record) becomes :attr:`durable` once the group
            is written and fsynced — before any of its appenders is woken.
        durable: the mark of everything already durable when group commit starts.
    """

    def __init__(
        self,
        lock: threading.Lock,
        write: Callable[[bytes], None],
        sync: Callable[[], None],
        fail: Callable[[], None],
        *,
        mark: Callable[[], object] = lambda: None,
        durable: object = None,
    ) -> None:
        self._lock = lock
        self._write = write
        self._sync = sync
        self._fail = fail
        self._mark = mark
        self.durable = durable  # mark of the last group known durable (under the lock)
        self._pending: list[bytes] = []  # the open group's lines
        self._group = _Group()  # the open group
        self._syncing = False  # a leader exists (flushing, or handed over)
        self._closing = False  # close() waits in the open group: lead it even if empty
        self.fsyncs = 0  # group flushes issued (observability for tests)

    def add(self, line: bytes) -> None:
        """Queue *line* in the open group (under the lock)."""
        self._pending.append(line)

    def join(self) -> tuple[_Group, bool]:
        """Under the lock, after :meth:`add`: the caller's group, and whether it leads."""
        if self._syncing:
            return self._group, False
        self._syncing = True
        return self._group, True

    def stop(self) -> None:
        """No leader is ever elected again (a forked child's copy of the log)."""
        self._syncing = True

    def wait(self, ticket: tuple[_Group, bool]) -> None:
        """Return once the caller's group is written and fsynced.

        Raises:
            EvidenceError: FAILED if the group's flush failed (a follower); a leader
                gets the flush's own error.
        """
        group, lead = ticket
        if lead:
            self._lead(group)
            return
        while True:
            got = group.latch.acquire(timeout=_RECHECK_S)
            leading = False
            try:
                if group.done:
                    if not group.ok:
                        raise EvidenceError(
                            "fsync failed", op="append", reason=EvidenceReason.FAILED
                        )
                    return
                if got and group.handoff:
                    group.handoff = False
                    leading = True
                    self._lead(group)  # releases the latch when the group is done
                    return
            finally:
                if got and not leading:
                    group.latch.release()  # wake the next waiter of this group

    def _lead(self, group: _Group) -> None:
        """Close *group* (the open group), write its lines with one write, fdatasync;
        publish the outcome; hand the next group, if it has appenders, to one of them."""
        ok = False
        mark: object = None
        try:
            with self._lock:
                mark = self._mark()  # the head once this group is durable
                data = b"".join(self._pending)
                self._pending = []
                self._group = _Group()  # later appenders join the next group
                self._closing = False
                self.fsyncs += 1
            self._write(data)
            self._sync()  # starts after every line of the group was written
            ok = True
        finally:
            with self._lock:
                group.ok = ok
                group.done = True
                nxt = self._group
                wake_next = True
                if ok:
                    self.durable = mark
                if not ok:  # any failure or interrupt: storage state unknown
                    self._fail()
                    self._pending = []  # never written: their appenders get FAILED
                    nxt.done = True
                    self._syncing = False
                elif self._pending or self._closing:
                    nxt.handoff = True  # its first waiter to get the latch leads it
                else:
                    self._syncing = False
                    wake_next = False
            group.latch.release()
            if wake_next:
                nxt.latch.release()

    def finish(self) -> None:
        """For close (appends already refused): wait until every queued line is
        flushed and no leader runs, then take the leader's role for good, so nothing
        touches the file any more. Never raises on a failed flush (the log is failed)."""
        while True:
            with self._lock:
                if not self._syncing:
                    self._syncing = True  # for good
                    return
                self._closing = True
                group = self._group
            with contextlib.suppress(EvidenceError):  # the log is failed: nothing to wait for
                self.wait((group, False))
