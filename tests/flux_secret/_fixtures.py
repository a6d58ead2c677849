"""Shared secrets for the flux_secret tests: shapes that stress every variant."""

from __future__ import annotations

from flux_secret import Redactor, variants

SECRETS: dict[str, str | bytes] = {
    "ascii": "hunter2-Pa55word",
    "b64-specials": 's3cr3t/Pa+ss"w\\rd!~?',  # differs in the std and URL-safe alphabets
    "unicode": "pässwörd-秘密-ñ",
    "binary": b"\xff\xfe\x00raw-\x80bytes\xc3",  # not UTF-8
    "multiline": "-----FIRST-LINE-abc\nsecond-line-xyz12\nshort\n",
    "short": "Ab3$xY",  # the floor, with min_length=6
}


def make_redactor(**kwargs: object) -> Redactor:
    red = Redactor(min_length=6, **kwargs)  # type: ignore[arg-type]
    for name, value in SECRETS.items():
        red.register(value, name)
    return red


def all_patterns() -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for name, value in SECRETS.items():
        raw = value.encode("utf-8") if isinstance(value, str) else value
        out += [(name, p) for p in variants(raw, min_length=6)]
    return out
