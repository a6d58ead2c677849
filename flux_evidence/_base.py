"""What every evidence log shares: record building, queries, heads and proofs.

Subclasses supply ``_commit(line, seq)`` (hand the line to storage) and may override
``_join_group()`` / ``_after_commit(ticket)`` (group commit: join a group under the
append lock, wait for its durability outside it) and ``_close()``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Self

from ._canonical import encode_data
from ._checkpoint import Checkpoint, sign_checkpoint
from ._exceptions import EvidenceError, EvidenceReason
from ._merkle import _mth, consistency_proof, inclusion_proof, leaf_hash
from ._record import (
    EMPTY_HASH,
    GENESIS_KIND,
    RECOVERY_KIND,
    RESERVED_KINDS,
    Head,
    Record,
    build_record,
    genesis_hash,
)
from ._scan import ScanResult
from ._store import LineStore, decode_line

__all__ = ["Clock", "LogBase"]

Clock = Callable[[], int]


def _clock_error() -> EvidenceError:
    return EvidenceError("clock must return an int", op="append", reason=EvidenceReason.UNENCODABLE)


class LogBase:
    """Shared implementation of the evidence-log interface (not public)."""

    def __init__(self, *, clock: Clock | None) -> None:
        self._clock: Clock = clock if clock is not None else time.time_ns
        self._lock = threading.Lock()  # orders appends: seq, prev_hash and the write
        self._store = LineStore()  # every record, as its line (see _store.py)
        self._leaf_hashes: list[bytes] = []  # RFC 6962 leaf hashes of those (lazily)
        self._prev = ""  # hash of the last record (hex)
        self._prev_raw = b""  # the same, raw: what the next record's hash starts from
        self._log_id = ""
        self._closed = False
        self._forked = False  # set in a forked child: closed, and says why
        # An earlier write or fsync failed or was interrupted: what storage holds is
        # unknown, so nothing more is appended (reopening the log re-reads the truth).
        self._failed = False
        self._readonly = False
        self._group_commit = False  # the two group hooks below are called only when True

    # -- storage hooks -------------------------------------------------------------
    def _commit(self, line: bytes, seq: int) -> None:
        raise NotImplementedError

    def _join_group(self) -> Any:
        """Group commit: called under the append lock right after the record is
        committed; returns a ticket for :meth:`_after_commit`."""

    def _after_commit(self, ticket: Any) -> None:
        """Group commit: wait for durability, after the append lock is released."""

    def _close(self) -> None:
        """Release storage."""

    # -- building --------------------------------------------------------------------
    def _adopt(self, scanned: ScanResult, data: bytes) -> None:
        """Take over the verified records of a scan; *data* holds exactly their lines."""
        self._store.adopt(
            data, scanned.ends, b"".join(scanned.leaves), scanned.kinds, scanned.sessions
        )
        if scanned.leaves:
            self._prev = scanned.hashes[-1]
            self._prev_raw = scanned.leaves[-1]
            self._log_id = scanned.log_id or ""

    def _append_locked(
        self,
        kind: str,
        data: bytes,
        copy: Any,
        *,
        session: str | None = None,
        turn: int | None = None,
        actor: str | None = None,
    ) -> Record:
        """Build, commit and index one record (*data* canonical bytes, *copy* its
        parsed value). Caller holds ``self._lock``. The one place a record is chained."""
        store = self._store
        seq = len(store)
        ts = self._clock()
        if type(ts) is not int:
            raise _clock_error()
        if seq:
            prev, prev_raw = self._prev, self._prev_raw
        else:
            prev = genesis_hash(self._log_id)
            prev_raw = bytes.fromhex(prev)
        line, raw, record = build_record(
            prev_raw, prev, seq, ts, kind, session, turn, actor, data, copy
        )
        try:
            self._commit(line, seq)
            store.add(line, raw, kind, session)
            self._prev = record.hash
            self._prev_raw = raw
        except EvidenceError:
            raise  # storage refused the line and left no trace of it (or failed the log)
        except BaseException:
            # Interrupted around the write (KeyboardInterrupt, ...): the line may be
            # stored while the chain state says otherwise. Never append on top of that.
            self._failed = True
            raise
        return record

    def _append_genesis(self, log_id: str | None) -> None:
        self._log_id = log_id if log_id is not None else uuid.uuid4().hex
        self._append_locked(GENESIS_KIND, *encode_data({"log_id": self._log_id}))

    def _append_recovery(self, dropped_bytes: int, dropped_sha256: str) -> None:
        dropped = {"dropped_bytes": dropped_bytes, "dropped_sha256": dropped_sha256}
        self._append_locked(RECOVERY_KIND, *encode_data(dropped))

    def _check_writable(self, op: str) -> None:
        if self._forked:
            raise EvidenceError(
                "evidence log was opened by the parent process", op=op, reason=EvidenceReason.FORKED
            )
        if self._closed:
            raise EvidenceError("evidence log is closed", op=op, reason=EvidenceReason.CLOSED)
        if self._readonly:
            raise EvidenceError("log is opened for reading", op=op, reason=EvidenceReason.READ_ONLY)
        if self._failed:
            raise EvidenceError(
                "an earlier write or fsync failed", op=op, reason=EvidenceReason.FAILED
            )

    # -- public interface --------------------------------------------------------
    @property
    def log_id(self) -> str:
        """The id the genesis record carries (and the chain is rooted in)."""
        return self._log_id

    def append(
        self,
        kind: str,
        data: Any,
        *,
        session: str | None = None,
        turn: int | None = None,
        actor: str | None = None,
    ) -> Record:
        """Append one record and return it as stored.

        Guarantee: the record is chained to the previous one and handed to storage
        according to the log's durability mode before this returns; *data* is stored
        as given (redaction is the caller's job) and must round-trip through canonical
        JSON unchanged. Thread-safe: concurrent appends get consecutive seqs.
        Not guaranteed: durability beyond the log's fsync mode.

        Raises:
            EvidenceError: UNENCODABLE (data or fields), BAD_ARGUMENT (a reserved kind),
                TOO_LARGE, CLOSED, READ_ONLY, FORKED (a file log opened by the parent
                of this forked process), FAILED or IO.
        """
        if isinstance(kind, str) and kind in RESERVED_KINDS:
            raise EvidenceError(
                f"kind {kind!r} is reserved for the log itself",
                op="append",
                reason=EvidenceReason.BAD_ARGUMENT,
            )
        raw, copy = encode_data(data)
        ticket = None
        with self._lock:
            if self._closed or self._readonly or self._failed:  # (forked: closed)
                self._check_writable("append")
            record = self._append_locked(kind, raw, copy, session=session, turn=turn, actor=actor)
            if self._group_commit:
                ticket = self._join_group()
        if ticket is not None:
            self._after_commit(ticket)
        return record

    def query(
        self, *, kind: str | None = None, session: str | None = None, since_seq: int = 0
    ) -> list[Record]:
        """Records with ``seq >= since_seq`` matching *kind* and *session* (when given)."""
        with self._lock:
            store = self._store
            lines = store.lines(store.select(kind, session, since_seq))
        return [decode_line(line) for line in lines]

    def __iter__(self) -> Iterator[Record]:
        """The records as of this call, decoded as the iteration reaches them."""
        with self._lock:
            lines = self._store.lines(range(len(self._store)))
        return map(decode_line, lines)

    def __len__(self) -> int:
        return len(self._store)

    def head(self) -> Head:
        """The current head (record count and last record hash), for ``expect_head``.

        A file log with ``fsync="batch"`` gives the head of the records known durable:
        every record whose ``append`` has returned is in it, a record still being
        flushed is not (``len`` counts it already), so a head never names a record that
        a crash could still lose.
        """
        with self._lock:
            return self._published_head()

    def _head_locked(self) -> Head:
        """The head of every record chained so far (caller holds the lock)."""
        return Head(len(self._store), self._prev if len(self._store) else EMPTY_HASH)

    def _published_head(self) -> Head:
        """What :meth:`head` and :meth:`checkpoint` cover (caller holds the lock)."""
        return self._head_locked()

    def checkpoint(self, *, hmac_key: bytes | None = None, ed25519_key: Any = None) -> Checkpoint:
        """The RFC 6962 tree head over the records of :meth:`head`, signed if a key is
        given (with ``fsync="batch"``: the records known durable).

        Raises:
            EvidenceError: BAD_ARGUMENT for a bad key (see ``sign_checkpoint``).
        """
        with self._lock:
            size = self._published_head().size
            leaf_hashes = self._leaf_hashes
            leaf_hashes.extend(leaf_hash(h) for h in self._store.leaves(len(leaf_hashes)))
            root = _mth(leaf_hashes[:size] if size < len(leaf_hashes) else leaf_hashes).hex()
        unsigned = Checkpoint(self._log_id, size, root)
        if hmac_key is None and ed25519_key is None:
            return unsigned
        return sign_checkpoint(unsigned, hmac_key=hmac_key, ed25519_key=ed25519_key)

    def prove_inclusion(self, seq: int, size: int) -> list[bytes]:
        """Audit path for record *seq* in the tree of the first *size* records."""
        with self._lock:
            leaves = self._store.leaves()
        return inclusion_proof(leaves, seq, size)

    def prove_consistency(self, old_size: int, new_size: int) -> list[bytes]:
        """Proof that the tree of *new_size* records extends that of *old_size*."""
        with self._lock:
            leaves = self._store.leaves()
        return consistency_proof(leaves, old_size, new_size)

    def close(self) -> None:
        """Close the log (idempotent); appends after it raise CLOSED."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
