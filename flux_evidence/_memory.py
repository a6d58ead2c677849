"""An evidence log held in memory, with the same interface as :class:`EvidenceLog`."""

from __future__ import annotations

import typing

from ._base import Clock, LogBase
from ._record import check_log_id

__all__ = ["MemoryEvidenceLog"]


@typing.final
class MemoryEvidenceLog(LogBase):
    """An in-memory evidence log: the same records, chain, heads and proofs as a file
    log, its bytes available from :meth:`to_bytes` (verifiable by ``verify_bytes``).

    Guarantee: the same chaining, canonical encoding and thread safety as the file log.
    Not guaranteed: anything survives the process.

    Args:
        clock: returns the ``ts`` of each record (int; default ``time.time_ns``).
        log_id: the genesis id (default: a random UUID).

    Raises:
        EvidenceError: BAD_ARGUMENT for a *log_id* that is not a str of at most 1024
            valid Unicode characters; UNENCODABLE when *clock* returns no int.
    """

    def __init__(self, *, clock: Clock | None = None, log_id: str | None = None) -> None:
        if log_id is not None:
            check_log_id(log_id)
        super().__init__(clock=clock)
        with self._lock:
            self._append_genesis(log_id)

    def _commit(self, line: bytes, seq: int) -> None:
        """Nothing to store beyond what every log keeps in memory (its lines)."""

    def to_bytes(self) -> bytes:
        """The log as it would be stored in a file."""
        with self._lock:
            return self._store.data()
