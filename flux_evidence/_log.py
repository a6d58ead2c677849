"""The file-backed evidence log: one writer, durable appends, torn-tail recovery."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import typing
from typing import Any, Literal, Self

from ._base import Clock, LogBase
from ._exceptions import EvidenceError, EvidenceReason, LogLockedError
from ._fileio import fsync_dir, io_error, open_log_fd, pwrite_all, read_all, write_all
from ._group import GroupCommit
from ._record import Head, Record, check_log_id
from ._scan import scan
from ._writers import close_writer, register, signals_held

__all__ = ["EvidenceLog", "FsyncMode"]

FsyncMode = Literal["always", "batch", "never"]
_MODES = ("always", "batch", "never")


@typing.final
class EvidenceLog(LogBase):
    """An append-only, hash-chained JSONL evidence log in one file.

    Open with :meth:`open`. Durability modes: ``never`` hands each record to the kernel
    with one ``write`` (no user-space buffer: a killed process loses at most the record
    in flight; a power loss may lose more); ``always`` fsyncs every append before it
    returns; ``batch`` is group commit — concurrent appenders share one write and one
    fsync, and each ``append`` returns only once its record is durable.

    Guarantee: one writer per file (``flock``), lines never interleave; the whole file
    is verified on open, so a writer never extends a log that does not verify. A forked
    child's copy of an open writer refuses appends (``FORKED``) and lets go of its
    inherited descriptor, so the parent's ``close`` still releases the lock.
    Not guaranteed: protection against someone who can write the file (that is what
    ``verify(expect_head=...)`` and signed checkpoints catch); records are held in
    memory for queries (as their lines, about the file's size; ``query`` and iteration
    decode the records they return), so the log must fit in memory.
    """

    def __init__(self, *, _fd: int, _fsync: FsyncMode, _clock: Clock | None) -> None:
        super().__init__(clock=_clock)
        self._fd = _fd
        self._fsync = _fsync
        self._always = _fsync == "always"
        self._group_commit = _fsync == "batch"
        self._size = 0  # bytes of complete lines in the file
        # batch mode, once the log is loaded: lines are queued for the group's leader
        self._buffering = False
        self._recovering: list[bytes] | None = None  # open, recovering a torn tail
        self._groups = self._new_groups()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncMode = "always",
        clock: Clock | None = None,
        wait_for_lock: bool = False,
        readonly: bool = False,
        log_id: str | None = None,
    ) -> Self:
        """Open (creating if needed) the log at *path*.

        For writing (default): take the exclusive lock, verify the whole file, cut a
        torn last line (one without its newline) and record that in a ``recovery``
        record (count and sha256 of the dropped bytes); a new or empty file gets its
        ``genesis`` record (id *log_id*, random by default) and the directory is fsynced.
        An existing log must carry *log_id* when one is given.
        For reading (``readonly=True``): no lock, no change to the file; a torn last line
        is ignored.

        Raises:
            LogLockedError: another writer holds the lock (unless *wait_for_lock*).
            InvalidEvidenceError: a complete line fails to parse or chain — tampering,
                never repaired.
            EvidenceError: NOT_FOUND (reading a missing file), NOT_A_FILE, IO,
                BAD_ARGUMENT (an unknown fsync mode, a *log_id* that is not a str of at
                most 1024 valid Unicode characters — checked before the file is
                created — or another log id).
        """
        if fsync not in _MODES:
            raise EvidenceError(
                f"fsync must be one of {_MODES}", op="open", reason=EvidenceReason.BAD_ARGUMENT
            )
        if log_id is not None:
            check_log_id(log_id)
        source = os.fspath(path)  # once: the file opened is the one whose directory is synced
        fd, created = open_log_fd(source, readonly=readonly, op="open")
        try:
            if not readonly:
                _lock(fd, wait=wait_for_lock)
            log = cls(_fd=fd, _fsync=fsync, _clock=clock)
            log._load(source, created=created, readonly=readonly, log_id=log_id)
        except BaseException:
            os.close(fd)
            raise
        if not readonly:
            register(log)
        return log

    def _load(self, path: str, *, created: bool, readonly: bool, log_id: str | None) -> None:
        try:
            buf = read_all(self._fd)
        except OSError as exc:
            raise io_error("open", exc) from exc
        result = scan(buf, index=True)
        if log_id is not None and result.log_id is not None and result.log_id != log_id:
            raise EvidenceError(
                "the log at this path has another log id",
                op="open",
                reason=EvidenceReason.BAD_ARGUMENT,
            )
        self._adopt(result, buf[: result.complete_len])
        self._size = result.complete_len
        self._readonly = readonly
        if readonly:
            return
        changed = False
        with self._lock:
            if result.torn_bytes:
                self._recovering = []  # the new lines go over the torn tail, in one write
            if not len(self._store):
                self._append_genesis(log_id)
                changed = True
            if result.torn_bytes:
                dropped = buf[result.complete_len :]
                self._append_recovery(len(dropped), hashlib.sha256(dropped).hexdigest())
                lines, self._recovering = self._recovering or [], None
                self._write_over_torn_tail(b"".join(lines))
                changed = True
        if changed or self._fsync != "never":
            # Also what an earlier writer left unsynced (fsync="never", a crash): a
            # head given by this writer names only durable records.
            self._fsync_now("open")
        if created or changed:
            try:
                fsync_dir(path)
            except OSError as exc:
                raise io_error("open", exc) from exc
        self._groups.durable = self._head_locked()
        self._buffering = self._group_commit

    def _new_groups(self) -> GroupCommit:
        durable = self._head_locked()
        return GroupCommit(
            self._lock,
            self._write_group,
            self._sync,
            self._set_failed,
            mark=self._head_locked,
            durable=durable,
        )

    def _published_head(self) -> Head:
        """Batch mode: the head after the last group known durable (see ``head``)."""
        if not self._buffering:
            return self._head_locked()
        durable = self._groups.durable
        assert isinstance(durable, Head)  # set at load and by every successful flush
        return durable

    def append(
        self,
        kind: str,
        data: Any,
        *,
        session: str | None = None,
        turn: int | None = None,
        actor: str | None = None,
    ) -> Record:
        """See :meth:`LogBase.append`. With ``fsync="batch"`` in the main thread, signals
        are held while the append runs (``pthread_sigmask``) and delivered once it is
        complete: a ``KeyboardInterrupt`` landing between a group leader's election
        and its flush, or in its hand-over after it, would leave the group without a
        leader and every appender waiting for ever. The exception then comes out of
        this call, but the record is in the log (durable). Other threads never get
        Python signals, so they pay nothing for this."""
        if not self._group_commit or threading.current_thread() is not threading.main_thread():
            return super().append(kind, data, session=session, turn=turn, actor=actor)
        with signals_held():
            return super().append(kind, data, session=session, turn=turn, actor=actor)

    @property
    def _fsyncs(self) -> int:
        """Group-commit flushes issued so far (observability for tests)."""
        return self._groups.fsyncs

    # -- storage ----------------------------------------------------------------
    def _commit(self, line: bytes, seq: int) -> None:
        if self._buffering:  # batch: the group's leader writes it (see _group.py)
            self._groups.add(line)
            return
        if self._recovering is not None:  # open, recovering: written over the torn tail
            self._recovering.append(line)
            return
        try:
            written = os.write(self._fd, line)
            if written != len(line):  # short only on ENOSPC/EFBIG & co.: finish or raise
                write_all(self._fd, line[written:])
        except OSError as exc:
            self._undo_partial()
            raise io_error("append", exc) from exc
        self._size += len(line)
        if self._always:
            self._fsync_now("append")

    def _write_over_torn_tail(self, data: bytes) -> None:
        """Recovery at open: write *data* (the new records, ending in the one that names
        the dropped bytes) over the torn tail, then cut whatever is left of the tail.

        Nothing is cut before the record naming it is in the file: a crash before the
        write leaves the torn tail as it was; during it, a longer torn tail (the partial
        new lines, no newline); between write and cut, complete new lines followed by
        the rest of the old tail (no newline either). Each time the next open finds a
        torn tail and recovers it again, and no dropped byte goes unrecorded.
        """
        fd = self._fd
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            # With O_APPEND, Linux pwrite ignores its offset and appends.
            fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_APPEND)
            try:
                pwrite_all(fd, data, self._size)
            finally:
                fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            os.ftruncate(fd, self._size + len(data))
        except OSError as exc:
            raise io_error("open", exc) from exc
        self._size += len(data)

    def _undo_partial(self) -> None:
        """Cut a partially written line; if even that fails, refuse all later appends."""
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            self._failed = True

    def _fsync_now(self, op: str) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            self._failed = True  # fsync failure: page state unknown, never retried
            raise io_error(op, exc) from exc

    def _join_group(self) -> Any:
        return self._groups.join()

    def _after_commit(self, ticket: Any) -> None:
        """Group commit: return once the record is durable, i.e. written by its group's
        leader and covered by an fdatasync that started after that write returned."""
        self._groups.wait(ticket)

    def _set_failed(self) -> None:
        self._failed = True

    def _write_group(self, data: bytes) -> None:
        """Leader of a group: write its lines with one write (in chain order: one
        leader writes at a time). A partial write is cut back when possible; the log is
        FAILED anyway (the group's records are already chained in memory)."""
        if not data:
            return
        try:
            write_all(self._fd, data)
        except OSError as exc:
            self._undo_partial()
            raise io_error("append", exc) from exc
        self._size += len(data)

    def _sync(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise io_error("append", exc) from exc

    def _abandon_in_child(self, *, close_fd: bool = True) -> None:
        """After fork, in the child: this process is not the writer. The lock belongs to
        the parent (flock is shared by the inherited descriptor, so it cannot exclude the
        child): drop the child's descriptor, so that only the parent's close releases
        the lock, and refuse appends as FORKED. Locks are replaced, not reused: another
        thread of the parent may have held them at the fork. The head stays the
        parent's durable one: a group in flight at the fork may still fail there."""
        durable = self._groups.durable
        self._lock = threading.Lock()
        self._groups = self._new_groups()
        self._groups.durable = durable
        self._groups.stop()  # no group commit, ever
        self._forked = self._closed = True
        if close_fd:
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def _close(self) -> None:
        """Make every appended record durable (unless ``never``), then close the fd.

        Batch mode first waits until every queued group is flushed and takes the
        leader's role for good, so no other thread can write to or fsync a closed (or
        reused) fd. A failed final fsync is not raised by close; appenders still
        waiting get FAILED. The fd is closed whatever happens after that.
        """
        if self._group_commit:
            with signals_held():  # finish() may lead a group handed over to it
                self._groups.finish()
        try:
            if not self._readonly and not self._failed and self._fsync != "never":
                os.fdatasync(self._fd)
        except OSError:
            self._failed = True  # close itself does not raise
        finally:
            close_writer(self, self._fd)  # one step as seen from a fork (_writers.py)


def _lock(fd: int, *, wait: bool) -> None:
    flags = fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB)
    while True:
        try:
            fcntl.flock(fd, flags)
            return
        except BlockingIOError as exc:
            raise LogLockedError() from exc
        except InterruptedError:
            continue
        except OSError as exc:
            raise io_error("open", exc) from exc
