"""The encoded forms of a secret that the redactor masks.

A secret rarely appears only raw: it is logged inside JSON, put in a query string,
base64-encoded into a basic-auth header or a larger blob, hex-dumped. Each of these is
computed here once, at registration, as a literal byte pattern; the matcher then finds
all of them in one pass.

Base64 inside a longer blob: the secret may start at any of three byte offsets modulo 3
of the encoded data. Writing the encoded data as a stream of 6-bit characters, the
secret's bits occupy ``[8k, 8(k+n))`` for offset ``k`` and length ``n``; exactly the
characters whose 6 bits lie inside that range are fixed by the secret alone, whatever
surrounds it. That run (the *core*) is a pattern for each offset; so are the forms that
end the data (the core plus the final partial character, with and without ``=``
padding), so that a secret at the end of a blob is masked to the last character.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

__all__ = ["variants"]


def _base64_forms(secret: bytes) -> list[bytes]:
    n = len(secret)
    out: list[bytes] = []
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for k in range(3):
            encoded = encode(bytes(k) + secret)
            first = (8 * k + 5) // 6  # first character not touched by the k prefix bytes
            last = (8 * (k + n)) // 6  # one past the last character fixed by the secret
            out.append(encoded[first:last])  # core: found inside any longer blob
            out.append(encoded[first:])  # the secret ends the blob, padded
            out.append(encoded[first:].rstrip(b"="))  # ... unpadded
    return out


# Characters other JSON encoders escape by default as \u escapes: Go's encoding/json
# (HTML-safe: "<", ">", "&", U+2028, U+2029), .NET's System.Text.Json (its default
# encoder: '"', "<", ">", "&", "'", "+" and every non-ASCII character, upper-case hex).
_GO_ESCAPED = "<>&\u2028\u2029"
_DOTNET_ESCAPED = "<>&'+\u2028\u2029"
_HEX_ESCAPE = re.compile(r"\\u[0-9a-f]{4}")


def _escape_also(body: str, chars: str, *, quote: bool) -> str:
    """*body* (a JSON string body as ``json.dumps`` writes it) with *chars* (and the
    quote, if *quote*) written as ``\\u`` escapes too. Exact by plain replacement: none
    of these characters occurs inside an escape sequence, and a quote only as ``\\"``."""
    if quote:
        body = body.replace('\\"', "\\u0022")
    for char in chars:
        body = body.replace(char, f"\\u{ord(char):04x}")
    return body


def _upper_hex(body: str) -> str:
    """*body* with the hex digits of its ``\\u`` escapes in upper case."""
    return _HEX_ESCAPE.sub(lambda m: "\\u" + m.group(0)[2:].upper(), body)


def _text_forms(text: str) -> list[bytes]:
    out: list[bytes] = []
    for ensure_ascii in (False, True):
        plain = json.dumps(text, ensure_ascii=ensure_ascii)[1:-1]
        go = _escape_also(plain, _GO_ESCAPED, quote=False)
        dotnet = _escape_also(plain, _DOTNET_ESCAPED, quote=True)
        for body in (plain, go, dotnet):
            for form in (body, _upper_hex(body)):
                out.append(form.encode("utf-8", "surrogatepass"))
                out.append(form.replace("/", "\\/").encode("utf-8", "surrogatepass"))
    return out


def _quote_forms(body: str) -> list[str]:
    """*body*, a ``repr`` body with every ``'`` escaped, and the same with them not.

    ``repr`` picks its quote from the whole string, so a secret inside a longer one is
    written either way; ``\\'`` only ever stands for an escaped quote (a backslash of
    the value is itself escaped, ``\\\\``), so dropping the escape is exact.
    """
    return [body, body.replace("\\'", "'")]


def _repr_forms(secret: bytes, text: str | None) -> list[bytes]:
    """The ``repr``/``ascii`` bodies of the value as ``str`` (when UTF-8) and ``bytes``,
    with ``'`` escaped (a ``'``-quoted repr) and not (a ``"``-quoted one). A ``"`` is
    never escaped by ``repr``: prefixing one forces the ``'`` quote."""
    out: list[bytes] = []
    if text is not None:
        for body in (repr('"' + text)[2:-1], ascii('"' + text)[2:-1]):
            out += [form.encode("utf-8", "surrogatepass") for form in _quote_forms(body)]
    out += [form.encode("ascii") for form in _quote_forms(repr(b'"' + secret)[3:-1])]
    return out


def variants(secret: bytes, *, min_length: int) -> list[bytes]:
    """Return the distinct byte patterns that mask *secret*, the raw form first.

    Guarantee: the raw secret; base64 (standard and URL-safe alphabets, with and
    without padding, at the three byte offsets); JSON string escapes (ASCII-only and
    not, with and without ``\\/``, plain or with the HTML-safe escapes Go's and .NET's
    encoders add, with lower- and upper-case hex digits) and Python ``repr``/``ascii``
    escapes when the secret is UTF-8 text; the ``repr`` of the bytes (each ``repr``
    with ``'`` escaped and not, as the quote ``repr`` picks depends on the text around
    the secret); hex (lower and upper); and each line
    of a multi-line secret that is at least *min_length* bytes. Every pattern is at least
    six bytes long when the secret is (the shortest, a base64 core, has at least
    ``(8n - 10) / 6`` characters for an ``n``-byte secret).

    Percent-encoding and XML/HTML entities are not listed here: any mix of literal and
    escaped bytes is matched by decoding the text (``_escapes.py``), as the forms are
    too many to list.

    Not guaranteed: base64 wrapped across lines (MIME), other encodings (UTF-16,
    double URL-encoding, gzip), or a secret cut in half and encoded as two parts.

    Args:
        secret: the raw secret bytes (UTF-8 for a ``str`` secret).
        min_length: the minimum length a line of a multi-line secret needs to be
            registered on its own.
    """
    forms: list[bytes] = [secret]
    forms += _base64_forms(secret)
    forms.append(binascii.hexlify(secret))
    forms.append(binascii.hexlify(secret).upper())
    try:
        text: str | None = secret.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        forms += _text_forms(text)
    forms += _repr_forms(secret, text)  # %r, exceptions, b'...' as logged
    lines = secret.splitlines()
    if len(lines) > 1:
        forms += [line for line in lines if len(line) >= min_length]
    seen: set[bytes] = set()
    out: list[bytes] = []
    for form in forms:
        if form and form not in seen:
            seen.add(form)
            out.append(form)
    return out
