"""Strict URL and host parsing for the egress guard (refuse, never repair).

Refused at parse time: schemes other than http/https, userinfo, control bytes,
backslashes, whitespace, percent-encoded hosts, non-canonical IPv4 spellings (decimal
``2130706433``, octal ``0177.0.0.1``, hex ``0x7f.1``, short ``127.1``), IPv6 zone ids,
empty or over-long hosts, bad ports, and IDN that is not already in the form IDNA 2008
with UTS #46 mapping would produce (or does not round-trip through its A-label).
"""

from __future__ import annotations

import os
import re
import threading
import unicodedata
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Final, final

import idna

from flux_system._exceptions import EgressDeniedError, EgressReason

__all__ = ["ParsedHost", "ParsedURL", "normalize_host", "parse_url"]

MAX_URL_LENGTH: Final = 8192  # longer than any sane request line; bounds all scans
PARSE_CACHE_SIZE: Final = 256  # memoized accepted URLs: at most 256 x 8 KiB of text
MAX_HOST_INPUT: Final = 1024  # bounds IDNA work on attacker text before any check
MAX_HOST_LENGTH: Final = 253  # RFC 1035 §2.3.4 (presentation form, no trailing dot)
MAX_LABEL_LENGTH: Final = 63  # RFC 1035 §2.3.4
DEFAULT_PORTS: Final = {"http": 80, "https": 443}

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_LDH_LABEL: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DEC_OCTET: Final = re.compile(r"^(0|[1-9][0-9]{0,2})$")
_HEXISH: Final = re.compile(r"^0[xX][0-9A-Fa-f]*$")
_BAD_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs", "Co", "Cs", "Cn"})


@final
@dataclass(frozen=True, slots=True)
class ParsedHost:
    """A normalized host: ASCII, lower case, no trailing dot; ``ip`` set for literals."""

    host: str
    ip: IPv4Address | IPv6Address | None


@final
@dataclass(frozen=True, slots=True)
class ParsedURL:
    """A URL accepted by :func:`parse_url` (fragment dropped, port made explicit)."""

    scheme: str
    host: ParsedHost
    port: int
    target: str  # path and query, starting with "/"
    url: str  # the normalized URL: computed once, as parses are memoized


def _deny(reason: EgressReason, why: str, op: str, host: str | None = None) -> EgressDeniedError:
    return EgressDeniedError(f"{op}: {why}", op=op, target=host, reason=reason)


def _check_characters(text: str, op: str) -> None:
    # Fast path, at C speed: printable ASCII (no control byte, no DEL) without a
    # backslash or a space passes every check below.
    if text.isascii() and text.isprintable() and "\\" not in text and " " not in text:
        return
    for ch in text:
        code = ord(ch)
        if code < 0x20 or code == 0x7F or 0x80 <= code <= 0x9F:
            raise _deny(EgressReason.CONTROL_BYTE, "control byte", op)
        if ch == "\\":
            raise _deny(EgressReason.BACKSLASH, "backslash", op)
        if ch == " ":
            raise _deny(EgressReason.MALFORMED, "whitespace", op)
        if code > 0x7F and unicodedata.category(ch) in _BAD_CATEGORIES:
            raise _deny(EgressReason.CONTROL_BYTE, "invisible or unassigned character", op)


def parse_url(url: object, *, op: str = "guard_url") -> ParsedURL:
    """Parse *url* strictly; see the module docstring for what is refused.

    Parsing is a pure function of the text, so accepted URLs are memoized (bounded
    by :data:`PARSE_CACHE_SIZE`); refusals are recomputed every time.

    Raises:
        TypeError: *url* is not a str.
        EgressDeniedError: with the reason naming the first refusal found.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be str, not {type(url).__name__}")
    url = str.__str__(url)  # a str subclass could lie in __hash__/__eq__ (cache) and checks
    parsed = _accepted.get(url)  # keyed by the text alone: *op* only names refusals
    if parsed is None:
        parsed = _parse_url(url, op)
        with _accepted_lock:
            if len(_accepted) >= PARSE_CACHE_SIZE:
                _accepted.pop(next(iter(_accepted)))  # the oldest entry
            _accepted[url] = parsed
    return parsed


# Accepted URLs by text (a client request, then its guard, parse the same text once).
_accepted: dict[str, ParsedURL] = {}
_hosts: dict[str, ParsedHost] = {}
_accepted_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A lock another thread held at the fork would stay held in the child forever."""
    global _accepted_lock  # noqa: PLW0603 - reset once per fork, only the forking thread runs
    _accepted_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _parse_url(url: str, op: str) -> ParsedURL:
    if len(url) > MAX_URL_LENGTH:
        raise _deny(EgressReason.MALFORMED, "URL too long", op)
    _check_characters(url, op)
    match = _SCHEME.match(url)
    if match is None:
        raise _deny(EgressReason.MALFORMED, "no scheme", op)
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise _deny(EgressReason.SCHEME, f"scheme {scheme[:16]!r} is not http/https", op)
    rest = url[match.end() :]
    if not rest.startswith("//"):
        raise _deny(EgressReason.MALFORMED, "scheme not followed by //", op)
    rest = rest[2:]
    end = len(rest)
    for sep in "/?#":
        pos = rest.find(sep)
        if pos != -1:
            end = min(end, pos)
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        raise _deny(EgressReason.USERINFO, "userinfo in URL", op)
    host_text, port = _split_port(authority, scheme, op)
    host = _hosts.get(host_text)  # normalized hosts by text: a pure function, like URLs
    if host is None:
        host = normalize_host(host_text, op=op)
        with _accepted_lock:
            if len(_hosts) >= PARSE_CACHE_SIZE:
                _hosts.pop(next(iter(_hosts)))
            _hosts[host_text] = host
    tail = tail.split("#", 1)[0]
    if not tail.startswith("/"):
        tail = "/" + tail
    shown = f"[{host.host}]" if isinstance(host.ip, IPv6Address) else host.host
    shown_port = "" if DEFAULT_PORTS[scheme] == port else f":{port}"
    url_text = f"{scheme}://{shown}{shown_port}{tail}"
    return ParsedURL(scheme=scheme, host=host, port=port, target=tail, url=url_text)


def _split_port(authority: str, scheme: str, op: str) -> tuple[str, int]:
    if authority.startswith("["):
        close = authority.find("]")
        if close == -1:
            raise _deny(EgressReason.MALFORMED, "unclosed IPv6 bracket", op)
        host, after = authority[: close + 1], authority[close + 1 :]
        if after and not after.startswith(":"):
            raise _deny(EgressReason.MALFORMED, "junk after IPv6 literal", op)
        port_text = after[1:] if after else None
    else:
        if authority.count(":") > 1:
            raise _deny(EgressReason.MALFORMED, "unbracketed colon in host", op)
        host, _, port_text_raw = authority.partition(":")
        port_text = port_text_raw if ":" in authority else None
    if port_text is None:
        return host, DEFAULT_PORTS[scheme]
    return host, parse_port(port_text, op=op, host=host)


def parse_port(text: str, *, op: str, host: str | None = None) -> int:
    """Parse a URL port: decimal digits, no leading zero, 1..65535."""
    if not text.isascii() or not text.isdigit() or len(text) > 5:
        raise _deny(EgressReason.PORT, "port is not 1..65535 in decimal", op, None)
    if text.startswith("0"):
        raise _deny(EgressReason.PORT, "port with a leading zero", op, None)
    value = int(text)
    if not 1 <= value <= 65535:
        raise _deny(EgressReason.PORT, "port out of range", op, None)
    return value


def normalize_host(text: str, *, op: str = "guard_host") -> ParsedHost:
    """Normalize one host (name, dotted-quad IPv4 or IPv6 literal, bracketed or not).

    Raises:
        TypeError: *text* is not a str.
        EgressDeniedError: reasons EMPTY_HOST, HOST_TOO_LONG, ZONE_ID, NON_CANONICAL_IP,
            IDNA, MALFORMED, CONTROL_BYTE, BACKSLASH.
    """
    if not isinstance(text, str):
        raise TypeError(f"host must be str, not {type(text).__name__}")
    text = str.__str__(text)  # the plain text: a str subclass could lie in its checks
    if not text:
        raise _deny(EgressReason.EMPTY_HOST, "empty host", op)
    if len(text) > MAX_HOST_INPUT:
        raise _deny(EgressReason.HOST_TOO_LONG, "host too long", op)
    _check_characters(text, op)
    if text.startswith("[") or ":" in text:
        return _ipv6(text, op)
    if "%" in text:
        raise _deny(EgressReason.MALFORMED, "percent-encoded host", op)
    host = text[:-1] if text.endswith(".") else text
    if not host:
        raise _deny(EgressReason.EMPTY_HOST, "empty host", op)
    labels = host.split(".")
    if _looks_numeric(labels[-1]):
        return _ipv4(labels, op)
    if host.isascii():
        host = host.lower()
        if not any(label.lower().startswith("xn--") for label in labels):
            _check_ldh(host, op)
            return ParsedHost(host, None)
    ascii_host = _idna(host, op)
    _check_ldh(ascii_host, op, allow_xn=True)
    if _looks_numeric(ascii_host.rsplit(".", 1)[-1]):
        raise _deny(EgressReason.NON_CANONICAL_IP, "IDN maps to a number", op)
    return ParsedHost(ascii_host, None)


def _looks_numeric(label: str) -> bool:
    # WHATWG "ends in a number": such a host is an IPv4 attempt, never a name.
    return bool(label) and ((label.isascii() and label.isdigit()) or bool(_HEXISH.match(label)))


def _ipv4(labels: list[str], op: str) -> ParsedHost:
    if len(labels) != 4 or not all(_DEC_OCTET.match(p) and int(p) <= 255 for p in labels):
        raise _deny(EgressReason.NON_CANONICAL_IP, "non-canonical IPv4 spelling", op)
    text = ".".join(labels)
    return ParsedHost(text, IPv4Address(text))


def _ipv6(text: str, op: str) -> ParsedHost:
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if "%" in inner:
        raise _deny(EgressReason.ZONE_ID, "IPv6 zone id", op)
    if not inner or "[" in inner or "]" in inner:
        raise _deny(EgressReason.MALFORMED, "bad IPv6 literal", op)
    try:
        address = IPv6Address(inner)
    except ValueError:
        raise _deny(EgressReason.MALFORMED, "bad IPv6 literal", op) from None
    return ParsedHost(str(address), address)


def _check_ldh(host: str, op: str, *, allow_xn: bool = False) -> None:
    if len(host) > MAX_HOST_LENGTH:
        raise _deny(EgressReason.HOST_TOO_LONG, "host longer than 253", op)
    for label in host.split("."):
        if not label:
            raise _deny(EgressReason.MALFORMED, "empty label", op)
        if len(label) > MAX_LABEL_LENGTH:
            raise _deny(EgressReason.HOST_TOO_LONG, "label longer than 63", op)
        if not _LDH_LABEL.match(label):
            raise _deny(EgressReason.MALFORMED, "host is not letters, digits, hyphens", op)


def _idna(host: str, op: str) -> str:
    try:
        mapped = idna.uts46_remap(host, std3_rules=True, transitional=False)
    except idna.IDNAError:
        raise _deny(EgressReason.IDNA, "IDNA mapping failed", op) from None
    if mapped != host.lower():
        # e.g. fullwidth digits or dots, circled letters: refuse, never silently map.
        raise _deny(EgressReason.IDNA, "host changes under UTS #46 mapping", op)
    try:
        a_label = idna.encode(mapped, uts46=False).decode("ascii")
        again = idna.encode(idna.decode(a_label), uts46=False).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        raise _deny(EgressReason.IDNA, "not valid IDNA 2008", op) from None
    if again != a_label:
        raise _deny(EgressReason.IDNA, "IDN does not round-trip", op)
    return a_label
