"""Regressions from the adversarial review of flux_secret (one test per finding)."""

from __future__ import annotations

import binascii

import pytest

from flux_secret import RedactionError, RedactionReason, Redactor

A = "hunter2hunter2"
B = "s3cr3tpassw0rd"


@pytest.mark.parametrize("order", ["b-first", "b-later"])
def test_named_marker_never_shows_another_secret_held_in_a_name(order: str) -> None:
    # Was: the name went into the marker as written, so "[redacted:a-<B>]" leaked B.
    red = Redactor(named_marker="[redacted:{names}]")
    if order == "b-first":
        red.register(B, name="b")
    red.register(A, name="a-" + B)
    if order == "b-later":
        red.register(B, name="b")
    text = f"x {A} y"
    whole = red.redact(text)
    assert B not in whole
    assert A not in whole
    stream = red.stream()
    streamed = stream.feed(text)
    tail = stream.flush()
    assert isinstance(tail, str)
    assert streamed + tail == whole


def test_named_marker_never_shows_an_encoded_form_of_the_secret_itself() -> None:
    # The registration check only refuses a name holding the raw value.
    red = Redactor(named_marker="[redacted:{names}]")
    hexed = binascii.hexlify(A.encode()).decode()
    red.register(A, name="tok-" + hexed)
    out = red.redact(A)
    assert hexed not in out
    assert A not in out


def test_integer_too_long_for_decimal_text_is_a_typed_refusal() -> None:
    # Was: ValueError (int max str digits) escaped from redact_obj.
    red = Redactor()
    red.register(A)
    with pytest.raises(RedactionError) as info:
        red.redact_obj({"k": [10**5000]})
    assert info.value.reason is RedactionReason.UNSUPPORTED_TYPE
