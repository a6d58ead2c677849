"""The record: one line of the log, hash-chained to the line before it.

A line is the canonical JSON of a record object with exactly the keys ``actor data hash
kind prev_hash seq session ts turn version``, followed by ``\\n``. The record's hash is
``sha256(bytes.fromhex(prev_hash) || canonical(record without "hash"))``. Record 0 is
the ``genesis`` record: its ``data`` is ``{"log_id": ...}`` and its ``prev_hash`` is
:func:`genesis_hash` of that id, so a chain cannot be spliced onto another log's start.
"""

from __future__ import annotations

import hashlib
import re
import typing
from dataclasses import dataclass
from typing import Any

from ._canonical import encode_label
from ._exceptions import EvidenceError, EvidenceReason

__all__ = [
    "EMPTY_HASH",
    "FORMAT_VERSION",
    "GENESIS_KIND",
    "MAX_LINE_BYTES",
    "RECOVERY_KIND",
    "Head",
    "Record",
    "build_line",
    "genesis_hash",
]

FORMAT_VERSION = 1
GENESIS_KIND = "genesis"
RECOVERY_KIND = "recovery"
RESERVED_KINDS = frozenset({GENESIS_KIND, RECOVERY_KIND})
# The head of a log with no records.
EMPTY_HASH = "0" * 64
# One line (record) at most 16 MiB: bounds the memory a hostile file can make a reader
# spend on one line and keeps appends well under any single-write atomicity concern.
MAX_LINE_BYTES = 16 * 1024 * 1024
# Bound on kind/session/actor strings.
MAX_LABEL_CHARS = 1024

_HEX64 = re.compile(r"[0-9a-f]{64}")
_GENESIS_DOMAIN = b"flux-evidence/v1/genesis\x00"
_HASH_FIELD = b',"hash":"'


def genesis_hash(log_id: str) -> str:
    """Return the value the first record of log *log_id* chains to (hex sha256)."""
    return hashlib.sha256(_GENESIS_DOMAIN + log_id.encode("utf-8")).hexdigest()


@typing.final
@dataclass(frozen=True, slots=True)
class Record:
    """One evidence record as stored.

    ``data`` is the parsed JSON value as a reader of the log sees it (a fresh copy, not
    the caller's object); treat it as read-only. ``ts`` is whatever the log's clock
    returned (nanoseconds since the epoch for the default clock).
    """

    version: int
    seq: int
    ts: int
    kind: str
    session: str | None
    turn: int | None
    actor: str | None
    data: Any
    prev_hash: str
    hash: str

    def to_json(self) -> dict[str, Any]:
        """Return the record as a JSON object (the keys of a stored line)."""
        return {
            "actor": self.actor,
            "data": self.data,
            "hash": self.hash,
            "kind": self.kind,
            "prev_hash": self.prev_hash,
            "seq": self.seq,
            "session": self.session,
            "ts": self.ts,
            "turn": self.turn,
            "version": self.version,
        }


@typing.final
@dataclass(frozen=True, slots=True)
class Head:
    """What an auditor keeps to detect truncation and rewrites later: the number of
    records and the hash of the last one. Printed and parsed as ``SIZE:HASH``."""

    size: int
    hash: str

    def __str__(self) -> str:
        return f"{self.size}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> Head:
        """Parse ``SIZE:HASH`` (as printed by ``str(head)``).

        Raises:
            EvidenceError: reason BAD_HEAD when malformed.
        """
        size_text, sep, hash_text = text.strip().partition(":")
        if not sep or not size_text.isascii() or not size_text.isdigit():
            raise EvidenceError("head must be SIZE:HASH", op="head", reason=EvidenceReason.BAD_HEAD)
        if len(size_text) > 20 or not _HEX64.fullmatch(hash_text):
            raise EvidenceError(
                "head must be SIZE:HASH with a 64-digit lowercase hex hash",
                op="head",
                reason=EvidenceReason.BAD_HEAD,
            )
        return cls(int(size_text), hash_text)


def is_hex64(value: object) -> bool:
    return type(value) is str and _HEX64.fullmatch(value) is not None


def _unencodable(what: str) -> EvidenceError:
    return EvidenceError(what, op="append", reason=EvidenceReason.UNENCODABLE)


def _label(value: str | None, what: str) -> str:
    if value is None:
        return "null"
    if type(value) is not str or len(value) > MAX_LABEL_CHARS:
        raise _unencodable(f"{what} must be None or a str of at most {MAX_LABEL_CHARS} chars")
    return encode_label(value)


def build_line(
    *,
    prev_hash: str,
    seq: int,
    ts: int,
    kind: str,
    session: str | None,
    turn: int | None,
    actor: str | None,
    data_text: str,
) -> tuple[bytes, str, bytes]:
    """Return (the full line with its ``\\n``, the record hash in hex and raw).

    The canonical encoding is assembled from canonical pieces in sorted key order (the
    same bytes as ``canonical_json`` of the whole object — a test holds it to that).
    *data_text* must already be canonical JSON text (see ``encode_data``).

    Raises:
        EvidenceError: reason UNENCODABLE for a bad field (wrong type, empty kind, lone
            surrogate, an int beyond the digit limit), TOO_LARGE over MAX_LINE_BYTES.
    """
    if type(kind) is not str or not kind or len(kind) > MAX_LABEL_CHARS:
        raise _unencodable(f"kind must be a non-empty str of at most {MAX_LABEL_CHARS} chars")
    if type(seq) is not int or type(ts) is not int:
        raise _unencodable("seq and ts must be int")
    if turn is not None and type(turn) is not int:
        raise _unencodable("turn must be None or an int")
    try:
        head = f'{{"actor":{_label(actor, "actor")},"data":{data_text}'.encode()
        tail = (
            f',"kind":{encode_label(kind)},"prev_hash":"{prev_hash}","seq":{seq}'
            f',"session":{_label(session, "session")},"ts":{ts}'
            f',"turn":{"null" if turn is None else turn},"version":1}}'
        ).encode()
    except UnicodeEncodeError as exc:  # a lone surrogate
        raise _unencodable("a field is not valid Unicode") from exc
    except ValueError as exc:  # an int beyond the interpreter's int/str digit limit
        raise _unencodable("an integer field is too large") from exc
    digest = hashlib.sha256(bytes.fromhex(prev_hash))
    digest.update(head)
    digest.update(tail)
    raw_hash = digest.digest()
    record_hash = raw_hash.hex()
    line = b"".join((head, _HASH_FIELD, record_hash.encode(), b'"', tail, b"\n"))
    if len(line) > MAX_LINE_BYTES:
        raise EvidenceError(
            f"record exceeds {MAX_LINE_BYTES} bytes", op="append", reason=EvidenceReason.TOO_LARGE
        )
    return line, record_hash, raw_hash
