"""What every evidence log shares: record building, queries, heads and proofs.

Subclasses supply ``_commit(line, seq)`` (hand the line to storage) and may override
``_after_commit(seq)`` (wait for durability outside the append lock) and ``_close()``.
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
    FORMAT_VERSION,
    GENESIS_KIND,
    RECOVERY_KIND,
    RESERVED_KINDS,
    Head,
    Record,
    build_line,
    genesis_hash,
)

__all__ = ["Clock", "LogBase"]

Clock = Callable[[], int]


class LogBase:
    """Shared implementation of the evidence-log interface (not public)."""

    def __init__(self, *, clock: Clock | None) -> None:
        self._clock: Clock = clock if clock is not None else time.time_ns
        self._lock = threading.Lock()  # orders appends: seq, prev_hash and the write
        self._records: list[Record] = []
        self._leaves: list[bytes] = []  # raw record hashes, the Merkle leaves
        self._leaf_hashes: list[bytes] = []  # RFC 6962 leaf hashes of those (lazily)
        self._prev = ""
        self._log_id = ""
        self._closed = False
        self._readonly = False

    # -- storage hooks -------------------------------------------------------------
    def _commit(self, line: bytes, seq: int) -> None:
        raise NotImplementedError

    def _begin_append(self) -> None:
        """Called when an append starts (group commit counts appenders in flight)."""

    def _end_write(self) -> None:
        """Called once that append's write is done or abandoned."""

    def _after_commit(self, seq: int) -> None:
        """Called after the append lock is released (group commit waits here)."""

    def _close(self) -> None:
        """Release storage."""

    # -- building --------------------------------------------------------------------
    def _adopt(self, records: list[Record]) -> None:
        """Take over already-verified records (from a scan)."""
        self._records = records
        self._leaves = [bytes.fromhex(r.hash) for r in records]
        if records:
            self._prev = records[-1].hash
            self._log_id = records[0].data["log_id"]

    def _append_locked(
        self,
        kind: str,
        *,
        data_text: str,
        data: Any,
        session: str | None = None,
        turn: int | None = None,
        actor: str | None = None,
    ) -> Record:
        """Build, commit and index one record. Caller holds ``self._lock``."""
        seq = len(self._records)
        ts = self._clock()
        if type(ts) is not int:
            raise EvidenceError(
                "clock must return an int", op="append", reason=EvidenceReason.UNENCODABLE
            )
        prev = self._prev if seq else genesis_hash(self._log_id)
        line, record_hash, raw = build_line(
            prev_hash=prev,
            seq=seq,
            ts=ts,
            kind=kind,
            session=session,
            turn=turn,
            actor=actor,
            data_text=data_text,
        )
        self._commit(line, seq)
        record = Record(
            FORMAT_VERSION, seq, ts, kind, session, turn, actor, data, prev, record_hash
        )
        self._records.append(record)
        self._leaves.append(raw)
        self._prev = record_hash
        return record

    def _append_genesis(self, log_id: str | None) -> None:
        self._log_id = log_id if log_id is not None else uuid.uuid4().hex
        raw, copy = encode_data({"log_id": self._log_id})
        self._append_locked(GENESIS_KIND, data_text=raw, data=copy)

    def _append_recovery(self, dropped_bytes: int, dropped_sha256: str) -> None:
        raw, copy = encode_data({"dropped_bytes": dropped_bytes, "dropped_sha256": dropped_sha256})
        self._append_locked(RECOVERY_KIND, data_text=raw, data=copy)

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise EvidenceError("evidence log is closed", op=op, reason=EvidenceReason.CLOSED)

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
                TOO_LARGE, CLOSED, READ_ONLY, FAILED or IO.
        """
        if isinstance(kind, str) and kind in RESERVED_KINDS:
            raise EvidenceError(
                f"kind {kind!r} is reserved for the log itself",
                op="append",
                reason=EvidenceReason.BAD_ARGUMENT,
            )
        self._begin_append()
        try:
            data_text, copy = encode_data(data)
            with self._lock:
                self._check_open("append")
                if self._readonly:
                    raise EvidenceError(
                        "log is opened for reading", op="append", reason=EvidenceReason.READ_ONLY
                    )
                record = self._append_locked(
                    kind, data_text=data_text, data=copy, session=session, turn=turn, actor=actor
                )
        finally:
            self._end_write()
        self._after_commit(record.seq)
        return record

    def query(
        self, *, kind: str | None = None, session: str | None = None, since_seq: int = 0
    ) -> list[Record]:
        """Records with ``seq >= since_seq`` matching *kind* and *session* (when given)."""
        with self._lock:
            records = self._records[max(since_seq, 0) :]
        return [
            r
            for r in records
            if (kind is None or r.kind == kind) and (session is None or r.session == session)
        ]

    def __iter__(self) -> Iterator[Record]:
        with self._lock:
            snapshot = list(self._records)
        return iter(snapshot)

    def __len__(self) -> int:
        return len(self._records)

    def head(self) -> Head:
        """The current head (record count and last record hash), for ``expect_head``."""
        with self._lock:
            return Head(len(self._records), self._prev if self._records else EMPTY_HASH)

    def checkpoint(self, *, hmac_key: bytes | None = None, ed25519_key: Any = None) -> Checkpoint:
        """The RFC 6962 tree head over all record hashes, signed if a key is given.

        Raises:
            EvidenceError: BAD_ARGUMENT for a bad key (see ``sign_checkpoint``).
        """
        with self._lock:
            leaf_hashes = self._leaf_hashes
            leaf_hashes.extend(leaf_hash(h) for h in self._leaves[len(leaf_hashes) :])
            size = len(leaf_hashes)
            root = _mth(leaf_hashes).hex()
        unsigned = Checkpoint(self._log_id, size, root)
        if hmac_key is None and ed25519_key is None:
            return unsigned
        return sign_checkpoint(unsigned, hmac_key=hmac_key, ed25519_key=ed25519_key)

    def prove_inclusion(self, seq: int, size: int) -> list[bytes]:
        """Audit path for record *seq* in the tree of the first *size* records."""
        with self._lock:
            leaves = list(self._leaves)
        return inclusion_proof(leaves, seq, size)

    def prove_consistency(self, old_size: int, new_size: int) -> list[bytes]:
        """Proof that the tree of *new_size* records extends that of *old_size*."""
        with self._lock:
            leaves = list(self._leaves)
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
