"""Canonical JSON: the one byte encoding that records are hashed and stored in.

Sorted keys, no insignificant whitespace, UTF-8 (non-ASCII kept as UTF-8, not
``\\u`` escapes), integers of any size, finite floats in Python's shortest round-trip
form; ``NaN``/``Infinity`` are refused. This is the canonical form of *this* project
(close to, but not claimed to be, RFC 8785 JCS: floats are Python ``repr``).
"""

from __future__ import annotations

import json
from typing import Any

from ._exceptions import EvidenceError, EvidenceReason

__all__ = [
    "ENCODE_ERRORS",
    "MAX_DATA_DEPTH",
    "canonical_json",
    "encode_data",
    "encode_label",
    "encode_str",
    "loads_strict",
    "scan_value",
]


def _refuse_type(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


# What the encoder and the decoder raise on a value that has no canonical encoding (or
# on text that is not one JSON value): callers map these to their own error.
ENCODE_ERRORS = (TypeError, ValueError, RecursionError)

# The C encoder, built once (json.JSONEncoder.encode rebuilds it on every call): sorted
# keys, "," and ":" separators, UTF-8 kept as is, NaN/Infinity refused. No circular
# marker table: a cycle ends in RecursionError, which callers map to UNENCODABLE.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
if _c_make_encoder is not None:
    _C_ENCODE: Any = _c_make_encoder(
        None, _refuse_type, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )

    def encode_str(value: Any) -> str:
        """Canonical JSON text of *value* (exceptions propagate)."""
        return "".join(_C_ENCODE(value, 0))

else:  # pragma: no cover - CPython always has the C accelerator
    _ENCODER = json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )

    def encode_str(value: Any) -> str:
        """Canonical JSON text of *value* (exceptions propagate)."""
        return _ENCODER.encode(value)

    def _C_ENCODE(value: Any, _level: int) -> list[str]:  # stands in for the C encoder
        return [_ENCODER.encode(value)]


_join = "".join

# Deepest nesting of arrays/objects in a record's data. The C encoder and decoder
# recurse once per level on the interpreter's stack (in 3.11 shared with Python frames,
# 1000 by default): data an appender with a shallow stack can encode may not decode in a
# reader deeper in its stack, and an acknowledged record would make its log fail to
# verify or open. Well below the limit: a reader keeps ~850 frames of headroom.
MAX_DATA_DEPTH = 128


def too_deep(text: str, value: Any) -> bool:
    """Whether *value* (parsed from the JSON *text*) nests deeper than MAX_DATA_DEPTH.

    Two C-speed counts settle the usual case; only text with more brackets than the
    bound is walked (iteratively; the walk visits each container once, so it is bounded
    by the size of *value*).
    """
    if text.count("[") + text.count("{") <= MAX_DATA_DEPTH or not (
        type(value) is dict or type(value) is list
    ):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if type(node) is dict else node
        for child in children:
            if type(child) is dict or type(child) is list:
                if depth >= MAX_DATA_DEPTH:
                    return True
                stack.append((child, depth + 1))
    return False


encode_label = json.encoder.encode_basestring


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not canonical JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
# scan_value(text, index) -> (value, end): one JSON value starting exactly at *index*
# (no whitespace skipped); raises StopIteration when there is none there.
scan_value: Any = getattr(_DECODER, "scan_once")  # noqa: B009 - untyped attribute


def loads_strict(text: str) -> Any:
    """Parse *text* as one JSON value with nothing around it, refusing NaN/Infinity.

    Raises:
        ValueError, RecursionError: the caller maps these to its own error.
    """
    try:
        value, end = scan_value(text, 0)
    except StopIteration as exc:
        raise ValueError("not JSON") from exc
    if end != len(text):
        raise ValueError("trailing data after JSON value")
    return value


def _unencodable(exc: BaseException | None) -> EvidenceError:
    why = f" ({type(exc).__name__})" if exc is not None else " (tuple, non-str key, ...)"
    return EvidenceError(
        f"value is not encodable as canonical JSON{why}",
        op="encode",
        reason=EvidenceReason.UNENCODABLE,
    )


def canonical_json(value: Any) -> bytes:
    """Return the canonical JSON encoding of *value* as UTF-8 bytes.

    Guarantee: equal JSON values (as :func:`loads_strict` returns them) encode to equal
    bytes; the output contains no newline byte (newlines in strings are escaped).
    Not guaranteed: that *value* round-trips — a tuple encodes as a list and a
    non-``str`` key is stringified; :func:`encode_data` is the checked entry.

    Raises:
        EvidenceError: reason UNENCODABLE for NaN/Infinity, unserialisable objects,
            circular or too deeply nested structures, lone surrogates, or integers
            beyond the interpreter's digit limit.
    """
    try:
        return encode_str(value).encode("utf-8")
    except ENCODE_ERRORS as exc:  # UnicodeEncodeError is a ValueError
        raise _unencodable(exc) from exc


def encode_data(data: Any) -> tuple[bytes, Any]:
    """Encode *data* canonically and return (its UTF-8 bytes, an independent parsed copy).

    Guarantee: the copy is exactly what a reader of the log will see — *data* is
    refused unless it survives the round trip unchanged (so a tuple, a non-``str`` key
    or a ``bool`` key is refused rather than silently rewritten), unless its text is
    valid Unicode (no lone surrogate), and unless it nests at most MAX_DATA_DEPTH
    arrays/objects deep (so that a reader deeper in its stack can still decode it).

    Raises:
        EvidenceError: reason UNENCODABLE.
    """
    try:
        text = _join(_C_ENCODE(data, 0))  # encode_str, inlined (hot path)
        copy, end = scan_value(text, 0)  # our encoder's output: one JSON value
        same = end == len(text) and bool(copy == data)  # tuple != list, {1: x} != {"1": x}
        raw = text.encode("utf-8")  # a lone surrogate: UnicodeEncodeError
    except (*ENCODE_ERRORS, StopIteration) as exc:
        raise _unencodable(exc) from exc
    if not same:
        raise _unencodable(None)
    # too_deep's own first test, inlined (hot path): few brackets cannot nest too deep
    if text.count("[") + text.count("{") > MAX_DATA_DEPTH and too_deep(text, copy):
        raise EvidenceError(
            f"value nests deeper than {MAX_DATA_DEPTH} arrays/objects",
            op="encode",
            reason=EvidenceReason.UNENCODABLE,
        )
    return raw, copy
