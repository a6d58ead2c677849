"""The verifier core: check a log's bytes line by line and say where it first breaks.

Shared by :func:`verify`, :func:`verify_bytes` and ``EvidenceLog.open`` so that the
writer never accepts a log the offline verifier would reject.

A line is checked against the exact grammar of a canonical record — the envelope by one
anchored regular expression (canonical string escapes, canonical integers, the fixed
key order), the ``data`` value by parsing and re-encoding it — which accepts exactly the
bytes ``canonical_json`` produces for a record, and is faster than re-encoding the
whole object (a test holds the two to the same answers). Lines are split once, each
record is hashed with one sha256 call, and the two hash fields are compared with hex
digests the scan computed (and checked as hex only when they differ).
"""

from __future__ import annotations

import hashlib
import re
from array import array
from dataclasses import dataclass, field
from typing import Any

from ._canonical import ENCODE_ERRORS, encode_str, loads_strict, scan_value, too_deep
from ._exceptions import InvalidEvidenceError, TamperReason
from ._record import (
    EMPTY_HASH,
    FORMAT_VERSION,
    GENESIS_KIND,
    MAX_LINE_BYTES,
    Head,
    genesis_hash,
    is_hex64,
)

__all__ = ["ScanResult", "parse_line", "scan"]

# A JSON string exactly as the canonical encoder writes it (UTF-8 kept, only '"', '\',
# and control characters escaped; the short escapes where JSON has them; else \u00xx).
# Possessive quantifiers: no backtracking, linear time on any input.
_STR = r'"(?:[^"\\\x00-\x1f]++|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))*+"'
# A canonical integer, at most 4300 digits (CPython's int/str conversion limit).
_UINT = r"(?:0|[1-9][0-9]{0,4299})"
_INT = r"(?:0|-?[1-9][0-9]{0,4299})"  # as _UINT, or negative: never "-0"
# The envelope, in canonical key order, split at the top-level "hash" key: the part
# before "data" and the part from "hash" on (only scalars follow "data"). The two hash
# fields are matched as any 64 characters but a quote: the scan compares them with
# sha256 hex digests, and checks them as lowercase hex only when they differ.
_PREFIX = re.compile(r'\{"actor":(?P<actor>null|' + _STR + r'),"data":')
_SUFFIX = re.compile(
    r',"hash":"(?P<hash>[^"]{64})"'
    r',"kind":(?P<kind>' + _STR + r")"
    r',"prev_hash":"(?P<prev>[^"]{64})"'
    r',"seq":(?P<seq>' + _UINT + r")"
    r',"session":(?P<session>null|' + _STR + r")"
    r',"ts":(?P<ts>' + _INT + r")"
    r',"turn":(?P<turn>null|' + _INT + r")"
    r',"version":' + str(FORMAT_VERSION) + r"\}"
)
_HASH_KEY = ',"hash":"'
_HASH_FIELD = b',"hash":"'
_HASH_FIELD_LEN = len(_HASH_FIELD) + 64 + 1  # ,"hash":"<64 hex>"
_GENESIS_KIND_JSON = '"' + GENESIS_KIND + '"'


@dataclass(slots=True)
class ScanResult:
    """What a successful scan found."""

    hashes: list[str] = field(default_factory=list)
    leaves: list[bytes] = field(default_factory=list)  # the same hashes, raw
    # with index=True: each line's end offset, kind and session (see _store.py)
    ends: array[int] = field(default_factory=lambda: array("Q"))
    kinds: list[str] = field(default_factory=list)
    sessions: list[str | None] = field(default_factory=list)
    complete_len: int = 0  # bytes up to and including the last complete line's newline
    torn_bytes: int = 0  # bytes after it (a last line without its newline)
    log_id: str | None = None  # from the genesis record

    @property
    def head(self) -> Head:
        return Head(len(self.hashes), self.hashes[-1] if self.hashes else EMPTY_HASH)


# (prefix match, suffix match, parsed data) of a line whose envelope and data are
# canonical; its two hash fields are not yet known to be hex.
_Matched = tuple["re.Match[str]", "re.Match[str]", Any]


def _match(line: bytes) -> _Matched | None:
    """The fields of *line* (without its newline) if it is canonical but for the hex of
    its hash fields, else None.

    The top-level ``"hash"`` key is the last ``,"hash":"`` in the line (a later one would
    have to sit inside a string, where quotes are escaped); the suffix from it is
    matched exactly, the prefix up to ``data`` too, and ``data`` must be the canonical
    encoding of what it parses to (whitespace, escapes, key order, duplicate keys,
    number forms, NaN/Infinity, nesting beyond MAX_DATA_DEPTH all rule a line out).
    """
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    cut = text.rfind(_HASH_KEY)
    if cut < 0:
        return None
    suffix = _SUFFIX.fullmatch(text, cut)
    prefix = _PREFIX.match(text)
    if suffix is None or prefix is None or prefix.end() > cut:
        return None
    data_text = text[prefix.end() : cut]
    try:  # canonical: exactly the encoding of what it parses to
        data, end = scan_value(data_text, 0)
        if end != len(data_text) or encode_str(data) != data_text:
            return None
        if too_deep(data_text, data):  # never written by append (see MAX_DATA_DEPTH)
            return None
    except (StopIteration, *ENCODE_ERRORS):
        return None
    return prefix, suffix, data


def parse_line(line: bytes) -> _Matched | None:
    """Return the fields of a canonical record line (without its newline), or None.

    Accepts exactly the bytes ``canonical_json`` writes for a record (a test holds it to
    a ``json``-module oracle).
    """
    matched = _match(line)
    if matched is None or not (
        is_hex64(matched[1].group("hash")) and is_hex64(matched[1].group("prev"))
    ):
        return None
    return matched


def _label(text: str) -> str | None:
    """The value of a canonical JSON string or null (as matched by ``_STR``)."""
    if text == "null":
        return None
    if "\\" not in text:
        return text[1:-1]  # nothing escaped: the characters between the quotes
    value: str = loads_strict(text)
    return value


def _cached_label(labels: dict[str, str | None], text: str) -> str | None:
    """The value of label JSON *text*, remembered in *labels* (one entry per distinct
    kind or session of the log being scanned)."""
    try:
        return labels[text]
    except KeyError:
        value = labels[text] = _label(text)
        return value


def _classify(later_lines: list[bytes], position: int, found_seq: int) -> TamperReason:
    """Name what happened at the first record whose seq or link is wrong."""
    later: set[int] = set()  # seq fields of the later lines (unparseable ones skipped)
    for line in later_lines:
        parsed = parse_line(line)
        if parsed is not None:
            later.add(int(parsed[1].group("seq")))
    if found_seq < position:
        return TamperReason.INSERTED  # a seq we already passed: a copy or forged extra
    if found_seq == position:
        return TamperReason.INSERTED if position in later else TamperReason.BAD_CHAIN
    if position in later:
        return TamperReason.INSERTED if found_seq in later else TamperReason.REORDERED
    return TamperReason.DELETED


def _genesis_log_id(kind: str, data: Any) -> str | None:
    """The log id of a well-formed genesis record (kind as JSON text), else None."""
    if kind != _GENESIS_KIND_JSON:
        return None
    if type(data) is not dict or data.keys() != {"log_id"} or type(data["log_id"]) is not str:
        return None
    log_id: str = data["log_id"]
    return log_id


def scan(buf: bytes, *, index: bool = False, expect_head: Head | None = None) -> ScanResult:
    """Verify *buf* (the bytes of a log) and return what it holds.

    Guarantee: every complete line is a canonical record whose hash matches its content,
    whose ``seq`` is its position, and which chains to the line before it (the first to
    the genesis value of its log id); with *expect_head*, the log holds at least that many
    records and the one at ``size - 1`` has that hash. A last line without its newline
    (a torn append) is not checked and is reported as ``torn_bytes``. With *index*, the
    result also holds each line's end offset, kind and session (equal labels shared).
    Not guaranteed: without *expect_head* (or a signed checkpoint), a log truncated at a
    line boundary, or rewritten wholesale by someone able to write the file, verifies.

    Raises:
        InvalidEvidenceError: the first bad record and the reason.
    """
    result = ScanResult()
    hashes = result.hashes
    leaves = result.leaves
    ends, kinds, sessions = result.ends, result.kinds, result.sessions
    labels: dict[str, str | None] = {}  # label JSON -> value, so equal labels share one str
    offset = 0
    sha256 = hashlib.sha256
    lines = buf.split(b"\n")
    torn = lines.pop()  # after the last newline: b"" or a torn append
    prev = ""  # hex hash the next record must name as prev_hash ("": none yet)
    prev_raw = b""
    for position, line in enumerate(lines):
        matched = _match(line)
        if matched is None:
            raise InvalidEvidenceError(TamperReason.BAD_JSON, seq=position)
        record_hash, record_prev, record_seq, record_kind = matched[1].group(
            "hash", "prev", "seq", "kind"
        )
        if record_prev == prev:  # the usual case: the link is right, and known to be hex
            link = prev_raw
        elif is_hex64(record_prev):
            link = bytes.fromhex(record_prev)
        else:
            raise InvalidEvidenceError(TamperReason.BAD_JSON, seq=position)
        cut = line.rfind(_HASH_FIELD)  # the same top-level field _match found
        raw = sha256(link + line[:cut] + line[cut + _HASH_FIELD_LEN :]).digest()
        computed = raw.hex()
        if computed != record_hash:
            bad_hex = not is_hex64(record_hash)
            raise InvalidEvidenceError(
                TamperReason.BAD_JSON if bad_hex else TamperReason.MODIFIED, seq=position
            )
        if position == 0:
            result.log_id = _genesis_log_id(record_kind, matched[2])
            # A first line that is no genesis record chains to nothing ("").
            prev = "" if result.log_id is None else genesis_hash(result.log_id)
        elif record_kind == _GENESIS_KIND_JSON:
            raise InvalidEvidenceError(TamperReason.INSERTED, seq=position)
        if record_prev != prev or record_seq != str(position):
            reason = _classify(lines[position + 1 :], position, int(record_seq))
            raise InvalidEvidenceError(reason, seq=position)
        prev = computed
        prev_raw = raw
        hashes.append(computed)
        leaves.append(raw)
        if index:
            offset += len(line) + 1
            ends.append(offset)
            session = matched[1].group("session")
            kinds.append(_cached_label(labels, record_kind) or "")
            sessions.append(_cached_label(labels, session))
    result.torn_bytes = len(torn)
    result.complete_len = len(buf) - len(torn)
    if expect_head is not None:
        if expect_head.size > len(hashes):
            raise InvalidEvidenceError(TamperReason.TRUNCATED, seq=len(hashes))
        if expect_head.size > 0 and hashes[expect_head.size - 1] != expect_head.hash:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=expect_head.size - 1)
        if expect_head.size == 0 and expect_head.hash != EMPTY_HASH:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=None)
    return result
