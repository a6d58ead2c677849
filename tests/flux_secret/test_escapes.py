"""Escaped forms: percent-encoding and entities of any encoder, repr quoting, and the
regressions of the same report (redact_obj keys, flush type)."""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux_secret import Redactor, StreamRedactor
from tests._vectors import load_vector_file, load_vectors

ESCAPES = load_vectors("flux_secret", "escapes")


def _streamed(red: Redactor, text: str, cut: int) -> str:
    stream = red.stream()
    out = stream.feed(text[:cut]) + stream.feed(text[cut:])
    tail = stream.flush()
    assert isinstance(tail, str)
    return out + tail


def test_escape_vectors_have_provenance() -> None:
    doc = load_vector_file("flux_secret", "escapes")
    assert doc["provenance"]["sets"]
    assert all(case["source"] for case in ESCAPES)


@pytest.mark.parametrize("case", ESCAPES, ids=[c["id"] for c in ESCAPES])
def test_encoder_outputs_are_masked_whole_and_at_every_split(case: dict[str, Any]) -> None:
    red = Redactor()
    red.register(case["secret"], "s")
    text: str = case["text"]
    whole = red.redact(text)
    assert "[redacted]" in whole
    assert red.redact_bytes(text.encode()) == whole.encode()
    # nothing of the escaped secret is left: the marker replaced all of it
    left = whole.replace("[redacted]", "\x00")
    before, _, after = left.partition("\x00")
    assert text.startswith(before) and text.endswith(after)
    assert len(before) + len(after) + 1 == len(left)
    for cut in range(len(text) + 1):
        assert _streamed(red, text, cut) == whole, cut


def test_positive_control_unregistered_escaped_secret_stays() -> None:
    red = Redactor()
    red.register("other-secret-value", "o")
    text = "GET /v1/objects/Zm9vYmFy+YmF6%2FcXV4==/meta"
    assert red.redact(text) == text  # the masking above is the secret's, not the escapes'


_SECRET_ALPHABET = st.sampled_from(list("abcXYZ019-_.~*'()!/+ ?&=<>\"#%;:@é秘"))


@st.composite
def _percent_encoded(draw: st.DrawFn) -> tuple[str, str]:
    """A secret, and its encoding by an encoder leaving an arbitrary set unescaped."""
    secret = "".join(draw(st.lists(_SECRET_ALPHABET, min_size=8, max_size=24)))
    out: list[str] = []
    for char in secret:
        raw = char.encode()
        keep = draw(st.booleans()) and char.isascii() and char not in "%+"
        if char == " ":
            out.append(draw(st.sampled_from(["+", "%20"])))
        elif keep:
            out.append(char)
        else:
            upper = draw(st.booleans())
            out += [f"%{b:02X}" if upper else f"%{b:02x}" for b in raw]
    return secret, "".join(out)


@given(_percent_encoded(), st.integers(0, 200))
def test_any_percent_encoding_is_masked(pair: tuple[str, str], cut: int) -> None:
    secret, encoded = pair
    red = Redactor()
    red.register(secret, "s")
    text = f"url=/a?x=1&k={encoded}&y=2"
    whole = red.redact(text)
    assert encoded not in whole and "[redacted]" in whole
    assert _streamed(red, text, min(cut, len(text))) == whole


@st.composite
def _entity_encoded(draw: st.DrawFn) -> tuple[str, str]:
    secret = "".join(draw(st.lists(_SECRET_ALPHABET, min_size=8, max_size=24)))
    named = {"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;"}
    out: list[str] = []
    for char in secret:
        forms = [f"&#{ord(char)};", f"&#x{ord(char):x};", f"&#X{ord(char):X};"]
        if char in named:
            forms.append(named[char])
        elif char not in "&":
            forms.append(char)
        out.append(draw(st.sampled_from(forms)))
    return secret, "".join(out)


@given(_entity_encoded(), st.integers(0, 300))
def test_any_entity_escaping_is_masked(pair: tuple[str, str], cut: int) -> None:
    secret, encoded = pair
    red = Redactor()
    red.register(secret, "s")
    text = f"<p title='x'>{encoded}</p>"
    whole = red.redact(text)
    assert encoded not in whole and "[redacted]" in whole
    assert _streamed(red, text, min(cut, len(text))) == whole


def test_escape_cut_across_chunks_at_every_position_bytes() -> None:
    red = Redactor()
    red.register("pa~ss*wo rd-1234", "j")
    data = b"a=%41&p=pa%7Ess*wo+rd-1234&b=&amp;&#x41;%4"
    whole = red.redact_bytes(data)
    assert whole == b"a=%41&p=[redacted]&b=&amp;&#x41;%4"
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            stream = red.stream()
            out = stream.feed(data[:i]) + stream.feed(data[i:j]) + stream.feed(data[j:])
            tail = stream.flush()
            assert isinstance(tail, bytes)
            assert out + tail == whole, (i, j)


def test_stream_holds_back_escapes_only_near_them() -> None:
    red = Redactor()
    red.register("pa~ss*wo rd-1234", "j")
    stream = red.stream()
    for i in range(200):
        stream.feed(b"plain line %d\n" % i)
        assert stream.held_back < 2 * len(b"pa~ss*wo rd-1234") + 8  # the raw bound
    stream.feed(b"q=%41 ")
    assert stream.held_back > 16  # an escape: an escaped secret could still complete


SECRET_WITH_QUOTE = "O'Brien-pass-1234"
SECRET_WITH_BOTH = "x'y\"z\\w-pass-99"


@pytest.mark.parametrize("secret", [SECRET_WITH_QUOTE, SECRET_WITH_BOTH])
def test_repr_of_a_surrounding_string_is_masked(secret: str) -> None:
    red = Redactor()
    red.register(secret, "s")
    header = f'header "X-Auth: {secret}"'
    for text in (
        repr(header),  # the '"' around forces the other quote: the secret's ' escaped
        repr(f"header X-Auth: {secret}"),
        repr(ValueError(header)),
        repr(header.encode()),
        repr([header, header.encode()]),
        ascii(header),
    ):
        out = red.redact(text)
        assert "[redacted]" in out, text
        assert "Brien" not in out and "pass" not in out, text


def test_repr_in_the_logging_filter_is_masked() -> None:
    red = Redactor()
    red.register(SECRET_WITH_QUOTE, "s")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(red.logging_filter())
    log = logging.getLogger("flux_secret.test.repr")
    log.propagate = False
    log.addHandler(handler)
    try:
        log.warning("sent %r", f'header "X-Auth: {SECRET_WITH_QUOTE}"')
        log.warning("sent %r", f'header "X-Auth: {SECRET_WITH_QUOTE}"'.encode())
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert "Brien" not in text and text.count("[redacted]") == 2


def test_redact_obj_keeps_bytes_keys_apart() -> None:
    red = Redactor()
    red.register(b"tok-3f9a1c77e2", "a")
    red.register(b"pw-0000-aaaa-bbbb", "b")
    out = red.redact_obj({b"tok-3f9a1c77e2": 1, b"pw-0000-aaaa-bbbb": 2})
    assert out == {b"[redacted]": 1, b"[redacted]#2": 2}


def test_redact_obj_keeps_keys_of_every_type_apart() -> None:
    red = Redactor()
    red.register(b"tok-3f9a1c77e2", "a")
    red.register(b"pw-0000-aaaa-bbbb", "b")
    red.register("12345678901", "n")
    red.register("12345678902", "m")
    source: dict[object, object] = {
        (b"tok-3f9a1c77e2", 1): "t1",
        (b"pw-0000-aaaa-bbbb", 1): "t2",
        frozenset({b"tok-3f9a1c77e2"}): "f1",
        frozenset({b"pw-0000-aaaa-bbbb"}): "f2",
        12345678901: "i1",
        12345678902: "i2",
        "[redacted]": "s0",
    }
    out = red.redact_obj(source)
    assert isinstance(out, dict)
    assert sorted(map(str, out.values())) == sorted(map(str, source.values()))
    assert (b"[redacted]", 1) in out and (b"[redacted]", 1, "#2") in out
    assert all("tok-" not in repr(k) and "pw-0000" not in repr(k) for k in out)
    assert all("1234567890" not in repr(k) for k in out)


@pytest.mark.parametrize("kind", [str, bytes])
def test_flush_without_feed_returns_the_stream_type(kind: type[str] | type[bytes]) -> None:
    red = Redactor()
    red.register("hunter2-Pa55word", "db")
    stream = red.stream(kind)
    assert type(stream.flush()) is kind
    assert type(StreamRedactor(red, kind).flush()) is kind


def test_stream_of_a_fixed_kind_refuses_the_other() -> None:
    red = Redactor()
    stream = red.stream(str)
    with pytest.raises(Exception, match="differs"):
        stream.feed(b"bytes")
    with pytest.raises(TypeError):
        StreamRedactor(red, int)  # type: ignore[arg-type]


@given(
    st.binary(min_size=0, max_size=300),
    st.binary(min_size=0, max_size=300),
    st.lists(st.integers(0, 2000), max_size=6),
    st.booleans(),
)
def test_escape_dense_text_decides_as_sparse_windows(
    before: bytes, after: bytes, cuts: list[int], html: bool
) -> None:
    """URL-encoded or entity-escaped data (decoded whole) and small stream chunks
    (decoded in windows) mask the same: any chunking equals whole-text redaction."""
    import html as html_module
    import urllib.parse

    secret = "pa~ss*wo rd-1234'<&>"
    red = Redactor(named_marker="<{names}>")
    red.register(secret, "j")
    red.register("other secret value", "o")
    if html:
        blob = html_module.escape((before + secret.encode() + after).decode("latin-1"))
        data = blob.encode()
    else:
        data = urllib.parse.quote_plus(before + secret.encode() + after).encode()
    snap = red._snapshot()
    assert snap.escapes[0]._escapes(data) is None or len(data) < 300  # dense when long
    whole = red.redact_bytes(data)
    assert b"<j>" in whole
    bounds = sorted({min(c, len(data)) for c in cuts})
    stream = red.stream(bytes)
    pieces = [data[a:b] for a, b in zip([0, *bounds], [*bounds, len(data)], strict=True)]
    out = b"".join(stream.feed(p) for p in pieces)
    tail = stream.flush()
    assert isinstance(tail, bytes)
    assert out + tail == whole


@pytest.mark.parametrize(
    ("secret", "escaped"),
    [
        ("4Zsecret-77", b"%4Zsecret-7%37"),  # a lone "%" before: its codec eats the "4"
        ("41secret-77", b"&#37;41secret-7%37"),  # an entity for "%" before: eats "41"
        ("amp;secret-77", b"&#38;amp;secret-7%37"),  # "&" then "amp;": decoded twice
        ("lt;secret-77", b"&#x26;lt;secret-&#55;7"),
        ("plain+secret-77", b"plain%2Bsecret-%377"),
        ("with space-777", b"with+space-%37%377"),
    ],
)
def test_escape_dense_filter_never_hides_an_occurrence(secret: str, escaped: bytes) -> None:
    """Dense text goes through a C-level filter before the exact decoding: the cases
    where its decoding differs at an occurrence's start are still masked."""
    import random
    import urllib.parse

    rng = random.Random(13)
    noise = urllib.parse.quote(bytes(rng.randrange(256) for _ in range(3000))).encode()
    red = Redactor()
    red.register(secret, "s")
    data = noise + escaped + b"&amp;" + noise
    assert red._snapshot().escapes[0]._escapes(data) is None  # the dense path is taken
    out = red.redact_bytes(data)
    assert red._snapshot().escapes[0]._filter is not None  # ... and its filter
    assert out.count(b"[redacted]") == 1 and escaped.rstrip(b"7") not in out


@given(
    st.one_of(
        st.text(st.sampled_from("abcXYZ0149-_.~*'()!/+ ?=<>\"#;:@é"), min_size=8, max_size=20),
        st.sampled_from(["amp;secret-1", "lt;quot;-x7", "#38;amp;-zz", "41x-secret"]),
    ),
    st.data(),
    st.sampled_from(["", "%", "%4", "&#37;", "&#37;4", "&amp;", "&", "\\", "%%", "&#38;"]),
)
def test_escape_dense_filter_is_a_superset(secret: str, data: st.DataObject, before: str) -> None:
    forms: list[str] = []
    for char in secret:
        raw = char.encode()
        choice = data.draw(st.integers(0, 3))
        if choice == 0 and char.isascii():
            forms.append(char)
        elif choice == 1 or not char.isascii():
            forms += [f"%{b:02X}" for b in raw]
        elif choice == 2:
            forms.append(f"&#{ord(char)};")
        else:
            forms.append(f"&#x{ord(char):x};")
    encoded = "".join(forms).encode()
    red = Redactor()
    red.register(secret, "s")
    text = b"%41" * 40 + before.encode() + encoded + b"&#65;" * 40
    escapes = red._snapshot().escapes[0]
    assert escapes._escapes(text) is None and escapes._filter is not None
    exact = escapes._dense(text, (0, len(text)))  # the exact decoding, unfiltered
    assert escapes.find(text) == exact
    if before in ("", "&amp;", "&", "\\"):  # a prefix that cannot join the first escape
        assert exact and b"[redacted]" in red.redact_bytes(text)


def test_numeric_entity_past_the_last_code_point_is_text() -> None:
    red = Redactor()
    red.register("abc-secret-1", "s")
    text = "&#1114112;&#x110000; &#97;bc-secret-1 &#x61;bc-secret-1"
    assert red.redact(text) == "&#1114112;&#x110000; [redacted] [redacted]"
    dense = "&#x110000;" * 60 + "&#97;bc-secret-1" + "&#65;" * 60
    assert red.redact(dense) == "&#x110000;" * 60 + "[redacted]" + "&#65;" * 60
