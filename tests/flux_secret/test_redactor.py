"""Redactor: registration rules, every variant masked, merging, markers, reports."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from typing import Any

import pytest

from flux_secret import (
    RedactionReport,
    Redactor,
    RegistrationError,
    RegistrationReason,
    SecretValue,
    variants,
)
from tests._vectors import load_vector_file, load_vectors

from ._fixtures import all_patterns, make_redactor

LEAKS = load_vectors("flux_secret", "leaks")


def test_leak_vectors_have_provenance() -> None:
    doc = load_vector_file("flux_secret", "leaks")
    assert doc["provenance"]["leak_classes"]
    assert all(case["source"] for case in LEAKS)


@pytest.mark.parametrize("case", LEAKS, ids=[c["id"] for c in LEAKS])
def test_leak_vectors_whole_and_streamed(case: dict[str, Any]) -> None:
    red = Redactor()
    late = case.get("register_after_chars")
    if late is None:
        for secret in case["secrets"]:
            red.register(secret["value"], secret["name"])
    text: str = case["text"]
    stream = red.stream()
    out = stream.feed(text[: late or 0])
    if late is not None:
        for secret in case["secrets"]:
            red.register(secret["value"], secret["name"])
    out += stream.feed(text[late or 0 :])
    out += stream.flush()  # type: ignore[operator]
    whole = red.redact(text)
    assert out == whole
    for needle in case["must_not_contain"]:
        assert needle not in whole
    if "expect" in case:
        assert whole == case["expect"]
    assert red.redact_bytes(text.encode()) == whole.encode()


@pytest.mark.parametrize(("name", "pattern"), all_patterns())
def test_every_variant_is_masked_in_text_and_bytes(name: str, pattern: bytes) -> None:
    red = make_redactor()
    data = b"<<" + pattern + b">>"
    out = red.redact_bytes(data)
    assert pattern not in out and out.startswith(b"<<") and out.endswith(b">>")
    assert red.report().as_dict().get(name, 0) >= 1


def test_variant_forms_present() -> None:
    secret = b"s3cr3t/Pa+ss?x"
    forms = set(variants(secret, min_length=8))
    assert secret in forms
    assert base64.b64encode(secret) in forms
    assert base64.b64encode(secret).rstrip(b"=") in forms
    assert base64.urlsafe_b64encode(secret) in forms
    assert secret.hex().encode() in forms and secret.hex().upper().encode() in forms
    # percent-encoded forms are matched by decoding, not listed (test_escapes.py)
    red = Redactor()
    red.register(secret, "s")
    for quoted in (urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)):
        assert red.redact(f"q={quoted}&") == "q=[redacted]&"
    assert json.dumps(secret.decode())[1:-1].replace("/", "\\/").encode() in forms
    assert repr(secret)[2:-1].encode() in forms
    assert repr(b"\x00bin" + secret)[2:-1].encode() in variants(b"\x00bin" + secret, min_length=8)
    assert all(len(f) >= 6 for f in forms)
    assert len(forms) == len(variants(secret, min_length=8))


@pytest.mark.parametrize("offset", range(3))
@pytest.mark.parametrize("tail", range(4))
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
def test_base64_inside_longer_blob(offset: int, tail: int, encode: Any) -> None:
    secret = b"\xfb\xff\xbe-secret-?>~"
    red = Redactor()
    red.register(secret, "s")
    blob = encode(b"P" * (3 + offset) + secret + b"Q" * tail)
    out = red.redact_bytes(b"x=" + blob + b";")
    assert b"[redacted]" in out
    first = (8 * (3 + offset) + 5) // 6
    last = (8 * (3 + offset + len(secret))) // 6
    assert blob[first:last] not in out


def test_minimum_length_rules() -> None:
    red = Redactor()
    with pytest.raises(RegistrationError) as info:
        red.register("short12")
    assert info.value.reason is RegistrationReason.TOO_SHORT
    assert "short12" not in str(info.value) and "short12" not in repr(info.value)
    assert "short12" not in repr(info.value.args)
    red.register("long-enough")
    with pytest.raises(RegistrationError) as info:
        Redactor(min_length=5)
    assert info.value.reason is RegistrationReason.MIN_LENGTH
    six = Redactor(min_length=6)
    six.register("Ab3$xY")
    assert six.redact("a Ab3$xY b") == "a [redacted] b"
    with pytest.raises(RegistrationError) as info:
        red.register(b"x" * (64 * 1024 + 1))
    assert info.value.reason is RegistrationReason.TOO_LONG


def test_names_unregister_and_rotation() -> None:
    red = Redactor()
    auto = red.register("first-value-1")
    assert auto.startswith("secret-")
    red.register(SecretValue("from-a-value-2", name="env/X"))
    assert red.names() == sorted([auto, "env/X"])
    assert red.redact("first-value-1 from-a-value-2") == "[redacted] [redacted]"
    red.unregister(auto)
    assert red.redact("first-value-1") == "first-value-1"
    with pytest.raises(RegistrationError) as info:
        red.unregister(auto)
    assert info.value.reason is RegistrationReason.UNKNOWN_NAME
    red.rotate("env/X", "rotated-value-3")
    assert red.redact("from-a-value-2 rotated-value-3") == "from-a-value-2 [redacted]"
    red.rotate("env/X", "rotated-value-4", keep_old=True)
    assert red.redact("rotated-value-3 rotated-value-4") == "[redacted] [redacted]"
    with pytest.raises(RegistrationError) as info:
        red.rotate("nope", "whatever-value")
    assert info.value.reason is RegistrationReason.UNKNOWN_NAME


def test_bad_names_and_settings() -> None:
    red = Redactor()
    with pytest.raises(RegistrationError) as info:
        red.register("secret-value-x", "contains secret-value-x")
    assert info.value.reason is RegistrationReason.NAME_CONTAINS_SECRET
    assert "secret-value-x" not in str(info.value)
    for bad in ("", "a\nb", "x" * 5000):
        with pytest.raises(RegistrationError) as info:
            red.register("secret-value-y", bad)
        assert info.value.reason is RegistrationReason.BAD_NAME
    for kwargs in ({"marker": ""}, {"named_marker": "[x]"}):
        with pytest.raises(RegistrationError) as info:
            Redactor(**kwargs)  # type: ignore[arg-type]
        assert info.value.reason is RegistrationReason.BAD_SETTING
    with pytest.raises(TypeError):
        red.register(12345678)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        red.redact(b"bytes")  # type: ignore[arg-type]


def test_union_of_overlapping_matches_with_names() -> None:
    red = Redactor(named_marker="[redacted:{names}]")
    red.register("abcdefgh12345678", "a")
    red.register("12345678ZYXWVUTS", "b")
    red.register("5678ZYXW", "c")
    assert red.redact("x abcdefgh12345678ZYXWVUTS y") == "x [redacted:a,b,c] y"
    assert red.redact("x 12345678ZYXWVUTS y") == "x [redacted:b,c] y"
    assert red.report() == RedactionReport((("a", 1), ("b", 2), ("c", 2)))
    custom = Redactor(marker="***")
    custom.register("abcdefgh12345678")
    assert custom.redact("abcdefgh12345678") == "***"


def test_unchanged_input_is_returned_as_is() -> None:
    red = make_redactor()
    text = "nothing to see here " * 10
    assert red.redact(text) is text
    assert red.redact_bytes(bytearray(b"abc")) == b"abc"


def test_registration_is_thread_safe_while_redacting() -> None:
    red = Redactor()
    values = [f"thread-secret-{i:04d}-x" for i in range(200)]
    text = " ".join(values)
    errors: list[BaseException] = []
    registered = threading.Event()
    stop = threading.Event()

    def redact_loop() -> None:
        try:
            while not stop.is_set():
                out = red.redact(text)
                # Every value registered before this call began is masked: the
                # masked ones always form a prefix of the registration order.
                masked = [v not in out for v in values]
                assert masked == sorted(masked, reverse=True)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=redact_loop) for _ in range(3)]
    for worker in workers:
        worker.start()
    for value in values:
        red.register(value)
    registered.set()
    final = red.redact(text)
    stop.set()
    for worker in workers:
        worker.join()
    assert errors == []
    assert all(v not in final for v in values)
    assert final == " ".join(["[redacted]"] * len(values))


def test_tiered_rebuild_masks_old_and_new_and_forgets_removed() -> None:
    red = Redactor()
    olds = [f"old-secret-{i:05d}" for i in range(300)]
    for value in olds:
        red.register(value, value.replace("secret", "name"))
    assert red.redact(olds[0]) == "[redacted]"
    assert len(red._snapshot().matchers) == 1
    red.register("new-secret-00001", "new")
    assert red.redact(f"{olds[5]} new-secret-00001") == "[redacted] [redacted]"
    assert len(red._snapshot().matchers) == 2  # the new value went to the small automaton
    red.unregister("new")
    red.unregister(olds[5].replace("secret", "name"))
    assert red.redact(f"{olds[5]} new-secret-00001 {olds[6]}") == (
        f"{olds[5]} new-secret-00001 [redacted]"
    )
    assert len(red._snapshot().matchers) == 1  # a removal rebuilds fully
    for i in range(2000):  # outgrowing the small automaton folds it into the base
        red.register(f"more-secret-{i:05d}")
        if i % 97 == 0:
            red.redact("x")
    assert red.redact("more-secret-01999 more-secret-00000") == "[redacted] [redacted]"


def test_python_repr_forms_are_masked() -> None:
    red = Redactor()
    raw = b"\x00\xffbinary-key\n"
    red.register(raw, "bin")
    red.register("tab\there-é-value", "txt")
    value = "tab\there-é-value"
    text = f"got {raw!r} and {value!r} and {value!a}"
    assert red.redact(text) == "got b'[redacted]' and '[redacted]' and '[redacted]'"


# A secret with every character other JSON encoders escape, and its JSON string body as
# they write it (from their documented defaults): Go's encoding/json escapes "<", ">",
# "&", U+2028 and U+2029 and keeps other UTF-8; .NET's System.Text.Json (default
# JavaScriptEncoder) also escapes '"', "'", "+" and all non-ASCII, with upper-case hex.
OTHER_ENCODER_SECRET = "k<e>y&'+\"\\ä\u2028Zz/9"
OTHER_ENCODER_FORMS = {
    "go encoding/json": "k\\u003ce\\u003ey\\u0026'+\\\"\\\\ä\\u2028Zz/9",
    "go, ASCII-only": "k\\u003ce\\u003ey\\u0026'+\\\"\\\\\\u00e4\\u2028Zz/9",
    ".NET System.Text.Json": (
        "k\\u003Ce\\u003Ey\\u0026\\u0027\\u002B\\u0022\\\\\\u00E4\\u2028Zz/9"
    ),
    ".NET, slash escaped": (
        "k\\u003Ce\\u003Ey\\u0026\\u0027\\u002B\\u0022\\\\\\u00E4\\u2028Zz\\/9"
    ),
}


@pytest.mark.parametrize("encoder", sorted(OTHER_ENCODER_FORMS))
def test_json_escapes_of_other_encoders_are_masked(encoder: str) -> None:
    form = OTHER_ENCODER_FORMS[encoder]
    red = Redactor()
    red.register(OTHER_ENCODER_SECRET, "k")
    text = '{"token":"' + form + '"}'
    out = red.redact(text)
    assert form not in out and out == '{"token":"[redacted]"}'
    assert red.redact_bytes(text.encode()) == out.encode()
