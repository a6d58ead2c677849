"""Errors raised by :mod:`flux_evidence`.

Every error raised by a public call is an :class:`EvidenceError`; an ``OSError`` never
escapes a public call untranslated. Each error carries structured fields — ``op`` (the
operation), ``reason`` (an enum member) and, for verification failures, ``seq`` (the
first bad record). Callers branch on ``reason``, never on message text.

The tree::

    EvidenceError                  (reason: EvidenceReason) a log operation failed
    ├── InvalidEvidenceError       (reason: TamperReason) the evidence does not verify —
    │                              one opaque error: the first bad seq and why
    └── LogLockedError             (reason LOCKED) another writer holds the log
"""

from __future__ import annotations

import enum
import typing

__all__ = [
    "EvidenceError",
    "EvidenceReason",
    "InvalidEvidenceError",
    "LogLockedError",
    "TamperReason",
]


class EvidenceReason(enum.Enum):
    """Why a log operation (not a verification) failed."""

    LOCKED = "locked"  # another open-for-write holds the exclusive lock
    CLOSED = "closed"  # the log was closed
    FORKED = "forked"  # a writer inherited across fork: only the opening process writes
    READ_ONLY = "read_only"  # append on a log opened for reading
    FAILED = "failed"  # an earlier write or fsync failed: durability unknown, log poisoned
    UNENCODABLE = "unencodable"  # data/fields cannot be stored as canonical JSON
    TOO_LARGE = "too_large"  # a record over the line-size bound
    NOT_A_FILE = "not_a_file"  # the path is a directory, FIFO, device, ...
    NOT_FOUND = "not_found"  # reading a log that does not exist
    IO = "io"  # any other OS-level failure
    BAD_HEAD = "bad_head"  # an expected head string is malformed
    BAD_ARGUMENT = "bad_argument"  # an index, size or key out of range


class TamperReason(enum.Enum):
    """Why the evidence does not verify (the reason of :class:`InvalidEvidenceError`)."""

    MODIFIED = "modified"  # a record's content no longer matches its hash
    INSERTED = "inserted"  # a record appears that does not belong at this position
    DELETED = "deleted"  # records are missing
    REORDERED = "reordered"  # records are present but out of order
    TRUNCATED = "truncated"  # the log is shorter than an expected head
    BAD_JSON = "bad_json"  # a complete line is not a canonical record
    BAD_CHAIN = "bad_chain"  # a record does not chain to its predecessor
    BAD_PROOF = "bad_proof"  # a Merkle inclusion/consistency proof does not verify
    BAD_SIGNATURE = "bad_signature"  # a checkpoint signature does not verify


class EvidenceError(Exception):
    """Root of every error raised by :mod:`flux_evidence`.

    Attributes:
        op: the operation that failed (``"open"``, ``"append"``, ``"verify"``, ...).
        reason: why, as an enum member.
    """

    reason: EvidenceReason | TamperReason

    def __init__(self, message: str, *, op: str, reason: EvidenceReason | TamperReason) -> None:
        super().__init__(message)
        self.op = op
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take other constructor arguments: rebuild from the state instead,
        # so every error crosses a process boundary (a process pool) as it was.
        return (_rebuild, (type(self), str(self), dict(self.__dict__)))


@typing.final
class InvalidEvidenceError(EvidenceError):
    """The evidence does not verify: tampering, corruption or a bad proof.

    Opaque by design (as Fernet's ``InvalidToken``): it names the first bad record
    (``seq``, the position in the log where verification stopped; ``None`` when not
    about one record) and a :class:`TamperReason`, nothing more.
    """

    reason: TamperReason

    def __init__(self, reason: TamperReason, *, seq: int | None, op: str = "verify") -> None:
        where = f" at seq {seq}" if seq is not None else ""
        super().__init__(f"invalid evidence{where}: {reason.value}", op=op, reason=reason)
        self.seq = seq


@typing.final
class LogLockedError(EvidenceError):
    """Another writer holds the log's exclusive lock."""

    reason: EvidenceReason

    def __init__(self, *, op: str = "open") -> None:
        super().__init__(
            "evidence log is locked by another writer", op=op, reason=EvidenceReason.LOCKED
        )


def _rebuild(cls: type[EvidenceError], message: str, state: dict[str, object]) -> EvidenceError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err
