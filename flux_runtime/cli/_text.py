"""Showing names (commands, paths, hosts) in messages safely.

Guarantee: :func:`shown` returns one line of printable text whatever it is given — a
control character (newline, escape, DEL, C1), a lone surrogate or a quote is shown as
an escape, so a hostile name cannot forge lines or drive the terminal. A plain name is
shown as it is; anything with a space or an escape is put in single quotes.
:func:`shown_text` does the same for a text of several lines (a model's answer): it
keeps newlines and tabs, and escapes every other control character (an ANSI or OSC
sequence — a clipboard write, a cleared screen — never reaches the terminal).
"""

from __future__ import annotations

__all__ = ["shown", "shown_text"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", "'": "\\'"}
_MAX_SHOWN = 512  # characters of a name shown; the rest is elided (a message stays short)


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    if ch.isprintable() and not ("\ud800" <= ch <= "\udfff"):
        return ch
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(name: object) -> str:
    """*name* (a str, bytes or path) as one safe line, quoted when needed."""
    raw = name.decode("utf-8", errors="surrogateescape") if isinstance(name, bytes) else None
    text = raw if raw is not None else str(name)
    elided = len(text) > _MAX_SHOWN
    if elided:
        text = text[:_MAX_SHOWN]
    body = "".join(_escape(ch) for ch in text)
    if elided:
        body += "..."
    if body == text and text and " " not in text:
        return text
    return f"'{body}'"


def shown_text(text: object) -> str:
    """*text* with every control character but newline and tab escaped (module docstring)."""
    body = str(text)
    if body.isascii() and body.isprintable():
        return body
    return "".join(
        ch
        if ch in "\n\t" or (ch.isprintable() and not ("\ud800" <= ch <= "\udfff"))
        else _escape(ch)
        for ch in body
    )
