"""The secret matcher's edges: overlapping occurrences, the requested range on both
sides, the search-block boundary, interval merging and UTF-8 snapping.

These pin what ``flux_secret._matcher`` claims, one boundary at a time, so that a
one-token change to it (an off-by-one in a window, ``<`` for ``<=``) fails a test.
"""

from __future__ import annotations

import pytest

from flux_secret._matcher import _BLOCK, Matcher, merge, snap_back, snap_out


def _m(*patterns: bytes) -> Matcher:
    return Matcher(list(patterns), [(f"n{i}",) for i in range(len(patterns))])


def test_no_patterns_finds_nothing() -> None:
    m = Matcher([], [])
    assert m.longest == 0
    assert m.find(b"anything") == []


def test_every_occurrence_overlapping_ones_included() -> None:
    m = _m(b"abab", b"baba", b"ab")
    got = sorted(m.find(b"xababab"))
    assert got == [
        (1, 3, ("n2",)),
        (1, 5, ("n0",)),
        (2, 6, ("n1",)),
        (3, 5, ("n2",)),
        (3, 7, ("n0",)),
        (5, 7, ("n2",)),
    ]
    assert m.longest == 4


def test_range_start_and_stop_on_both_sides() -> None:
    m = _m(b"secret")
    data = b"..secret..secret.."  # occurrences at 2 and 10
    assert m.find(data) == [(2, 8, ("n0",)), (10, 16, ("n0",))]
    assert m.find(data, 2) == [(2, 8, ("n0",)), (10, 16, ("n0",))]
    assert m.find(data, 3) == [(10, 16, ("n0",))]  # starts before start: not reported
    assert m.find(data, 0, 11) == [(2, 8, ("n0",)), (10, 16, ("n0",))]  # read past stop
    assert m.find(data, 0, 10) == [(2, 8, ("n0",))]  # starts at stop: not reported
    assert m.find(data, 0, 3) == [(2, 8, ("n0",))]
    assert m.find(data, 0, 2) == []
    assert m.find(data, 10, 10) == []
    assert m.find(data, 0, 10**9) == m.find(data)  # stop past the end is the end


@pytest.mark.parametrize("offset", [-7, -6, -5, -1, 0, 1])
def test_an_occurrence_across_the_block_boundary_is_reported_once_whole(offset: int) -> None:
    pattern = b"0123456"
    pos = _BLOCK + offset
    data = bytearray(b"." * (_BLOCK + 64))
    data[pos : pos + len(pattern)] = pattern
    m = _m(pattern, b"zz")
    assert m.find(bytes(data)) == [(pos, pos + len(pattern), ("n0",))]
    # The same with the search starting mid-way: blocks count from the start.
    assert m.find(bytes(data), 5) == [(pos, pos + len(pattern), ("n0",))]


def test_an_occurrence_ending_the_data_at_a_block_boundary() -> None:
    pattern = b"tail-secret"
    data = b"." * (_BLOCK - len(pattern)) + pattern
    assert _m(pattern).find(data) == [(_BLOCK - len(pattern), _BLOCK, ("n0",))]
    data2 = data + b"x"
    assert _m(pattern).find(data2, 0, _BLOCK) == [(_BLOCK - len(pattern), _BLOCK, ("n0",))]


def test_owners_are_reported_per_pattern() -> None:
    m = Matcher([b"alpha1", b"beta22"], [("a", "b"), ("c",)])
    assert m.find(b"alpha1 beta22") == [(0, 6, ("a", "b")), (7, 13, ("c",))]


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], []),
        ([(0, 3, ("a",))], [(0, 3, ("a",))]),
        ([(0, 3, ("b",)), (3, 5, ("a",))], [(0, 5, ("a", "b"))]),  # adjacent: merged
        ([(0, 3, ("a",)), (4, 5, ("b",))], [(0, 3, ("a",)), (4, 5, ("b",))]),  # gap of one
        ([(2, 9, ("a",)), (0, 4, ("b",))], [(0, 9, ("a", "b"))]),  # unsorted, overlapping
        ([(0, 9, ("a",)), (2, 4, ("b",))], [(0, 9, ("a", "b"))]),  # contained: end kept
        ([(0, 0, ("a",)), (0, 2, ("b",))], [(0, 2, ("a", "b"))]),  # empty at zero
        ([(5, 7, ("b", "a")), (5, 7, ("a",))], [(5, 7, ("a", "b"))]),  # names deduplicated
        (
            [(0, 2, ("a",)), (2, 4, ("b",)), (6, 8, ("c",)), (7, 9, ("d",))],
            [(0, 4, ("a", "b")), (6, 9, ("c", "d"))],
        ),
    ],
)
def test_merge(intervals: list[tuple[int, int, tuple[str, ...]]], expected: object) -> None:
    assert merge(intervals) == expected


TEXT = "aé秘😀z".encode()  # 1, 2, 3, 4 and 1 bytes: starts at 0, 1, 3, 6, 10


@pytest.mark.parametrize(
    ("s", "e", "expected"),
    [
        (0, 1, (0, 1)),
        (1, 3, (1, 3)),
        (2, 3, (1, 3)),  # inside é: back to its start
        (2, 4, (1, 6)),  # both ends inside characters
        (4, 5, (3, 6)),
        (7, 9, (6, 10)),
        (8, 11, (6, 11)),
        (0, 11, (0, 11)),  # the whole, ends at the end
        (10, 11, (10, 11)),
    ],
)
def test_snap_out(s: int, e: int, expected: tuple[int, int]) -> None:
    assert snap_out(TEXT, (s, e, ("n",))) == (*expected, ("n",))
    # At an absolute base: the same, shifted.
    assert snap_out(TEXT, (s + 100, e + 100, ("n",)), 100) == (
        expected[0] + 100,
        expected[1] + 100,
        ("n",),
    )


def test_snap_out_never_reads_past_the_data() -> None:
    cont = b"\x80\x80\x80"  # nothing but continuation bytes
    assert snap_out(cont, (1, 2, ())) == (0, 3, ())
    assert snap_out(cont, (0, 3, ())) == (0, 3, ())


@pytest.mark.parametrize(
    ("pos", "expected"),
    [(0, 0), (1, 1), (2, 1), (3, 3), (4, 3), (5, 3), (6, 6), (9, 6), (10, 10), (11, 11)],
)
def test_snap_back(pos: int, expected: int) -> None:
    assert snap_back(TEXT, pos) == expected
    assert snap_back(TEXT, pos + 7, 7) == expected + 7


def test_snap_back_stops_at_the_first_byte() -> None:
    assert snap_back(b"\x80\x80", 1) == 0


def test_stop_is_exclusive_when_a_longer_pattern_widens_the_window() -> None:
    # The window reads longest - 1 bytes past stop; a shorter pattern starting at stop
    # lies inside it and must still not be reported (nor one at stop from start > 0).
    m = _m(b"secret", b"a-much-longer-pattern")
    data = b"..secret..secret......................"
    assert m.find(data, 0, 10) == [(2, 8, ("n0",))]
    assert m.find(data, 1, 10) == [(2, 8, ("n0",))]
    assert m.find(data, 3, 10) == []
    assert m.find(data, 3, 11) == [(10, 16, ("n0",))]


def test_block_boundary_from_a_later_start() -> None:
    pattern = b"0123456"
    start = 9
    pos = start + _BLOCK  # the first byte of the second block
    data = bytearray(b"." * (pos + 64))
    data[pos : pos + len(pattern)] = pattern
    m = _m(pattern, b"a-much-longer-pattern")
    assert m.find(bytes(data), start) == [(pos, pos + len(pattern), ("n0",))]


@pytest.mark.parametrize(
    ("data", "iv", "expected"),
    [
        (b"\xc3\xa9x", (0, 1), (0, 2)),  # ends inside the first character
        (b"\x80\x80a", (0, 0), (0, 0)),  # empty at 0: nothing to widen
        (TEXT, (11, 11), (11, 11)),  # empty at the end: never indexes past it
        (b"a\xc0\x80", (1, 2), (1, 3)),  # 0xC0 is a lead byte, never a continuation
        (b"a\xc0", (2, 2), (2, 2)),
    ],
)
def test_snap_out_edges(data: bytes, iv: tuple[int, int], expected: tuple[int, int]) -> None:
    assert snap_out(data, (*iv, ())) == (*expected, ())


def test_continuation_bytes_are_exactly_0x80_to_0xbf() -> None:
    for byte in range(256):
        data = bytes([0x61, byte])
        assert snap_back(data, 1) == (0 if 0x80 <= byte <= 0xBF else 1), byte


def test_merge_keeps_an_empty_interval_at_zero() -> None:
    assert merge([(0, 0, ("a",)), (3, 4, ("b",))]) == [(0, 0, ("a",)), (3, 4, ("b",))]
    assert merge([(0, 0, ("a",))]) == [(0, 0, ("a",))]
