"""EscapeMatcher.find, interval by interval, on both of its paths.

The redactor tests check what is masked; masking merges intervals, so an interval one
byte short or long, a bound off by one or a lost overlapping occurrence can still
mask the same text. Here ``find`` must return exactly the intervals an occurrence
covers (whole escapes at its ends), from the sparse path (windows around a few
escapes) and from the dense one (escape-dense text decoded whole), including
``head``/``more`` on both sides of their bounds. Mutation testing of
flux_secret/_escapes.py (docs/mutation.md) uses this file.
"""

from __future__ import annotations

import pytest

from flux_secret._escapes import ESCAPE_MAX, EscapeMatcher

SECRET = b"s3cr3t-v4lue"  # no "A": the dense padding decodes to "A"s
NAMES = ("s",)
PAD = b"%41" * 200  # 200 escapes: the sparse budget is exceeded, the dense path runs


def _matcher(*patterns: bytes) -> EscapeMatcher:
    return EscapeMatcher(list(patterns), [NAMES] * len(patterns))


def _find(m: EscapeMatcher, text: bytes, *, dense: bool) -> list[tuple[int, int]]:
    """find() on *text* (sparse) or on *text* between dense padding, as offsets of text."""
    if not dense:
        assert m._escapes(text) is not None
        return [(s, e) for s, e, names in m.find(text) if names == NAMES]
    padded = PAD + text + PAD
    assert m._escapes(padded) is None
    shift = len(PAD)
    return [(s - shift, e - shift) for s, e, names in m.find(padded) if names == NAMES]


FORMS = [
    ("first byte percent", b"%73" + SECRET[1:]),
    ("last byte percent", SECRET[:-1] + b"%65"),
    ("middle entity", SECRET[:3] + b"&#114;" + SECRET[4:]),
    ("hex entities, both cases", b"&#x73;" + SECRET[1:7] + b"&#X76;" + SECRET[8:]),
    ("every byte", b"".join(b"%%%02x" % c for c in SECRET)),
    ("upper-case hex", SECRET[:6] + b"%2D" + SECRET[7:]),
]


@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
@pytest.mark.parametrize(
    ("prefix", "suffix"),
    [(b"", b""), (b"ab ", b" yz"), (b"q" * 300, b"")],
    ids=["alone", "inside", "far-in"],
)
@pytest.mark.parametrize("form", [f[1] for f in FORMS], ids=[f[0] for f in FORMS])
def test_an_occurrence_is_reported_exactly(
    form: bytes, prefix: bytes, suffix: bytes, dense: bool
) -> None:
    m = _matcher(SECRET)
    got = _find(m, prefix + form + suffix, dense=dense)
    assert got == [(len(prefix), len(prefix) + len(form))]


@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_overlapping_occurrences_are_all_reported(dense: bool) -> None:
    """``q1q1q1`` twice in the decoded ``q1q1q1q1``, each holding an escape."""
    m = _matcher(b"q1q1q1")
    assert _find(m, b"%711q1q1%711", dense=dense) == [(0, 8), (4, 12)]
    two = _matcher(b"s3cr3t-v4", b"cr3t-v4lue")  # two patterns, overlapping
    text = b"s3%63r3t-v4lue"
    assert _find(two, text, dense=dense) == [(0, 11), (2, 14)]


@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_head_and_more_bounds(dense: bool) -> None:
    """``head``: an occurrence starting in the first ESCAPE_MAX - 1 bytes is left out;
    ``more``: one ending in the last ESCAPE_MAX - 1 bytes is."""
    m = _matcher(SECRET)
    form = b"%73" + SECRET[1:]
    edge = ESCAPE_MAX - 1

    def found(before: bytes, after: bytes, **kw: bool) -> bool:
        lead, trail = (b"", PAD) if kw.get("head") else (PAD, b"")
        if not dense:
            lead = trail = b""
        text = lead + before + form + after + trail
        start = len(lead) + len(before)
        return (start, start + len(form), NAMES) in m.find(text, **kw)

    assert found(b"x" * edge, b"", head=True)
    assert not found(b"x" * (edge - 1), b"", head=True)
    assert found(b"", b"y" * edge, more=True)
    assert not found(b"", b"y" * (edge - 1), more=True)
    assert found(b"", b"")  # neither: nothing left out at either end


def test_a_plus_is_a_space_when_a_secret_holds_one() -> None:
    phrase = b"my s3cret phrase"
    m = _matcher(phrase)
    one = b"my+s3cret+phrase"
    gap = b" " + b"z" * 500 + b" "
    text = one + gap + one + gap + one  # far apart: each needs its own window
    starts = [0, len(one + gap), 2 * len(one + gap)]
    assert [(s, e) for s, e, _ in m.find(text)] == [(a, a + 16) for a in starts]
    dense = PAD + one + PAD
    assert [(s, e) for s, e, _ in m.find(dense)] == [(len(PAD), len(PAD) + 16)]


def test_a_lone_start_byte_does_not_hide_the_escape_after_it() -> None:
    m = _matcher(b"k3y-secret-xyz")
    for lead in (b"%", b"&"):
        text = b"x" + lead + b"%6b3y-secret-xyz"
        assert [(s, e) for s, e, _ in m.find(text)] == [(2, len(text))], lead


def test_the_last_code_point_and_surrogates_decode() -> None:
    top = "\U0010ffff-secret".encode()
    m = _matcher(top)
    for text in (b"&#x10FFFF;-secret", b"&#1114111;-secret"):
        assert [(s, e) for s, e, _ in m.find(text)] == [(0, len(text))], text
    # A lone surrogate's entity decodes to its (surrogatepass) UTF-8 bytes.
    sur = EscapeMatcher([b"\xed\xa0\x80-secret-x"], [NAMES])
    assert [(s, e) for s, e, _ in sur.find(b"&#xD800;-secret-x")] == [(0, 17)]
    assert _matcher(SECRET).find(b"&#xD800; &#xDFFF;" * 3) == []


@pytest.mark.parametrize(
    ("secret", "written"),
    [
        (b"50%off-secret", b"5%30%off-secret"),  # a literal "%" the filter would misread
        (b"abcdefg%4zzz-1", b"%61bcdefg%4zzz-1"),  # ... deep in the secret, past the bleed
        (b"&amp;-secret1", b"&#38;amp;-secret1"),  # a literal "&amp;" in the secret
        (b"back\\slash-secret", b"b%61ck\\slash-secret"),  # a backslash, for the codec
    ],
)
def test_the_dense_path_finds_what_its_filter_could_misread(secret: bytes, written: bytes) -> None:
    m = _matcher(secret)
    assert [(s, e) for s, e, _ in m.find(written)] == [(0, len(written))]  # sparse
    padded = PAD + written + PAD
    assert m._escapes(padded) is None
    assert [(s - len(PAD), e - len(PAD)) for s, e, _ in m.find(padded)] == [(0, len(written))]


def test_no_patterns_hold_nothing_back() -> None:
    m = EscapeMatcher([], [])
    assert (m.longest, m.span) == (0, 0)
    assert m.find(b"%73" + SECRET[1:]) == []
    assert m.frontier(b"%41%", 100) is None


def test_patterns_and_owners_must_pair_up() -> None:
    with pytest.raises(ValueError, match="zip"):
        EscapeMatcher([SECRET, b"other-secret"], [NAMES])


@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
@pytest.mark.parametrize(
    ("pattern", "text", "where"),
    [
        # A numeric entity past U+10FFFF is text: an occurrence may start inside it.
        (b"112;-secret-x", b"&#1114112;%2Dsecret-x", (6, 21)),
        # An occurrence starting or ending inside a multi-byte character's escape covers
        # the whole escape.
        (b"\xa9-secret-xx", b"&#xE9;-secret-xx", (0, 16)),
        (b"secret-xx-\xc3", b"secret-xx-&#xE9;", (0, 16)),
        # A raw occurrence beside an escape, inside its window, is reported exactly too.
        (SECRET, SECRET + b" %41", (0, 12)),
        # Two escapes of one run, the second far from the first: its occurrence reaches
        # past the first escape's reach and still lies in the run's window.
        (SECRET, b"%41" + b"q" * 197 + b"%73" + SECRET[1:], (200, 214)),
    ],
    ids=["inside-text-entity", "starts-mid-char", "ends-mid-char", "raw-beside", "run-end"],
)
def test_interval_ends_at_the_edges_of_escapes(
    pattern: bytes, text: bytes, where: tuple[int, int], dense: bool
) -> None:
    assert _find(_matcher(pattern), text, dense=dense) == [where]


def test_the_longest_escaped_form_is_masked_at_every_stream_cut() -> None:
    """Every byte as a ten-byte entity (``&#0000115;``): the occurrence's text is the
    matcher's whole span, the most a stream must hold back for it."""
    from flux_secret import Redactor

    red = Redactor()
    red.register(SECRET.decode(), "s")
    form = b"".join(b"&#%07d;" % c for c in SECRET)
    assert len(form) == 10 * len(SECRET)
    text = b"before " + form + b" after"
    whole = red.redact_bytes(text)
    assert whole == b"before [redacted] after"
    for cut in range(len(text) + 1):
        stream = red.stream(bytes)
        out = stream.feed(text[:cut]) + stream.feed(text[cut:])
        tail = stream.flush()
        assert isinstance(tail, bytes)
        assert out + tail == whole, cut
