"""Every encoded form ``variants`` claims, from fixed vectors derived without flux_secret.

``tests/vectors/flux_secret/variants.json`` (regenerate with
``python3 tests/vectors/flux_secret/variants.py``) lists, per secret, the forms found
with the standard library's encoders alone: base64 cores found empirically at each
byte offset, JSON bodies from a character-by-character encoder, ``repr`` bodies with
the quote forced each way, lines by ``splitlines``. The set must be exactly what
``variants`` returns (nothing missing: a form left unmasked; nothing extra: a pattern
that masks text that is not the secret), and the redactor must mask each form in
context, base64 at every offset inside a longer blob, and the percent and entity
escapes that are matched by decoding.
"""

from __future__ import annotations

import base64
import html
import re
import urllib.parse
from typing import Any

import pytest

from flux_secret import Redactor, variants
from tests._vectors import load_vectors

CASES: list[dict[str, Any]] = load_vectors("flux_secret", "variants")
MARK = b"[redacted]"


def _secret(case: dict[str, Any]) -> bytes:
    return bytes.fromhex(case["secret_hex"])


def _forms(case: dict[str, Any]) -> list[bytes]:
    return [bytes.fromhex(f["hex"]) for f in case["forms"]]


def _redactor(case: dict[str, Any]) -> Redactor:
    red = Redactor(min_length=case["min_length"])
    red.register(_secret(case), "k")
    return red


def test_vectors_say_why_and_cover_every_kind() -> None:
    assert all(c["why"] and c["source"] for c in CASES)
    kinds = {f["kind"] for c in CASES for f in c["forms"]}
    assert kinds == {"raw", "base64", "hex", "json", "repr", "line"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_variants_are_exactly_the_claimed_forms(case: dict[str, Any]) -> None:
    got = variants(_secret(case), min_length=case["min_length"])
    expected = _forms(case)
    assert got[0] == _secret(case)  # the raw form first
    assert len(got) == len(set(got))  # distinct
    assert all(got)  # never an empty pattern
    missing = [f for f in expected if f not in got]
    extra = [f for f in got if f not in expected]
    assert (missing, extra) == ([], [])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_pattern_is_at_least_six_bytes(case: dict[str, Any]) -> None:
    assert min(len(f) for f in variants(_secret(case), min_length=case["min_length"])) >= 6


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_each_form_is_masked_in_context(case: dict[str, Any]) -> None:
    red = _redactor(case)
    for form in _forms(case):
        out = red.redact_bytes(b"<< " + form + b" >>")
        assert form not in out, form
        assert MARK in out  # positive control: the form was there and was masked


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
@pytest.mark.parametrize("offset", [0, 1, 2])
def test_base64_inside_a_longer_blob_at_every_offset(case: dict[str, Any], offset: int) -> None:
    red = _redactor(case)
    secret = _secret(case)
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for head, tail in ((b"\x00", b"\x00\x01\x02"), (b"\xff", b"\xfe\xfd\xfc"), (b"Z", b"")):
            blob = encode(b"pre-" + head * offset + secret + tail)
            out = red.redact_bytes(blob)
            assert MARK in out
            # The characters the secret alone fixes are gone: decoding what is left
            # around the marker can no longer give the secret.
            assert encode(secret)[2:-2] not in out


def _text(case: dict[str, Any]) -> str | None:
    try:
        return _secret(case).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _escaped_forms(text: str) -> list[str]:
    """Percent and entity forms (issue 13: matched by decoding, not listed)."""
    return [
        urllib.parse.quote(text, safe=""),
        urllib.parse.quote(text),  # keeps "/"
        urllib.parse.quote_plus(text),
        re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), urllib.parse.quote(text, safe="")),
        html.escape(text),
        html.escape(text, quote=False),
        "".join(f"&#{ord(c)};" for c in text),
        "".join(f"&#x{ord(c):x};" for c in text),
    ]


@pytest.mark.parametrize(
    "case", [c for c in CASES if _text(c) is not None], ids=lambda c: str(c["id"])
)
def test_percent_and_entity_forms_are_masked(case: dict[str, Any]) -> None:
    text = _text(case)
    assert text is not None
    red = _redactor(case)
    for form in _escaped_forms(text):
        out = red.redact("q=" + form + "&x=1")
        assert form not in out, form
        assert "[redacted]" in out


def test_line_forms_boundary() -> None:
    # A line exactly min_length long is its own pattern; one byte shorter is not.
    red = Redactor(min_length=6)
    red.register("abcdef\nabcde\nline-three", "k")
    assert red.redact("x abcdef y") == "x [redacted] y"
    assert red.redact("x abcde y") == "x abcde y"
    assert red.redact("x line-three y") == "x [redacted] y"
    # One line with a trailing newline: the line is the raw secret minus the newline,
    # which is masked only as part of the whole value.
    red = Redactor(min_length=6)
    red.register("single-line-secret\n", "k")
    assert red.redact("single-line-secret!") == "single-line-secret!"
    assert red.redact("single-line-secret\n!") == "[redacted]!"
