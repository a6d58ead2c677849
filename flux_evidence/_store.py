"""The records a log holds in memory, kept as their stored lines.

A log keeps every record for ``query``, iteration and proofs. Kept as objects (a
:class:`Record` and its parsed ``data`` per line) they cost about three times the bytes
of the line, and a heap of long-lived tracked objects that the cyclic garbage collector
walks again and again as it grows: measured, about a third of the cost of an append
(docs/decisions/0063). Here a record is its canonical line inside one ``bytearray``,
with its end offset in an ``array``, its raw hash in a second ``bytearray``, and its
``kind`` and ``session`` in two lists (for query filters) — no object per record
but those two strings, which callers usually share. Records are decoded from their
lines on demand.

Guarantee: a decoded record equals the one ``append`` returned (the line is the
canonical encoding of exactly that record). Callers hold the log's lock around every
method (the buffers are resized by :meth:`add`).
Not guaranteed: identity — each read decodes a fresh :class:`Record`.
"""

from __future__ import annotations

import typing
from array import array
from typing import Any

from ._canonical import scan_value
from ._record import Record, make_record

__all__ = ["LineStore", "decode_line"]

_HASH_LEN = 32


def decode_line(line: bytes | bytearray) -> Record:
    """The record a stored line (without its newline) encodes.

    Only for lines this package wrote or verified: the fields are taken as they are.
    """
    fields: Any = scan_value(line.decode("utf-8"), 0)[0]
    return make_record(
        fields["version"],
        fields["seq"],
        fields["ts"],
        fields["kind"],
        fields["session"],
        fields["turn"],
        fields["actor"],
        fields["data"],
        fields["prev_hash"],
        fields["hash"],
    )


@typing.final
class LineStore:
    """Append-only storage of (line, raw hash, kind, session) per record."""

    __slots__ = ("_buf", "_ends", "_hashes", "_kinds", "_sessions")

    def __init__(self) -> None:
        self._buf = bytearray()  # every line, newline included, in seq order
        self._ends: array[int] = array("Q")  # end offset of each line in _buf
        self._hashes = bytearray()  # raw sha256 of each record, 32 bytes each
        self._kinds: list[str] = []
        self._sessions: list[str | None] = []

    def add(self, line: bytes, raw_hash: bytes, kind: str, session: str | None) -> None:
        """Keep one record (its line ends with its newline).

        The record counts once its end offset is in, and every read is bounded by the
        number of end offsets: an add cut short (MemoryError, after which the log
        refuses appends as FAILED) leaves no half record to read.
        """
        buf = self._buf
        buf += line
        self._hashes += raw_hash
        self._kinds.append(kind)
        self._sessions.append(session)
        self._ends.append(len(buf))

    def adopt(
        self, data: bytes, ends: array[int], hashes: bytes, kinds: list[str], sessions: list[Any]
    ) -> None:
        """Take over verified records: *data* holds exactly their lines."""
        self._buf = bytearray(data)
        self._ends = ends
        self._hashes = bytearray(hashes)
        self._kinds = kinds
        self._sessions = sessions

    def __len__(self) -> int:
        return len(self._ends)

    def data(self) -> bytes:
        """Every line, as the log's file holds them."""
        return bytes(self._buf[: self._ends[-1]]) if self._ends else b""

    def lines(self, indices: range | list[int]) -> list[bytearray]:
        """The lines at *indices* (without their newline), copied out of the buffer."""
        buf, ends = self._buf, self._ends
        return [buf[ends[i - 1] if i else 0 : ends[i] - 1] for i in indices]

    def select(self, kind: str | None, session: str | None, start: int) -> list[int]:
        """Indices from *start* whose kind and session match (None: any)."""
        kinds, sessions = self._kinds, self._sessions
        indices = range(max(start, 0), len(self._ends))
        if kind is None and session is None:
            return list(indices)
        return [
            i
            for i in indices
            if (kind is None or kinds[i] == kind) and (session is None or sessions[i] == session)
        ]

    def leaves(self, start: int = 0) -> list[bytes]:
        """The raw record hashes (the Merkle leaves) from *start* on."""
        hashes = self._hashes
        stop = len(self._ends) * _HASH_LEN
        return [bytes(hashes[i : i + _HASH_LEN]) for i in range(start * _HASH_LEN, stop, _HASH_LEN)]
