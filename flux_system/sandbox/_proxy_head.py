"""Reading, strictly parsing and rewriting one HTTP/1.x request head for the egress proxy.

Refuse, never repair: a request line other than ``METHOD SP target SP HTTP/1.x``,
bare LF or CR, obsolete line folding, control bytes, a header name that is not a
token, both ``Content-Length`` and ``Transfer-Encoding`` (or two different lengths),
more than :data:`MAX_HEADERS` fields or more than the byte bound in total.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass
from typing import Final, final

__all__ = [
    "FRAMING",
    "MAX_HEADERS",
    "MAX_HEAD_BYTES",
    "HeadError",
    "RequestHead",
    "answer",
    "authority_of",
    "connection_names",
    "origin_head",
    "parse_head",
    "read_head",
    "split_authority",
]

MAX_HEAD_BYTES: Final = 32768  # request line + headers; far beyond any client's proxy request
MAX_HEADERS: Final = 100  # header fields per request (nginx's large buffers hold ~100)
_END: Final = b"\r\n\r\n"
_METHOD: Final = re.compile(r"^[A-Z]{1,20}$")
_TOKEN: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}$")
_VALUE_BAD: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_TARGET: Final = re.compile(r"^[\x21-\x7e]{1,8192}$")


@final
class HeadError(Exception):
    """The head could not be read or parsed; ``reason`` and ``status`` say how to answer."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@final
@dataclass(frozen=True, slots=True)
class RequestHead:
    """One parsed request head: header names as sent, in order."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def values(self, name: str) -> list[str]:
        """Every value of the header *name* (case-insensitive)."""
        low = name.lower()
        return [v for k, v in self.headers if k.lower() == low]


def read_head(sock: socket.socket, *, limit: int, timeout: float) -> tuple[bytes, bytes]:
    """Read up to the blank line that ends a request head: ``(head, rest)``.

    ``rest`` is what arrived behind the head (a body's start, a TLS hello).

    Raises:
        HeadError: ``head_too_large`` (431), ``head_timeout`` (408), ``closed`` (400).
    """
    deadline = time.monotonic() + timeout
    data = bytearray()
    scanned = 0
    while True:
        end = data.find(_END, max(0, scanned - 3))
        if end != -1:
            return bytes(data[:end]), bytes(data[end + 4 :])
        if len(data) > limit:
            raise HeadError("head_too_large", 431)
        scanned = len(data)
        left = deadline - time.monotonic()
        if left <= 0:
            raise HeadError("head_timeout", 408)
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(4096, limit + 4 - len(data) + 1))
        except TimeoutError:
            raise HeadError("head_timeout", 408) from None
        except OSError:
            raise HeadError("closed", 400) from None
        if not chunk:
            raise HeadError("closed", 400)
        data += chunk


def parse_head(head: bytes) -> RequestHead:
    """Parse a head read by :func:`read_head` (without its final blank line).

    Raises:
        HeadError: ``bad_request`` (400) with nothing repaired.
    """
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise HeadError("bad_request", 400) from None
    lines = text.split("\r\n")
    if any("\n" in line or "\r" in line for line in lines):
        raise HeadError("bad_request", 400)  # a bare LF or CR: never guess the framing
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise HeadError("bad_request", 400)
    method, target, version = parts
    if not _METHOD.match(method) or not _TARGET.match(target):
        raise HeadError("bad_request", 400)
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise HeadError("bad_request", 400)
    if len(lines) - 1 > MAX_HEADERS:
        raise HeadError("bad_request", 400)
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(name) or _VALUE_BAD.search(value):
            raise HeadError("bad_request", 400)  # also obs-fold: a name cannot start with SP
        headers.append((name, value.strip(" \t")))
    result = RequestHead(method, target, version, tuple(headers))
    lengths = set(result.values("content-length"))
    if len(lengths) > 1 or (lengths and result.values("transfer-encoding")):
        raise HeadError("bad_request", 400)
    if lengths and not next(iter(lengths)).isdigit():
        raise HeadError("bad_request", 400)
    return result


def split_authority(authority: str) -> tuple[str, int]:
    """Split a CONNECT target ``host:port`` / ``[v6]:port``; the port is mandatory.

    The host is returned as given (the egress guard normalizes and judges it).

    Raises:
        HeadError: ``bad_request`` (400).
    """
    if authority.startswith("["):
        close = authority.find("]")
        host, after = authority[: close + 1], authority[close + 1 :]
        if close == -1 or not after.startswith(":"):
            raise HeadError("bad_request", 400)
        port_text = after[1:]
    else:
        host, colon, port_text = authority.rpartition(":")
        if not colon or ":" in host:
            raise HeadError("bad_request", 400)
    if not host or not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        raise HeadError("bad_request", 400)
    if port_text.startswith("0") or not 1 <= int(port_text) <= 65535:
        raise HeadError("bad_request", 400)
    return host, int(port_text)


_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
        "host",  # replaced by the vetted URL's authority
    }
)

_STATUS_TEXT: Final = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def answer(status: int, reason: str, host: str | None) -> bytes:
    """A refusal: *status*, ``X-Flux-Denied: reason``, a one-line text body, close."""
    what = f" {host}" if host else ""
    body = f"flux egress proxy: refused{what}: {reason}\n".encode("ascii", "replace")
    return (
        f"HTTP/1.1 {status} {_STATUS_TEXT[status]}\r\n"
        f"Content-Type: text/plain\r\nX-Flux-Denied: {reason}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii") + body


def authority_of(host: str, port: int) -> str:
    """The ``Host`` value of a vetted host and port (IPv6 bracketed, port 80 implied)."""
    name = f"[{host}]" if ":" in host else host
    return name if port == 80 else f"{name}:{port}"


def connection_names(head: RequestHead) -> frozenset[str]:
    """The header names the ``Connection`` header lists (lower case): hop-by-hop, dropped."""
    return frozenset(
        token.strip().lower() for value in head.values("connection") for token in value.split(",")
    )


FRAMING: Final = frozenset({"content-length", "transfer-encoding"})
"""Headers that frame a body: a request whose ``Connection`` names one is refused (the
origin would get the body unframed, read as a second request of the client's choice)."""


def origin_head(head: RequestHead, target: str, authority: str) -> bytes:
    """The request head as the origin server gets it: origin-form, our Host, no hop-by-hop."""
    named = connection_names(head)
    lines = [f"{head.method} {target} {head.version}", f"Host: {authority}"]
    lines += [
        f"{name}: {value}"
        for name, value in head.headers
        if name.lower() not in _HOP_BY_HOP and name.lower() not in named
    ]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
