"""The detection layer: vectors, bounded match length, stream equivalence."""

from __future__ import annotations

import itertools
import re
import re._parser as sre_parse  # type: ignore[import-not-found]  # reports width bounds
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux_secret import DEFAULT_DETECTORS, Detector, Redactor
from tests._vectors import load_vectors

CASES = load_vectors("flux_secret", "detect")
RED = Redactor(detectors=DEFAULT_DETECTORS)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_detect_vectors(case: dict[str, Any]) -> None:
    out = RED.redact(case["text"])
    for needle in case["must_not_contain"]:
        assert needle not in out
    if "expect" in case:
        assert out == case["expect"]
    if case["detector"] != "none":
        assert Redactor(detectors=DEFAULT_DETECTORS).redact(case["text"]) != case["text"]
        names = set(_fresh_report(case["text"]))
        assert f"detected:{case['detector']}" in names
    assert Redactor().redact(case["text"]) == case["text"]  # off by default


def _fresh_report(text: str) -> dict[str, int]:
    red = Redactor(detectors=DEFAULT_DETECTORS)
    red.redact(text)
    return red.report().as_dict()


@pytest.mark.parametrize("det", DEFAULT_DETECTORS, ids=[d.name for d in DEFAULT_DETECTORS])
def test_declared_max_length_bounds_the_regex(det: Detector) -> None:
    _, high = sre_parse.parse(det.pattern.pattern, det.pattern.flags).getwidth()
    assert high <= det.max_length
    assert high < 2**20  # bounded at all (an unbounded repeat reports MAXREPEAT)


def test_long_value_is_masked_beyond_the_limit() -> None:
    text = "password=" + "v" * 4000 + " after"
    assert RED.redact(text) == "password=[redacted] after"
    # Past the documented 4096-byte limit the match ends; the rest is not detected.
    assert RED.redact("password=" + "v" * 5000) == "password=[redacted]" + "v" * 904


def test_registration_and_detection_combine() -> None:
    red = Redactor(detectors=DEFAULT_DETECTORS, named_marker="[{names}]")
    red.register("registered-Value-1", "reg")
    out = red.redact("password=registered-Value-1 and plain registered-Value-1")
    assert out == "password=[detected:assignment,reg] and plain [reg]"
    assert red.report().as_dict() == {"detected:assignment": 1, "reg": 2}


FRAGMENTS = [
    b"password=hunter2hunter2 ",
    b"Authorization: Bearer abcDEF1234567890== ",
    b"https://u:pa55word@example.com/ ",
    b"-----BEGIN PRIVATE KEY-----\nMIIEv\nQIB\n-----END PRIVATE KEY-----\n",
    b"ghp_" + b"a1B2c3D4e5" * 4 + b" ",
    b"AKIAIOSFODNN7EXAMPLE ",
    b'{"api_key": "k\\"ey-1234"} ',
    b"registered-Value-1",
    b"plain words ",
    b"\xc3\xa9\xe7\xa7\x98 ",
    b"=",
    b":",
]


@given(
    parts=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=10),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=25),
    as_text=st.booleans(),
)
def test_stream_with_detectors_equals_whole(
    parts: list[bytes], cuts: list[int], as_text: bool
) -> None:
    red = Redactor(detectors=DEFAULT_DETECTORS, named_marker="<{names}>")
    red.register("registered-Value-1", "reg")
    data = b"".join(parts)
    if as_text:
        text = data.decode("utf-8")
        whole: str | bytes = red.redact(text)
        points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
        chunks: list[Any] = [text[a:b] for a, b in itertools.pairwise(points)]
    else:
        whole = red.redact_bytes(data)
        points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
        chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    stream = red.stream()
    out: list[Any] = [stream.feed(c) for c in chunks] + [stream.flush()]
    joined = "".join(out) if as_text else b"".join(out)
    assert joined == whole


def test_detector_is_a_frozen_value() -> None:
    det = Detector("x", re.compile(rb"ab(?P<v1>c{1,3})"), 5)
    assert Redactor(detectors=[det]).redact("abcc") == "ab[redacted]"
    with pytest.raises(TypeError):
        Redactor(detectors=["nope"])  # type: ignore[list-item]


PLAIN = tuple(
    Detector(d.name, d.pattern, d.max_length) for d in DEFAULT_DETECTORS
)  # same regexes, no anchor prefilter: plain re.finditer semantics


@given(
    parts=st.lists(
        st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=10)), min_size=1, max_size=12
    )
)
def test_anchor_prefilter_finds_exactly_what_the_regex_finds(parts: list[bytes]) -> None:
    data = b"".join(parts)
    fast = Redactor(detectors=DEFAULT_DETECTORS, named_marker="<{names}>").redact_bytes(data)
    plain = Redactor(detectors=PLAIN, named_marker="<{names}>").redact_bytes(data)
    assert fast == plain


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_anchor_prefilter_on_vectors(case: dict[str, Any]) -> None:
    text = case["text"]
    assert Redactor(detectors=DEFAULT_DETECTORS).redact(text) == Redactor(detectors=PLAIN).redact(
        text
    )


def test_byte_by_byte_stream_with_detectors_is_bounded_and_exact() -> None:
    red = Redactor(detectors=DEFAULT_DETECTORS)
    red.register("registered-Value-1", "reg")
    data = b"".join(FRAGMENTS) * 40
    stream = red.stream()
    bound = max(d.max_length for d in DEFAULT_DETECTORS) + 4096 + 8
    out = []
    for i in range(len(data)):
        out.append(stream.feed(data[i : i + 1]))
        assert stream.held_back <= bound
    out.append(stream.flush())  # type: ignore[arg-type]
    assert b"".join(out) == red.redact_bytes(data)


@pytest.mark.parametrize("cut", [1, 7, 4096, 5000])
def test_detector_limit_inside_a_character_widens_to_the_boundary(cut: int) -> None:
    text = "password=" + "秘" * 2000 + " tail"  # 6000 bytes of value: the limit cuts a char
    whole = RED.redact(text)
    assert whole.startswith("password=[redacted]")
    assert whole.endswith(" tail")
    stream = RED.stream()
    out = stream.feed(text[:cut]) + stream.feed(text[cut:]) + stream.flush()  # type: ignore[operator]
    assert out == whole
