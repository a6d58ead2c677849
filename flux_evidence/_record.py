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
    "build_record",
    "check_log_id",
    "genesis_hash",
    "is_hex64",
    "make_record",
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


def check_log_id(log_id: object) -> None:
    """Refuse a log id that is not a str of at most MAX_LABEL_CHARS valid Unicode chars.

    Raises:
        EvidenceError: reason BAD_ARGUMENT.
    """
    if isinstance(log_id, str) and type(log_id) is str and len(log_id) <= MAX_LABEL_CHARS:
        try:
            log_id.encode("utf-8")
            return
        except UnicodeEncodeError:  # a lone surrogate
            pass
    raise EvidenceError(
        f"log_id must be a str of at most {MAX_LABEL_CHARS} valid Unicode characters",
        op="open",
        reason=EvidenceReason.BAD_ARGUMENT,
    )


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

    def __post_init__(self) -> None:
        # A head that cannot name a record must not pass as "nothing to check".
        if type(self.size) is not int or self.size < 0 or not is_hex64(self.hash):
            raise EvidenceError(
                "head must be a size >= 0 and a 64-digit lowercase hex hash",
                op="head",
                reason=EvidenceReason.BAD_HEAD,
            )

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


# Frozen dataclass __init__ goes through object.__setattr__ per field; on the append hot
# path the record is built by its slot descriptors directly (the same result, faster).
_new = object.__new__
(
    _SET_VERSION,
    _SET_SEQ,
    _SET_TS,
    _SET_KIND,
    _SET_SESSION,
    _SET_TURN,
    _SET_ACTOR,
    _SET_DATA,
    _SET_PREV,
    _SET_HASH,
) = (getattr(Record, name).__set__ for name in Record.__slots__)
assert Record.__slots__ == (
    "version", "seq", "ts", "kind", "session", "turn", "actor", "data", "prev_hash", "hash"
)  # fmt: skip


def make_record(  # noqa: PLR0917 - per-record hot path: positional call
    version: int,
    seq: int,
    ts: int,
    kind: str,
    session: str | None,
    turn: int | None,
    actor: str | None,
    data: Any,
    prev_hash: str,
    record_hash: str,
) -> Record:
    """``Record(...)`` for fields already known to be valid, without the per-field
    ``object.__setattr__`` of a frozen dataclass's ``__init__`` (the same object)."""
    record: Record = _new(Record)
    _SET_VERSION(record, version)
    _SET_SEQ(record, seq)
    _SET_TS(record, ts)
    _SET_KIND(record, kind)
    _SET_SESSION(record, session)
    _SET_TURN(record, turn)
    _SET_ACTOR(record, actor)
    _SET_DATA(record, data)
    _SET_PREV(record, prev_hash)
    _SET_HASH(record, record_hash)
    return record


def _unencodable(what: str) -> EvidenceError:
    return EvidenceError(what, op="append", reason=EvidenceReason.UNENCODABLE)


# Encoded labels by (kind, session, actor): agents repeat a handful of combinations, so
# one lookup replaces three encodings. Only checked, encodable labels are cached (the
# key's types are checked before the lookup, so no caller-defined __hash__/__eq__ runs).
# Bounded so that callers using unbounded distinct labels cannot grow it without limit.
_LABELS: dict[tuple[str, str | None, str | None], tuple[bytes, bytes, bytes]] = {}
_LABELS_MAX = 4096


def _label(value: str | None, what: str) -> bytes:
    """The canonical JSON bytes of a label (None or a str of bounded length)."""
    if value is None:
        return b"null"
    if type(value) is str and len(value) <= MAX_LABEL_CHARS:
        try:
            return encode_label(value).encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate
            raise _unencodable(f"{what} is not valid Unicode") from exc
    raise _unencodable(f"{what} must be None or a str of at most {MAX_LABEL_CHARS} chars")


def _new_labels(kind: str, session: str | None, actor: str | None) -> tuple[bytes, bytes, bytes]:
    """Check and encode (actor, kind, session) and cache the result."""
    if type(kind) is not str or not kind:
        raise _unencodable(f"kind must be a non-empty str of at most {MAX_LABEL_CHARS} chars")
    labels = (_label(actor, "actor"), _label(kind, "kind"), _label(session, "session"))
    if len(_LABELS) >= _LABELS_MAX:
        _LABELS.clear()
    _LABELS[kind, session, actor] = labels
    return labels


_sha256 = hashlib.sha256
_join = b"".join

# The envelope after "data", in canonical key order, with the "hash" field left out.
_TAIL = (
    b',"kind":%b,"prev_hash":"%b","seq":%d,"session":%b,"ts":%d,"turn":%b,"version":'
    + str(FORMAT_VERSION).encode()
    + b"}"
)


def build_record(  # noqa: PLR0917 - per-record hot path: positional call
    prev_raw: bytes,
    prev_hash: str,
    seq: int,
    ts: int,
    kind: str,
    session: str | None,
    turn: int | None,
    actor: str | None,
    data: bytes,
    copy: Any,
) -> tuple[bytes, bytes, Record]:
    """Return (the full line with its ``\\n``, the raw record hash, the record).

    The canonical encoding is assembled from canonical pieces in sorted key order (the
    same bytes as ``canonical_json`` of the whole object — a test holds it to that);
    the hash is one sha256 over ``prev_raw`` and the line without its ``hash`` field.
    *data* must already be canonical JSON bytes and *copy* its parsed value (see
    ``encode_data``); *prev_hash* is *prev_raw* in lowercase hex.

    Raises:
        EvidenceError: reason UNENCODABLE for a bad field (wrong type, empty kind, lone
            surrogate, an int beyond the digit limit), TOO_LARGE over MAX_LINE_BYTES.
    """
    if type(seq) is not int or type(ts) is not int:
        raise _unencodable("seq and ts must be int")
    if turn is not None and type(turn) is not int:
        raise _unencodable("turn must be None or an int")
    labels = None
    if (
        type(kind) is str
        and (session is None or type(session) is str)
        and (actor is None or type(actor) is str)
    ):  # only then is the key hashed and compared (str and None: no caller code runs)
        labels = _LABELS.get((kind, session, actor))
    if labels is None:
        labels = _new_labels(kind, session, actor)  # checks, raises or caches
    try:
        head = b'{"actor":%b,"data":%b' % (labels[0], data)
        tail = _TAIL % (
            labels[1],
            prev_hash.encode(),
            seq,
            labels[2],
            ts,
            b"null" if turn is None else b"%d" % turn,
        )
    except ValueError as exc:  # an int beyond the interpreter's int/str digit limit
        raise _unencodable("an integer field is too large") from exc
    hasher = _sha256(prev_raw)  # fed piecewise: no concatenated copy of the line
    hasher.update(head)
    hasher.update(tail)
    raw_hash = hasher.digest()
    record_hash = raw_hash.hex()
    line = _join((head, b',"hash":"', record_hash.encode(), b'"', tail, b"\n"))
    if len(line) > MAX_LINE_BYTES:
        raise EvidenceError(
            f"record exceeds {MAX_LINE_BYTES} bytes", op="append", reason=EvidenceReason.TOO_LARGE
        )
    record = make_record(
        FORMAT_VERSION, seq, ts, kind, session, turn, actor, copy, prev_hash, record_hash
    )
    return line, raw_hash, record
