"""Tamper suite: in a 200-record log every single-byte modification, every record
deletion, swap and insertion, and truncation are detected by the verifier (in-process
over the log's bytes, as ``verify`` reads them)."""

from __future__ import annotations

import itertools
import random

import pytest

from flux_evidence import (
    Head,
    InvalidEvidenceError,
    MemoryEvidenceLog,
    TamperReason,
    verify_bytes,
)

RECORDS = 200  # records in the log, genesis included
LOG_ID = "tamper-suite"


def _clock() -> itertools.count[int]:
    return itertools.count(1_700_000_000_000_000_000, 1_000)


def _build(n_user: int, *, tail: tuple[str, dict[str, object]] | None = None) -> bytes:
    ticks = _clock()
    log = MemoryEvidenceLog(clock=lambda: next(ticks), log_id=LOG_ID)
    for i in range(n_user):
        log.append("tick", {"i": i}, session="s", turn=i)
    if tail is not None:
        log.append(tail[0], tail[1], session="s")
    return log.to_bytes()


DATA = _build(RECORDS - 1)
LINES = DATA.splitlines(keepends=True)
HEAD = verify_bytes(DATA).head


def _fails(data: bytes, head: Head | None = HEAD) -> InvalidEvidenceError:
    with pytest.raises(InvalidEvidenceError) as info:
        verify_bytes(data, expect_head=head)
    return info.value


def test_untampered_log_verifies() -> None:
    assert len(LINES) == RECORDS
    assert HEAD.size == RECORDS
    result = verify_bytes(DATA, expect_head=HEAD)
    assert result.head == HEAD and result.torn_bytes == 0 and result.log_id == LOG_ID


def test_every_single_byte_modification_is_detected() -> None:
    line_of: list[int] = []
    for index, line in enumerate(LINES):
        line_of.extend([index] * len(line))
    buf = bytearray(DATA)
    undetected: list[int] = []
    wrong_seq: list[tuple[int, int | None, int]] = []
    for pos in range(len(buf)):
        original = buf[pos]
        buf[pos] = original ^ 0x01
        try:
            verify_bytes(bytes(buf), expect_head=HEAD)
        except InvalidEvidenceError as exc:
            if exc.seq != line_of[pos]:
                wrong_seq.append((pos, exc.seq, line_of[pos]))
        else:
            undetected.append(pos)
        buf[pos] = original
    assert undetected == []
    assert wrong_seq == []


def test_byte_values_beyond_one_bit_flip() -> None:
    """Every replacement value at a sample of positions (structural bytes included)."""
    rng = random.Random(7)
    positions = [0, 1, len(LINES[0]) - 1, len(DATA) - 1, *rng.sample(range(len(DATA)), 40)]
    for pos in positions:
        for value in range(256):
            if value == DATA[pos]:
                continue
            _fails(DATA[:pos] + bytes([value]) + DATA[pos + 1 :])


def test_final_newline_modification_needs_and_uses_expected_head() -> None:
    changed = DATA[:-1] + b" "
    # Without a head, a last line lacking its newline is an in-flight append: the
    # verifier reports it as torn, not verified.
    assert verify_bytes(changed).torn_bytes == len(LINES[-1])
    exc = _fails(changed)
    assert exc.reason is TamperReason.TRUNCATED and exc.seq == RECORDS - 1


@pytest.mark.parametrize("index", range(RECORDS))
def test_every_record_deletion(index: int) -> None:
    exc = _fails(b"".join(LINES[:index] + LINES[index + 1 :]))
    if index == RECORDS - 1:
        assert exc.reason is TamperReason.TRUNCATED
    else:
        assert exc.reason is TamperReason.DELETED
    assert exc.seq == index


def test_every_adjacent_swap() -> None:
    for i in range(RECORDS - 1):
        lines = list(LINES)
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
        exc = _fails(b"".join(lines))
        assert (exc.reason, exc.seq) == (TamperReason.REORDERED, i)


def test_distant_swaps() -> None:
    rng = random.Random(11)
    for _ in range(200):
        i, j = sorted(rng.sample(range(RECORDS), 2))
        lines = list(LINES)
        lines[i], lines[j] = lines[j], lines[i]
        exc = _fails(b"".join(lines))
        assert (exc.reason, exc.seq) == (TamperReason.REORDERED, i)


def test_every_insertion_of_a_copied_record() -> None:
    for position in range(RECORDS + 1):
        for source in {0, max(position - 1, 0), min(position, RECORDS - 1), RECORDS - 1}:
            lines = list(LINES)
            lines.insert(position, LINES[source])
            exc = _fails(b"".join(lines), head=None)
            assert exc.reason is TamperReason.INSERTED
            assert exc.seq in (position, position + 1)


@pytest.mark.parametrize("position", [1, 2, 50, 100, 198, 199])
def test_insertion_of_a_forged_correctly_chained_record(position: int) -> None:
    # A record chained exactly like the one it displaces (same log id, same history).
    forged = _build(position - 1, tail=("forged", {"evil": True})).splitlines(keepends=True)[-1]
    lines = list(LINES)
    lines.insert(position, forged)
    exc = _fails(b"".join(lines))
    assert (exc.reason, exc.seq) == (TamperReason.INSERTED, position + 1)


def test_insertion_of_garbage_lines() -> None:
    for junk in (b"\n", b"{}\n", b"null\n", b" \n", LINES[3].rstrip(b"\n") + b" \n"):
        lines = list(LINES)
        lines.insert(5, junk)
        exc = _fails(b"".join(lines))
        assert (exc.reason, exc.seq) == (TamperReason.BAD_JSON, 5)


def test_truncation_against_expected_head() -> None:
    offsets = set(itertools.accumulate(len(line) for line in LINES[:-1]))  # line boundaries
    offsets |= {0, *range(len(LINES[0]))}  # every byte of the first line
    start = len(DATA) - sum(len(line) for line in LINES[-3:])
    offsets |= set(range(start, len(DATA)))  # every byte of the last three lines
    for cut in sorted(offsets):
        exc = _fails(DATA[:cut])
        assert exc.reason is TamperReason.TRUNCATED
        assert exc.seq == DATA[:cut].count(b"\n")


def test_rewrite_against_expected_head() -> None:
    # The same history with a different last record: a valid chain, but not the head.
    rewritten = _build(RECORDS - 2, tail=("tick", {"i": "rewritten"}))
    assert verify_bytes(rewritten).head.size == RECORDS
    exc = _fails(rewritten)
    assert (exc.reason, exc.seq) == (TamperReason.MODIFIED, RECORDS - 1)


def test_non_canonical_but_rehashed_line_is_bad_json() -> None:
    # Whitespace inserted: even if someone recomputed hashes, a non-canonical line fails.
    line = LINES[4].replace(b'"kind":', b'"kind": ', 1)
    exc = _fails(b"".join([*LINES[:4], line, *LINES[5:]]))
    assert (exc.reason, exc.seq) == (TamperReason.BAD_JSON, 4)
