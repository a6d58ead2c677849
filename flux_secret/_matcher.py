"""One pass over bytes for every pattern of every secret, and interval merging.

The matcher is an Aho-Corasick automaton (``ahocorasick_rs``, see
docs/decisions/0050-native-aho-corasick.md) over the byte patterns of all registered
secrets, searched in *overlapping* mode: every occurrence of every pattern is reported,
so the union of all of them can be masked (a leftmost-longest search would skip a
match that starts inside another and runs past its end, leaking its tail).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sequence

import ahocorasick_rs

__all__ = ["Interval", "Matcher", "merge", "snap_back", "snap_out"]

# A merged interval: absolute [start, end) and the names of what matched inside it.
Interval = tuple[int, int, tuple[str, ...]]

_BLOCK = 4 << 20  # bytes searched per call: bounds the list of raw hits held at once
_DFA_MAX_PATTERN_BYTES = 512 << 10  # a DFA costs ~400x its pattern bytes in memory: cap it


@typing.final
class Matcher:
    """All occurrences of a fixed set of byte patterns, each owned by secret names.

    Guarantee: :meth:`find` reports every occurrence (overlapping ones included) of
    every pattern that starts in the requested range; the work is linear in the bytes
    searched plus the number of occurrences.

    Not guaranteed: a pattern repeated with a short period (``aaaaaaaa``) occurs at
    every position of a run of it; such a run costs time in proportion to its length
    times the number of such patterns (memory stays bounded by ``_BLOCK``).

    Args:
        patterns: distinct non-empty byte patterns.
        owners: for each pattern, the names of the secrets it belongs to.
    """

    __slots__ = ("_ac", "_owners", "longest")

    def __init__(self, patterns: Sequence[bytes], owners: Sequence[tuple[str, ...]]) -> None:
        self._owners = tuple(owners)
        self.longest = max((len(p) for p in patterns), default=0)
        if not patterns:
            self._ac = None
            return
        total = sum(len(p) for p in patterns)
        implementation = (
            ahocorasick_rs.Implementation.DFA
            if total <= _DFA_MAX_PATTERN_BYTES
            else ahocorasick_rs.Implementation.ContiguousNFA
        )
        self._ac = ahocorasick_rs.BytesAhoCorasick(
            list(patterns),
            matchkind=ahocorasick_rs.MatchKind.Standard,
            implementation=implementation,
        )

    def find(self, data: bytes, start: int = 0, stop: int | None = None) -> list[Interval]:
        """Return ``(s, e, names)`` for every occurrence with ``start <= s < stop``.

        Bytes up to ``stop + longest - 1`` are read so that an occurrence starting
        before *stop* is reported whole.
        """
        ac = self._ac
        if ac is None:
            return []
        end = len(data) if stop is None else min(stop, len(data))
        owners = self._owners
        out: list[Interval] = []
        view = memoryview(data)
        lo = start
        while lo < end:
            hi = min(end, lo + _BLOCK)
            window = view[lo : min(len(data), hi + self.longest - 1)]
            limit = hi - lo
            for pid, s, e in ac.find_matches_as_indexes(window, overlapping=True):
                if s < limit:
                    out.append((lo + s, lo + e, owners[pid]))
            lo = hi
        return out


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Merge overlapping **and adjacent** intervals; names are unioned, sorted."""
    ordered = sorted(intervals, key=lambda iv: (iv[0], iv[1]))
    out: list[Interval] = []
    cur_s = cur_e = -1
    names: set[str] = set()
    for s, e, owners in ordered:
        if s <= cur_e:
            cur_e = max(cur_e, e)
            names.update(owners)
            continue
        if cur_e >= 0:
            out.append((cur_s, cur_e, tuple(sorted(names))))
        cur_s, cur_e, names = s, e, set(owners)
    if cur_e >= 0:
        out.append((cur_s, cur_e, tuple(sorted(names))))
    return out


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


def snap_out(data: bytes, iv: Interval, base: int = 0) -> Interval:
    """Widen an interval over *data* (at absolute *base*) to UTF-8 character bounds.

    A pattern that is not itself UTF-8 text may match inside a character; masking a
    few more bytes keeps the result decodable and never unmasks anything.
    """
    s, e, names = iv
    i, j = s - base, e - base
    while 0 < i < len(data) and _is_continuation(data[i]):
        i -= 1
    while 0 < j < len(data) and _is_continuation(data[j]):
        j += 1
    return (base + i, base + j, names)


def snap_back(data: bytes, pos: int, base: int = 0) -> int:
    """Move an absolute cut position back to the start of the character it is in."""
    i = pos - base
    while 0 < i < len(data) and _is_continuation(data[i]):
        i -= 1
    return base + i
