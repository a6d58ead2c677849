"""Derive tests/vectors/flux_secret/variants.json without flux_secret.

Run: python3 tests/vectors/flux_secret/variants.py (rewrites the JSON beside it).
"""

# ruff: noqa: E501  (vector text: long lines of data)

from __future__ import annotations

import base64
import binascii
import json
import pathlib
from collections.abc import Callable
from typing import Any

GO = "<>&\u2028\u2029"
DOTNET = "<>&'+\u2028\u2029"
SHORT: dict[str, str] = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
}


def u(cp: int, upper: bool) -> str:
    h = f"{cp:04x}"
    return "\\u" + (h.upper() if upper else h)


def json_body(
    text: str, *, ascii_only: bool, extra: str, quote_u: bool, upper: bool, slash: bool
) -> str:
    out: list[str] = []
    for c in text:
        cp = ord(c)
        if c == '"' and quote_u:
            out.append(u(cp, upper))
        elif c in SHORT:
            out.append(SHORT[c])
        elif cp < 0x20 or c in extra:
            out.append(u(cp, upper))
        elif c == "/" and slash:
            out.append("\\/")
        elif cp > 0x7E and ascii_only:  # json.dumps escapes U+007F too under ensure_ascii
            if cp > 0xFFFF:
                v = cp - 0x10000
                out.append(u(0xD800 + (v >> 10), upper) + u(0xDC00 + (v & 0x3FF), upper))
            else:
                out.append(u(cp, upper))
        else:
            out.append(c)
    return "".join(out)


def b64_forms(secret: bytes) -> list[bytes]:
    out: list[bytes] = []
    n = len(secret)
    encoders: tuple[Callable[[bytes], bytes], ...] = (base64.b64encode, base64.urlsafe_b64encode)
    for enc in encoders:
        for k in range(3):
            # empirical core: characters equal whatever the bytes around the secret are
            encs = [
                enc(p * k + secret + s)
                for p in (b"\x00", b"\xff")
                for s in (b"\x00\x00\x00", b"\xff\xff\xff")
            ]
            start = -(-8 * k // 6)  # first character holding no prefix bit
            end = start
            while (
                end < len(encs[0])
                and len({e[end] for e in encs}) == 1
                and (6 * end + 6) <= 8 * (k + n)
            ):
                end += 1
            out.append(encs[0][start:end])
            tail = enc(b"\x00" * k + secret)[start:]
            out.append(tail)
            out.append(tail.rstrip(b"="))
    return out


def repr_forms(secret: bytes, text: str | None) -> list[bytes]:
    out: list[bytes] = []
    if text is not None:
        for fn in (repr, ascii):
            esc = fn(text + "'\"")[1:-4]  # both quotes present: repr picks ' and escapes it
            out += [
                esc.encode("utf-8", "surrogatepass"),
                esc.replace("\\'", "'").encode("utf-8", "surrogatepass"),
            ]
    esc = repr(secret + b"'\"")[2:-4]
    out += [esc.encode(), esc.replace("\\'", "'").encode()]
    return out


def forms(secret: bytes, min_length: int) -> list[tuple[str, bytes]]:
    kinds: list[tuple[str, bytes]] = [("raw", secret)]
    kinds += [("base64", f) for f in b64_forms(secret)]
    kinds += [("hex", binascii.hexlify(secret)), ("hex", binascii.hexlify(secret).upper())]
    try:
        text: str | None = secret.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        for ascii_only in (False, True):
            for extra, quote_u in (("", False), (GO, False), (DOTNET, True)):
                for upper in (False, True):
                    for slash in (False, True):
                        kinds.append(
                            (
                                "json",
                                json_body(
                                    text,
                                    ascii_only=ascii_only,
                                    extra=extra,
                                    quote_u=quote_u,
                                    upper=upper,
                                    slash=slash,
                                ).encode("utf-8", "surrogatepass"),
                            )
                        )
    kinds += [("repr", f) for f in repr_forms(secret, text)]
    lines = secret.splitlines()
    if len(lines) > 1:
        kinds += [("line", line) for line in lines if len(line) >= min_length]
    return kinds


SECRETS: list[tuple[str, str | bytes, int, str]] = [
    ("ascii-16", "hunter2-Pa55word", 6, "ASCII, length 1 mod 3: base64 cores at the three offsets"),
    ("len-12", "abcdefghijkl", 6, "length 0 mod 3"),
    ("len-13", "abcdefghijklm", 6, "length 1 mod 3"),
    ("len-14", "abcdefghijklmn", 6, "length 2 mod 3"),
    (
        "b64-alphabets",
        's3cr3t/Pa+ss"w\\rd!~?',
        6,
        "base64 differs in the standard and URL-safe alphabets; JSON quote and backslash",
    ),
    (
        "b64-high-bits",
        b"\xfb\xff\xbf\xfb\xff\xbf>?",
        6,
        "bytes whose base64 is all + and / (std) or - and _ (URL-safe); not UTF-8",
    ),
    (
        "json-html",
        "<a&b>'+x/y\u2028\u2029",
        6,
        "every character Go and .NET escape, a / for \\/ and both quotes",
    ),
    (
        "json-control",
        "tab\there\nnl\x01\x7f-\r\b\f",
        6,
        "JSON short escapes and \\u00XX control escapes; a two-line secret",
    ),
    (
        "unicode",
        "pässwörd-秘密-ñ",
        6,
        "non-ASCII: ensure_ascii and .NET's \\u escapes, ascii() vs repr()",
    ),
    ("astral", "key-\U0001f600-emoji", 6, "a code point past U+FFFF: surrogate-pair escapes"),
    ("quotes-single", "it's-a-secret", 6, "repr with the ' escaped and not"),
    ("quotes-both", 'say "it\'s" now', 6, "both quotes: repr quoting depends on the text around"),
    (
        "backslash",
        "back\\slash\\'q",
        6,
        "a backslash before a quote: \\\\' is not an escaped quote",
    ),
    (
        "b64-ends-in-X",
        "passwordW",
        6,
        "length 0 mod 3 ending in W: the base64 ends in X, no padding to strip",
    ),
    (
        "repr-unicode",
        "it's-p\u00e4ss\u00a0w",
        6,
        "non-ASCII with a quote and a character repr escapes (U+00A0): repr and ascii bodies differ",
    ),
    (
        "binary",
        b"\xff\xfe\x00raw-\x80bytes\xc3",
        6,
        "not UTF-8: only bytes forms (raw, base64, hex, bytes repr)",
    ),
    (
        "multiline",
        "-----FIRST-LINE-abc\nsecond-line-xyz12\nshort\n",
        6,
        "lines of a multi-line secret, the short one left out",
    ),
    (
        "two-lines-at-limit",
        "abcdef\nabcde\nline-three",
        6,
        "two or more lines: a line exactly min_length long is a form, one byte shorter is not",
    ),
    (
        "two-lines",
        "line-one-aa\r\nline-two-bb",
        8,
        "exactly two lines (CRLF); both at least min_length",
    ),
    (
        "one-line-newline",
        "single-line-secret\n",
        6,
        "one line and a trailing newline: no line forms",
    ),
    (
        "min-length-8",
        "abc\nabcdefg\nabcdefgh",
        8,
        "min_length 8: the 7-byte line is not a form, the 8-byte one is",
    ),
]

cases: list[dict[str, Any]] = []
for cid, sec, ml, why in SECRETS:
    raw = sec.encode("utf-8") if isinstance(sec, str) else sec
    fs = forms(raw, ml)
    seen: set[bytes] = set()
    out: list[dict[str, str]] = []
    for kind, f in fs:
        if f and f not in seen:
            seen.add(f)
            out.append(
                {"kind": kind, "hex": f.hex(), "text": f.decode("utf-8", "backslashreplace")}
            )
    cases.append(
        {
            "id": cid,
            "source": "derived in tests/vectors/flux_secret/variants.py from the standard library's encoders",
            "why": why,
            "secret_hex": raw.hex(),
            "min_length": ml,
            "forms": out,
        }
    )
doc = {
    "provenance": {
        "description": "Every form flux_secret.variants claims for each secret, derived independently of flux_secret: base64 cores found empirically (the characters equal whatever bytes surround the secret), JSON bodies by a character-by-character encoder, repr bodies by forcing the quote, lines by splitlines.",
        "source": "issue 18 (mutation survivors in flux_secret/_variants.py); the variants() docstring; regenerate with: python3 tests/vectors/flux_secret/variants.py",
        "format": "case.secret_hex: the secret's bytes; case.forms: {kind, hex, text (backslashreplace, for reading)}; the set of forms must equal variants(secret, min_length=case.min_length)",
    },
    "cases": cases,
}
p = pathlib.Path(__file__).with_suffix(".json")
p.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
