"""Streaming: any chunking leaks nothing and equals whole-text redaction."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux_secret import RedactionError, RedactionReason, Redactor, StreamRedactor, variants

from ._fixtures import SECRETS, all_patterns, make_redactor

RED = make_redactor()
PATTERNS = all_patterns()
PREFIX, SUFFIX = b"log: user=bob a\xc3\xa9 msg=", b" end\xe2\x82\xac.\n"


def _run(red: Redactor, chunks: list[bytes] | list[str]) -> str | bytes:
    stream = red.stream()
    out: list[Any] = [stream.feed(c) for c in chunks]  # type: ignore[type-var]
    out.append(stream.flush())
    return "".join(out) if isinstance(chunks[0], str) else b"".join(out)


def _assert_no_pattern(out: bytes) -> None:
    for name, pattern in PATTERNS:
        assert pattern not in out, f"{name} variant leaked"


@pytest.mark.parametrize(
    ("name", "pattern"), PATTERNS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(PATTERNS)]
)
def test_every_two_chunk_split_bytes(name: str, pattern: bytes) -> None:
    data = PREFIX + pattern + SUFFIX
    whole = RED.redact_bytes(data)
    _assert_no_pattern(whole)
    for i in range(len(data) + 1):
        assert _run(RED, [data[:i], data[i:]]) == whole


@pytest.mark.parametrize(
    ("name", "pattern"), PATTERNS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(PATTERNS)]
)
def test_every_two_chunk_split_text(name: str, pattern: bytes) -> None:
    try:
        text = (PREFIX + pattern + SUFFIX).decode("utf-8")
    except UnicodeDecodeError:
        text = (PREFIX + pattern + SUFFIX).decode("utf-8", "surrogateescape")
    whole = RED.redact(text)
    _assert_no_pattern(whole.encode("utf-8", "surrogatepass"))
    for i in range(len(text) + 1):
        assert _run(RED, [text[:i], text[i:]]) == whole


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [b""]


pieces = st.lists(
    st.one_of(
        st.sampled_from([p for _, p in PATTERNS]),
        st.binary(max_size=12),
        st.sampled_from([b" ", b"\n", b"=", b"\xc3\xa9", b"[redacted]"]),
    ),
    min_size=1,
    max_size=12,
)


@given(parts=pieces, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_random_chunkings_bytes(parts: list[bytes], cuts: list[int]) -> None:
    data = b"".join(parts)
    whole = RED.redact_bytes(data)
    assert _run(RED, _chunks(data, cuts)) == whole
    for part in parts:
        if any(part == p for _, p in PATTERNS):
            assert part not in whole


@given(parts=pieces, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_random_chunkings_text(parts: list[bytes], cuts: list[int]) -> None:
    text = b"".join(parts).decode("utf-8", "surrogateescape")
    whole = RED.redact(text)
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    chunks = [text[a:b] for a, b in itertools.pairwise(points)] or [""]
    assert _run(RED, chunks) == whole


@given(
    parts=st.lists(
        st.sampled_from([b"abcdefgh", b"fghijklm", b"klmnopqr", b"-", b"x" * 7]), max_size=40
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=40),
)
def test_overlapping_and_adjacent_secrets_chunked(parts: list[bytes], cuts: list[int]) -> None:
    red = Redactor(named_marker="<{names}>")
    for value in ("abcdefgh", "fghijklm", "klmnopqr"):
        red.register(value, value[:3])
    data = b"".join(parts) or b"-"
    whole = red.redact_bytes(data)
    for raw in (b"abcdefgh", b"fghijklm", b"klmnopqr"):
        assert raw not in whole
    stream = red.stream()
    out = b"".join(stream.feed(c) for c in _chunks(data, cuts)) + stream.flush()  # type: ignore[operator]
    assert out == whole


def test_hold_back_is_bounded_by_longest_pattern() -> None:
    stream = RED.stream()
    longest = max(len(p) for _, p in PATTERNS)
    for i in range(2000):
        stream.feed(b"noise line %d with no secret in it\n" % i)
        assert stream.held_back <= longest - 1
    text_stream = RED.stream()
    for i in range(500):
        text_stream.feed(f"ligne {i} é 秘 ü\n")
        assert text_stream.held_back <= longest - 1 + 3


def test_long_run_of_adjacent_secrets_keeps_memory_bounded() -> None:
    red = Redactor()
    red.register("repeat-me-1234", "r")
    stream = red.stream()
    out = [stream.feed(b"start ")]
    for _ in range(5000):
        out.append(stream.feed(b"repeat-me-1234"))
        assert stream.held_back <= len(b"repeat-me-1234") * 2  # pattern (base64 longest) - 1
        assert len(stream._buf) < 200  # only the tail, never the masked run
    out.append(stream.feed(b" end"))
    out.append(stream.flush())  # type: ignore[arg-type]
    assert b"".join(out) == b"start [redacted] end"
    assert stream.report().as_dict() == {"r": 1}


def test_secret_registered_late_is_masked_if_not_yet_emitted() -> None:
    red = Redactor()
    stream = red.stream()
    first = stream.feed("starting\nstep 1 ok\n")
    red.register("late-Secret-99", "late")
    rest = stream.feed("token=late-Secret-99\ndone\n")
    out = first + rest + stream.flush()  # type: ignore[operator]
    assert out == "starting\nstep 1 ok\ntoken=[redacted]\ndone\n"


def test_secret_registered_between_the_halves_of_a_split_secret() -> None:
    red = Redactor()
    red.register("x" * 40, "long")  # makes the stream hold back 39+ bytes
    stream = red.stream()
    first = stream.feed(b"prefix late-Secr")
    red.register("late-Secret-99", "late")
    out = first + stream.feed(b"et-99 suffix") + stream.flush()  # type: ignore[operator]
    assert b"late-Secret-99" not in out
    assert out == b"prefix [redacted] suffix"


def test_closed_and_mixed_types() -> None:
    stream = StreamRedactor(RED)
    stream.feed("text")
    with pytest.raises(RedactionError) as info:
        stream.feed(b"bytes")
    assert info.value.reason is RedactionReason.MIXED_TYPES
    stream.flush()
    with pytest.raises(RedactionError) as info:
        stream.feed("more")
    assert info.value.reason is RedactionReason.CLOSED
    with pytest.raises(RedactionError):
        stream.flush()
    with pytest.raises(TypeError):
        RED.stream().feed(42)  # type: ignore[type-var]


def test_stream_report_equals_whole_text_report() -> None:
    value = SECRETS["ascii"]
    assert isinstance(value, str)
    text = f"a {value} b {value}{value} c"
    whole = make_redactor()
    whole.redact(text)
    red = make_redactor()
    stream = red.stream()
    for ch in text:
        stream.feed(ch)
    stream.flush()
    assert stream.report() == whole.report() == red.report()
    assert stream.report().as_dict() == {"ascii": 2}


_SECRET_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=_-?&%é秘"


@given(
    values=st.lists(
        st.text(alphabet=_SECRET_ALPHABET, min_size=6, max_size=20).filter(
            lambda v: len(v.encode()) >= 8
        ),
        min_size=1,
        max_size=4,
        unique=True,
    ),
    layout=st.lists(
        st.tuples(st.integers(min_value=0, max_value=200), st.binary(max_size=8)), max_size=8
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=20),
)
def test_generated_secrets_never_leak_and_stream_equals_whole(
    values: list[str], layout: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    red = Redactor()
    forms: list[bytes] = []
    for value in values:
        red.register(value)
        forms += variants(value.encode(), min_length=8)
    data = b"|".join(forms[i % len(forms)] + noise for i, noise in layout) or b"-"
    whole = red.redact_bytes(data)
    for form in forms:
        assert form not in whole
    stream = red.stream()
    out = b"".join(stream.feed(c) for c in _chunks(data, cuts)) + stream.flush()  # type: ignore[operator]
    assert out == whole
