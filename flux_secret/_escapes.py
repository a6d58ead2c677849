"""Percent-encoded and XML/HTML-escaped secrets, matched by decoding around escapes.

An encoder may leave any set of characters unescaped: Go's ``url.PathEscape`` keeps
``+``, JavaScript's ``encodeURIComponent`` keeps ``'``, Java's ``URLEncoder`` keeps
``*`` and writes a space as ``+``; HTML encoders differ in which characters they
escape and whether ``'`` is ``&#39;``, ``&#x27;`` or ``&apos;``. The forms of one
secret are therefore every choice, byte by byte, of literal or escaped — too many to
list. Instead the text is decoded where it holds escapes, and the decoded text is
searched for the raw secrets:

- an *escape* is ``%XX`` (either hex case), ``&lt;`` ``&gt;`` ``&amp;`` ``&quot;``
  ``&apos;``, ``&#D;`` (1 to 7 decimal digits) or ``&#xH;`` (1 to 6 hex digits, ``x``
  either case) naming a code point, decoded to the code point's UTF-8 bytes;
- when some registered secret holds a space, ``+`` and space are one symbol on both
  sides (the text's ``+`` may be a space written by a form encoder);
- only windows of the text around escapes are decoded and searched: a match that
  holds no escape is a raw match, which the main automaton finds.

Escapes never overlap or nest (``%`` and ``&`` occur in no escape but as its first
byte), so decoding from any position gives the same escapes, except for one cut in
the middle, which :meth:`EscapeMatcher.find` accounts for with *head* and *more*.
"""

from __future__ import annotations

import bisect
import codecs
import itertools
import re
import typing
from collections.abc import Sequence

import ahocorasick_rs

from flux_secret._matcher import Interval

__all__ = ["ESCAPE_MAX", "EscapeMatcher"]

ESCAPE_MAX = 10  # longest escape: "&#1114111;" or "&#x10FFFF;" (no longer zero runs)
_ENTITY = re.compile(rb"&(?:lt|gt|amp|quot|apos|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")
_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}|" + _ENTITY.pattern)
_NAMED = {b"&lt;": b"<", b"&gt;": b">", b"&amp;": b"&", b"&quot;": b'"', b"&apos;": b"'"}
_PLUS_AS_SPACE = bytes.maketrans(b"+", b" ")
# Escape-dense text (URL-encoded data, HTML) is decoded whole by one C-level split:
# faster than windows once escape starts are closer than this on average.
_SPARSE_GAP = 256
_SPLIT = re.compile(b"(" + _ESCAPE.pattern + b")")
_SPLIT_PLUS = re.compile(b"(" + _ESCAPE.pattern + rb"|\+)")
_CACHE_MAX = 1 << 16  # decoded escapes remembered (numeric entities are many)
# The dense filter's decoding may merge up to this many bytes at the start of an
# occurrence into the escape before it ("amp;" after "&#38;", two hex digits after a
# "%"), so it searches for the patterns without their first _BLEED bytes.
_BLEED = 4
# Entities the filter replaces with bytes.replace, before any numeric entity left and
# "&amp;" last: none of these yields a "&", so none is decoded twice.
_FAST_ENTITIES = (
    *((e, d) for e, d in _NAMED.items() if e != b"&amp;"),
    *((b"&#%d;" % c, bytes([c])) for c in b"<>\"'"),
    *((b"&#x%x;" % c, bytes([c])) for c in b"<>\"'"),
    *((b"&#X%X;" % c, bytes([c])) for c in b"<>\"'"),
)
_NUMERIC = re.compile(rb"&#(?:[0-9]{1,7}|[xX][0-9A-Fa-f]{1,6});")


def _decode(escape: bytes) -> bytes | None:
    """The bytes *escape* stands for, or ``None`` for a numeric entity past U+10FFFF."""
    if escape[:1] == b"%":
        return bytes([int(escape[1:], 16)])
    named = _NAMED.get(escape)
    if named is not None:
        return named
    body = escape[2:-1]
    point = int(body[1:], 16) if body[:1] in b"xX" else int(body)
    if point > 0x10FFFF:
        return None
    return chr(point).encode("utf-8", "surrogatepass")


class _Table(dict[bytes, bytes]):
    """Escape -> the bytes it stands for; an escape that is not one (``+``, a numeric
    entity past U+10FFFF) stands for itself, and is then literal text."""

    def __missing__(self, escape: bytes) -> bytes:
        decoded = _decode(escape) if escape != b"+" else None
        value = escape if decoded is None else decoded
        if len(self) < _CACHE_MAX:
            self[escape] = value
        return value


_TABLE = _Table()


@typing.final
class EscapeMatcher:
    """Find raw secrets written with any mix of literal bytes and escapes.

    Guarantee: :meth:`find` reports every occurrence of a pattern whose bytes, each
    either literal or an escape of that byte (a character's escape standing for all
    of its UTF-8 bytes), hold at least one escape; the interval covers the whole
    escapes at its ends. Work is linear in the text plus the escapes' windows.

    Not guaranteed: double encoding (``%2541``), a literal ``%`` or ``&`` that is
    followed by what reads as an escape, numeric entities with leading zeros beyond
    the lengths above, named entities other than the five XML ones. Occurrences may
    be reported more widely than needed (``+`` standing for a space, an escaped
    ``+`` matching a space): masking more is the safe side.

    Args:
        patterns: the raw secrets (distinct, non-empty).
        owners: for each pattern, the names of the secrets it belongs to.
    """

    __slots__ = ("_ac", "_filter", "_owners", "_plus", "_starts", "longest", "span")

    def __init__(self, patterns: Sequence[bytes], owners: Sequence[tuple[str, ...]]) -> None:
        self._plus = any(b" " in p for p in patterns)
        canonical: dict[bytes, set[str]] = {}
        for pattern, names in zip(patterns, owners, strict=True):
            key = pattern.translate(_PLUS_AS_SPACE) if self._plus else pattern
            canonical.setdefault(key, set()).update(names)
        keys = list(canonical)
        self._owners = [tuple(sorted(canonical[k])) for k in keys]
        self._starts = b"%&+" if self._plus else b"%&"
        self.longest = max((len(k) for k in keys), default=0)
        self.span = self.longest * ESCAPE_MAX  # the most text one decoded match can cover
        self._ac = (
            ahocorasick_rs.BytesAhoCorasick(
                keys,
                matchkind=ahocorasick_rs.MatchKind.Standard,
                implementation=ahocorasick_rs.Implementation.ContiguousNFA,
            )
            if keys
            else None
        )
        # The filter of escape-dense text (see _maybe_dense): exact only when no
        # pattern holds "%" or "&", which its C-level decoding may treat differently.
        self._filter = (
            ahocorasick_rs.BytesAhoCorasick(
                sorted({k[_BLEED:] for k in keys}),
                implementation=ahocorasick_rs.Implementation.ContiguousNFA,
            )
            if keys and not any(b"%" in k or b"&" in k for k in keys)
            else None
        )

    def _escapes(self, data: bytes) -> list[tuple[int, int, bytes]] | None:
        """``(start, end, decoded)`` of every escape in *data* (``+`` included when
        used), or ``None`` when escape starts are closer than ``_SPARSE_GAP`` apart."""
        out: list[tuple[int, int, bytes]] = []
        budget = len(data) // _SPARSE_GAP + 16
        for char in self._starts:
            pos = data.find(char)
            while pos >= 0:
                budget -= 1
                if budget < 0:
                    return None
                if char == 0x2B:  # "+": decoded by the translation, a window trigger only
                    out.append((pos, pos + 1, b"+"))
                    pos = data.find(char, pos + 1)
                    continue
                m = _ESCAPE.match(data, pos)
                if m is not None:
                    escape = m.group()
                    decoded = _TABLE[escape]
                    if decoded != escape:  # else a numeric entity past U+10FFFF: text
                        out.append((pos, m.end(), decoded))
                pos = data.find(char, pos + 1)
        out.sort()
        return out

    def find(self, data: bytes, *, head: bool = False, more: bool = False) -> list[Interval]:
        """Every decoded occurrence in *data*, as ``(start, end, names)`` into *data*.

        Args:
            head: *data* may start inside an escape (a stream's retained tail):
                occurrences starting in its first ``ESCAPE_MAX - 1`` bytes are left
                out (the caller has seen them already).
            more: more text may follow: occurrences ending in the last
                ``ESCAPE_MAX - 1`` bytes (an escape there may be incomplete) are
                left out; the caller must keep them for the next call (see
                :meth:`frontier`).
        """
        if self._ac is None:
            return []
        escapes = self._escapes(data)
        low = ESCAPE_MAX - 1 if head else 0
        high = len(data) - (ESCAPE_MAX - 1) if more else len(data)
        if escapes is None:
            return self._dense(data, (low, high)) if self._maybe_dense(data) else []
        out: list[Interval] = []
        i = 0
        while i < len(escapes):  # one window per run of escapes closer than a match
            lo = max(0, escapes[i][0] - self.span)
            j = i + 1
            while j < len(escapes) and escapes[j][0] - escapes[j - 1][1] < 2 * self.span:
                j += 1
            hi = min(len(data), escapes[j - 1][1] + self.span)
            out += self._window(data, (lo, hi), escapes[i:j], (low, high))
            i = j
        return out

    def _maybe_dense(self, data: bytes) -> bool:
        """Whether escape-dense *data* may hold an occurrence, decided at C speed.

        Entities are decoded first (the common ones by ``bytes.replace``, other
        numeric ones by one regex pass, ``&amp;`` last), then percent escapes by the
        codec of Python's ``\\x`` escapes (backslashes doubled first). Every
        occurrence the exact decoding finds then appears in this text, except that
        the escape before it may swallow its first bytes (``&#38;`` then ``amp;``
        decodes twice; a lone ``%`` takes two hex digits): hence the patterns
        without their first ``_BLEED`` bytes. It may say yes when there is none;
        the exact decoding then decides.
        """
        if self._filter is None:
            return True
        text = data
        if b"&" in text:
            for entity, char in _FAST_ENTITIES:
                if entity in text:
                    text = text.replace(entity, char)
            if b"&#" in text:
                text = _NUMERIC.sub(lambda m: _TABLE[m.group()], text)
            text = text.replace(b"&amp;", b"&")
        text = text.replace(b"\\", b"\\\\").replace(b"%", b"\\x")
        text = codecs.escape_decode(text, "replace")[0]
        if self._plus:
            text = text.translate(_PLUS_AS_SPACE)
        return bool(self._filter.find_matches_as_indexes(text))

    def _dense(self, data: bytes, bounds: tuple[int, int]) -> list[Interval]:
        """:meth:`find` over all of *data*, decoded in one split: literal runs at even
        indices, escapes at odd ones (the same escapes the windows find)."""
        assert self._ac is not None
        parts = (_SPLIT_PLUS if self._plus else _SPLIT).split(data)
        decoded = parts.copy()
        decoded[1::2] = map(_TABLE.__getitem__, parts[1::2])
        text = b"".join(decoded)
        if self._plus:
            text = text.translate(_PLUS_AS_SPACE)
        hits = self._ac.find_matches_as_indexes(text, overlapping=True)
        if not hits:
            return []
        starts = list(itertools.accumulate(map(len, parts), initial=0))
        dstarts = list(itertools.accumulate(map(len, decoded), initial=0))

        def to_text(x: int, *, end: bool) -> int:
            """Text offset of decoded byte *x* (one past it when *end*)."""
            k = bisect.bisect_right(dstarts, x) - 1
            if k % 2 and decoded[k] != parts[k]:  # inside an escape: cover all of it
                return starts[k + 1] if end else starts[k]
            return starts[k] + (x - dstarts[k]) + (1 if end else 0)

        low, high = bounds
        out: list[Interval] = []
        for pid, s, e in hits:
            ts, te = to_text(s, end=False), to_text(e - 1, end=True)
            if ts >= low and te <= high:
                out.append((ts, te, self._owners[pid]))
        return out

    def _window(
        self,
        data: bytes,
        window: tuple[int, int],
        escapes: list[tuple[int, int, bytes]],
        bounds: tuple[int, int],
    ) -> list[Interval]:
        """Decode *window* of *data* (its *escapes*); report the occurrences lying
        within *bounds*."""
        assert self._ac is not None
        lo, hi = window
        low, high = bounds
        pieces: list[bytes] = []
        dstarts: list[int] = []  # decoded offset of each escape
        dlen = 0
        pos = lo
        for start, end, decoded in escapes:
            pieces.append(data[pos:start])
            dlen += start - pos
            dstarts.append(dlen)
            pieces.append(decoded)
            dlen += len(decoded)
            pos = end
        pieces.append(data[pos:hi])
        decoded_text = b"".join(pieces)
        if self._plus:
            decoded_text = decoded_text.translate(_PLUS_AS_SPACE)

        def to_text(d: int, *, end: bool) -> int:
            """Text offset of decoded offset *d* (of the byte before *d* when *end*)."""
            x = d - 1 if end else d
            k = bisect.bisect_right(dstarts, x) - 1
            if k >= 0:
                start, stop, decoded = escapes[k]
                if x < dstarts[k] + len(decoded):  # inside escape k: cover all of it
                    return stop if end else start
                return stop + (x - dstarts[k] - len(decoded)) + (1 if end else 0)
            return lo + x + (1 if end else 0)

        out: list[Interval] = []
        owners = self._owners
        for pid, s, e in self._ac.find_matches_as_indexes(decoded_text, overlapping=True):
            ts, te = to_text(s, end=False), to_text(e, end=True)
            if ts >= low and te <= high:
                out.append((ts, te, owners[pid]))
        return out

    def frontier(self, data: bytes, end: int) -> int | None:
        """For a stream: the earliest absolute position an occurrence not yet reported
        by ``find(..., more=True)`` may start at, or ``None`` when only the raw
        automaton's own bound applies (no escape can be pending in *data*, which ends
        at absolute *end*)."""
        if self._ac is None:
            return None
        tail = data[-(self.span + ESCAPE_MAX) :]
        if not any(char in tail for char in self._starts):
            # an occurrence to come holds a future escape; before it, only literal
            # bytes, fewer than the raw secret: the raw bound covers it
            return None
        return end - (self.span + ESCAPE_MAX - 2)
