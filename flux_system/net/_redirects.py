"""Redirect and retry policy of the guarded clients (pure functions, no IO)."""

from __future__ import annotations

import email.utils
import re
from collections.abc import Callable
from typing import Final

import httpx

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._url import parse_url

__all__ = [
    "MAX_RETRY_AFTER",
    "REDIRECT_CODES",
    "has_body",
    "origin",
    "redirect_request",
    "replayable",
    "retry_delay",
    "url_host",
]

_ABSOLUTE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
REDIRECT_CODES: Final = frozenset({301, 302, 303, 307, 308})
#: A Retry-After further out than this is treated as "not within any deadline".
MAX_RETRY_AFTER: Final = 86400.0
#: Headers kept on a cross-origin hop: nothing the caller set, only content negotiation.
_CROSS_ORIGIN_KEEP: Final = frozenset({b"accept", b"accept-encoding", b"user-agent"})
_BODY_HEADERS: Final = frozenset({b"content-length", b"content-type", b"transfer-encoding"})


def url_host(url: httpx.URL) -> str:
    """The URL's host as sent (ASCII), never IDNA-decoded (httpx's ``.host`` may raise)."""
    return url.raw_host.decode("ascii", "replace")


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """(scheme, host, port) — what "same origin" compares."""
    return (url.scheme, url_host(url), url.port)


def has_body(request: httpx.Request) -> bool:
    """True when *request* carries a body (non-zero length or chunked)."""
    length = request.headers.get("content-length")
    return "transfer-encoding" in request.headers or (length is not None and length != "0")


def replayable(request: httpx.Request) -> bool:
    """True when *request* can be sent again unchanged (no body, or an in-memory body)."""
    return not has_body(request) or isinstance(request.stream, httpx.ByteStream)


def redirect_request(request: httpx.Request, response: httpx.Response) -> httpx.Request | None:
    """The next hop's request for a redirect *response*, or ``None`` if it is not one.

    Rules: https→http is refused; a hop that keeps the method of a request with a
    body (307/308, or 301/302 after PUT/PATCH/DELETE...) is refused, as the body is
    never replayed; 303 (and 301/302 after POST) become a body-less GET; a
    cross-origin hop drops every header the caller set (cookies, authorization, API
    keys...) and keeps only content negotiation; once dropped they stay dropped.
    The new URL is guarded again by the transport when it is sent.

    Raises:
        EgressDeniedError: reason REDIRECT.
    """
    if response.status_code not in REDIRECT_CODES:
        return None
    location = response.headers.get("location")
    if location is None:
        return None
    host = url_host(request.url)
    if _ABSOLUTE.match(location):
        parse_url(location, op="redirect")  # the raw Location, before httpx normalizes it
    try:
        url = request.url.join(location)
    except httpx.InvalidURL as exc:
        raise _refused("unparsable Location", host) from exc
    if request.url.scheme == "https" and url.scheme != "https":
        raise _refused("https to http redirect", host)
    if url.scheme not in ("http", "https"):
        raise _refused("redirect to a non-http scheme", host)
    method = request.method
    status = response.status_code
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method = "GET"
    if has_body(request) and method == request.method:
        # 307/308 would replay the body; a 301/302 after PUT/PATCH/... would resend the
        # same method without it. Neither happens: the redirect is refused.
        raise _refused(f"{status} would resend {method[:16]} without replaying its body", host)
    same_origin = origin(url) == origin(request.url)
    headers = [
        (k, v)
        for k, v in request.headers.raw
        if k.lower() != b"host"
        and k.lower() not in _BODY_HEADERS
        and (same_origin or k.lower() in _CROSS_ORIGIN_KEEP)
    ]
    return httpx.Request(method, url, headers=headers, extensions=dict(request.extensions))


def _refused(why: str, host: str) -> EgressDeniedError:
    return EgressDeniedError(
        f"redirect: {why}", op="redirect", target=host, reason=EgressReason.REDIRECT
    )


def retry_delay(value: str | None, *, now: Callable[[], float]) -> float | None:
    """Seconds a ``Retry-After`` value asks to wait, or ``None`` if absent or unusable.

    Both forms of RFC 9110 §10.2.3: delay-seconds (``120``) and an HTTP-date
    (``Wed, 21 Oct 2015 07:28:00 GMT``, compared with *now*, a wall clock). A date in
    the past means 0.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return min(float(int(text[:12])), MAX_RETRY_AFTER + 1)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):  # e.g. a zone of +9999999999
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, min(when.timestamp() - now(), MAX_RETRY_AFTER + 1))
