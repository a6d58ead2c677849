"""Streaming redaction: chunks in, redacted chunks out, never split around a secret."""

from __future__ import annotations

import typing
from typing import AnyStr

from flux_secret._detect import LOOKBEHIND, detect
from flux_secret._escapes import ESCAPE_MAX
from flux_secret._exceptions import RedactionError, RedactionReason
from flux_secret._matcher import Interval, merge, snap_back, snap_out
from flux_secret._report import RedactionReport, _Tally

if typing.TYPE_CHECKING:
    from flux_secret._redactor import Redactor

__all__ = ["StreamRedactor"]

_UTF8_TAIL = 3  # a cut moved back to a character start moves at most this far
# With detectors the retained window is up to ~16 KiB (a PEM body): re-deciding it for
# every tiny chunk (a pty writing byte by byte) would cost O(window) per byte, so new
# input is decided in steps of at least this many bytes.
_DETECT_STEP = 4096
# Bytes kept before the frontier: a detector's look-behind, and an escape cut at the
# start of the retained bytes (EscapeMatcher.find(head=True) skips that many).
_KEEP_BEHIND = max(LOOKBEHIND, ESCAPE_MAX - 1)


@typing.final
class StreamRedactor:
    """Redact a stream chunk by chunk with the registry of a :class:`Redactor`.

    ``feed(chunk)`` returns the redacted output that is already decided; ``flush()``
    returns the rest and closes the stream. *kind* (``str`` or ``bytes``) fixes the
    mode from the start; without it the first chunk fixes it: ``str`` chunks give
    ``str`` output, ``bytes`` chunks give ``bytes``.

    Guarantee: for any chunking, the concatenation of every ``feed`` result and
    ``flush()`` equals whole-text redaction of the concatenated input (same markers,
    same report) with an unchanged registry. Output never contains a cut inside a
    match: a secret split across chunks is masked. Raw input not yet emitted is at
    most ``longest pattern - 1`` bytes (in ``str`` mode plus up to 3 to stay on a
    character boundary; while a percent or entity escape lies in the last ten
    times the longest raw secret's length, up to that much, as an escaped secret is
    up to ten times longer than itself; with detectors, the longest detector's ``max_length`` plus
    4 KiB, as input is then decided in steps of 4 KiB so that tiny chunks cost no
    more than large ones); a masked region still being extended is kept as a
    position and its names, never as bytes, so memory stays bounded whatever the
    input.

    Not guaranteed: a secret registered after part of it was already emitted cannot
    be recalled (register before output can contain it — :class:`SecretResolver`
    does); bytes held back are not emitted before ``flush()``. Not thread-safe: one
    stream belongs to one reader.

    Raises:
        TypeError: *kind* is neither ``str``, ``bytes`` nor ``None``.
    """

    def __init__(self, redactor: Redactor, kind: type[str] | type[bytes] | None = None) -> None:
        if kind not in (str, bytes, None):
            raise TypeError("kind must be str, bytes or None")
        self._redactor = redactor
        self._text: bool | None = None if kind is None else kind is str
        self._buf = b""
        self._base = 0  # absolute offset of _buf[0]
        self._out = 0  # absolute offset up to which input is emitted or masked
        self._open: Interval | None = None  # a masked region that may still grow
        self._pending: list[Interval] = []  # accepted detector spans not yet emitted
        self._positions: list[int] = []  # per detector: absolute resume offset
        self._closed = False
        self._fresh = 0  # bytes received since the last decision
        self._tally = _Tally()

    def feed(self, chunk: AnyStr) -> AnyStr:
        """Add *chunk*; return the output decided so far (possibly empty), same type.

        Raises:
            RedactionError: ``CLOSED`` after :meth:`flush`, ``MIXED_TYPES`` when the
                chunk type differs from the first chunk's.
            TypeError: *chunk* is neither str nor bytes.
        """
        data = self._accept(chunk)
        self._buf += data
        self._fresh += len(data)
        if self._redactor._snapshot().detectors and self._fresh < _DETECT_STEP:
            return typing.cast(AnyStr, "" if self._text else b"")
        self._fresh = 0
        return typing.cast(AnyStr, self._advance(final=False))

    def flush(self) -> str | bytes:
        """Return the rest of the output and close the stream, in the stream's type:
        ``str`` in ``str`` mode (even with no chunk fed), ``bytes`` in ``bytes`` mode
        or when neither *kind* nor a chunk ever fixed the mode.

        Raises:
            RedactionError: ``CLOSED`` when already flushed.
        """
        if self._closed:
            raise RedactionError("stream already flushed", reason=RedactionReason.CLOSED)
        out = self._advance(final=True)
        self._closed = True
        self._buf = b""
        return out

    def report(self) -> RedactionReport:
        """Counts of masked regions per name emitted by this stream so far."""
        return self._tally.report()

    @property
    def held_back(self) -> int:
        """Raw input bytes received but neither emitted nor known to be masked."""
        return self._base + len(self._buf) - self._out

    def _accept(self, chunk: str | bytes | bytearray | memoryview) -> bytes:
        if self._closed:
            raise RedactionError("stream already flushed", reason=RedactionReason.CLOSED)
        if isinstance(chunk, str):
            is_text = True
            data = chunk.encode("utf-8", "surrogatepass")
        elif isinstance(chunk, bytes | bytearray | memoryview):
            is_text = False
            data = bytes(chunk)
        else:
            raise TypeError(f"chunk must be str or bytes, not {type(chunk).__name__}")
        if self._text is None:
            self._text = is_text
        elif self._text != is_text:
            raise RedactionError(
                "chunk type differs from the stream's", reason=RedactionReason.MIXED_TYPES
            )
        return data

    def _advance(self, *, final: bool) -> str | bytes:
        red = self._redactor
        snap = red._snapshot()
        data, base, text = self._buf, self._base, bool(self._text)
        end = base + len(data)
        if len(self._positions) != len(snap.detectors):
            self._positions = [self._out] * len(snap.detectors)
        hits = snap.find(data, head=base > 0, more=not final)
        found = [(base + s, base + e, n) for s, e, n in hits]
        if snap.detectors:
            self._pending += detect(snap.dset, data, base, self._positions, final=final)
            found += self._pending
        if text:
            found = [snap_out(data, iv, base) for iv in found]
        if final:
            frontier = end
        else:  # every match not yet seen starts at or after the frontier
            frontier = snap.frontier(data, end)
            if snap.detectors:
                frontier = min(frontier, min(self._positions) - _UTF8_TAIL)
            if text:
                frontier = snap_back(data, frontier, base)
        cut = max(frontier, self._out)  # a late, longer secret cannot recall output
        out = self._out
        pool = [(max(s, out), e, n) for s, e, n in found if e > out]
        if self._open is not None:
            pool.append(self._open)
        pieces: list[bytes] = []
        done: list[tuple[str, ...]] = []
        pos, opened = out, None
        for s, e, names in merge(pool):
            if s >= cut:
                break
            if s > pos:
                pieces.append(data[pos - base : s - base])
            if e >= cut and not final:
                opened = (s, e, names)
                break
            pieces.append(red._marker_for(names))
            done.append(names)
            pos = e
        if opened is None and cut > pos:
            pieces.append(data[pos - base : cut - base])
        self._open, self._out = opened, cut
        self._pending = [iv for iv in self._pending if iv[1] > cut]
        keep = max(base, min(frontier, end) - _KEEP_BEHIND)
        self._buf, self._base = data[keep - base :], keep
        if done:
            self._tally.add(done)
            red._tally.add(done)
        joined = b"".join(pieces)
        return joined.decode("utf-8", "surrogatepass") if text else joined
