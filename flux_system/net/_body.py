"""Response bodies: the byte cap and bounded decoding (sans-IO, shared by both clients).

The guarded clients read the raw bytes off the wire and feed them to a
:class:`BodyCollector`. It keeps at most ``cap`` bytes of the body the caller gets and
says when to stop reading. One layer of ``gzip``/``deflate`` is undone in bounded steps
(never more than :data:`DECODE_STEP` bytes inflated per call), so a compression bomb is
cut at the cap without ever being inflated into memory. Stacked codings
(``gzip, gzip``) and codings we do not decode (``br``, ``zstd``...) are handed out as
received, with their ``Content-Encoding`` header kept: decoding them layer by layer
cannot be bounded by the cap (a layer may inflate to input that yields nothing).
"""

from __future__ import annotations

import zlib
from typing import Final, final

import httpx

__all__ = ["DECODE_STEP", "BodyCollector", "decodable_coding"]

#: Bytes inflated per zlib call: the most a hostile body puts in memory at once.
DECODE_STEP: Final = 64 * 1024
#: Raw bytes read for a decoded body: at most twice the cap plus one step (a stream of
#: empty deflate blocks decodes to nothing, however long it is).
_RAW_SLACK: Final = DECODE_STEP
_WBITS: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 0}


def decodable_coding(header: str | None) -> str | None:
    """The one coding to undo for a ``Content-Encoding`` *header*, or ``None``.

    ``None`` means "hand the bytes out as received": no header, only ``identity``,
    stacked codings, or a coding we do not decode.
    """
    if header is None:
        return None
    codings = [c for c in (p.strip().lower() for p in header.split(",")) if c != "identity"]
    if len(codings) != 1 or codings[0] not in _WBITS:
        return None
    return codings[0]


@final
class BodyCollector:
    """Collect up to *cap* bytes of a body from its raw chunks.

    Guarantee: memory held is at most *cap* plus one raw chunk plus :data:`DECODE_STEP`;
    :meth:`feed` returns True as soon as nothing more is needed (the cap is reached —
    ``truncated`` is then set — or a decoded body's raw input exceeded twice the cap).
    Not guaranteed: that the server's ``Content-Length`` was honest.

    Raises (from :meth:`feed`):
        httpx.DecodingError: the body is not valid for its ``Content-Encoding``.
    """

    __slots__ = (
        "_cap",
        "_chunks",
        "_first",
        "_inflater",
        "_raw",
        "_raw_cap",
        "_size",
        "coding",
        "truncated",
    )

    def __init__(self, cap: int, content_encoding: str | None) -> None:
        self._cap = cap
        self._chunks: list[bytes] = []
        self._size = 0
        self._raw = 0
        self._raw_cap = 2 * cap + _RAW_SLACK
        self.coding = decodable_coding(content_encoding)
        self._inflater = None if self.coding is None else _inflater(self.coding, raw=False)
        self._first = True
        self.truncated = False

    @property
    def decoded(self) -> bool:
        """True when a ``Content-Encoding`` was undone (the header no longer applies)."""
        return self.coding is not None

    def feed(self, chunk: bytes) -> bool:
        """Take one raw chunk; True when reading should stop."""
        if self._inflater is None:
            room = self._cap - self._size
            if len(chunk) > room:
                self._chunks.append(chunk[:room])
                self.truncated = True
                return True
            self._chunks.append(chunk)
            self._size += len(chunk)
            return False
        self._raw += len(chunk)
        if self._raw > self._raw_cap:
            self.truncated = True
            return True
        return self._inflate(chunk)

    def _inflate(self, data: bytes) -> bool:
        inflater = self._inflater
        assert inflater is not None
        while data and not inflater.eof:
            room = self._cap - self._size
            try:
                out = inflater.decompress(data, min(DECODE_STEP, room + 1))
            except zlib.error as exc:
                if self._first and self.coding == "deflate":  # no zlib header: raw deflate
                    self._first = False
                    self._inflater = inflater = _inflater("deflate", raw=True)
                    continue
                raise httpx.DecodingError(f"invalid {self.coding} body: {exc}") from exc
            self._first = False
            data = inflater.unconsumed_tail
            if len(out) > room:
                self._chunks.append(out[:room])
                self.truncated = True
                return True
            self._chunks.append(out)
            self._size += len(out)
        return False

    def body(self) -> bytes:
        """The collected body (decoded when :attr:`decoded`)."""
        return b"".join(self._chunks)


def _inflater(coding: str, *, raw: bool) -> zlib._Decompress:
    return zlib.decompressobj(-zlib.MAX_WBITS if raw else _WBITS[coding] or zlib.MAX_WBITS)
