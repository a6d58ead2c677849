"""Request limits and the guarded response type."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Final, cast, final

import httpx

from flux_system.net._guard import GuardedTarget

__all__ = [
    "DEFAULT_MAX_BODY",
    "MAX_REDIRECTS",
    "MAX_RETRIES",
    "GuardedResponse",
    "RequestLimits",
    "finish_response",
]

#: DESIGN §2.4: at most 5 redirect hops, whatever a caller asks.
MAX_REDIRECTS: Final = 5
#: 429 retries per hop; each waits inside the total deadline anyway.
MAX_RETRIES: Final = 5
#: Response bodies are capped at 10 MiB unless a caller chooses otherwise.
DEFAULT_MAX_BODY: Final = 10 * 1024 * 1024


@final
@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Bounds on one request of a guarded client (redirects and retries included).

    Args:
        deadline: seconds for the whole request — every hop, retry, wait and body read.
        max_body: bytes of (decoded) body kept; the rest is dropped and flagged.
        max_redirects: hops followed, 0..5.
        max_retries: ``429`` retries, 0..5; only when the wait fits in the deadline.
        default_retry_after: seconds to wait on a ``429`` without ``Retry-After``.

    Raises:
        ValueError: a bound out of range.
    """

    deadline: float = 30.0
    max_body: int = DEFAULT_MAX_BODY
    max_redirects: int = MAX_REDIRECTS
    max_retries: int = 2
    default_retry_after: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.deadline, int | float) and 0 < self.deadline <= 86400):
            raise ValueError("deadline must be in (0, 86400] seconds")
        if not (isinstance(self.max_body, int) and self.max_body >= 0):
            raise ValueError("max_body must be a non-negative int")
        if not (isinstance(self.max_redirects, int) and 0 <= self.max_redirects <= MAX_REDIRECTS):
            raise ValueError(f"max_redirects must be in 0..{MAX_REDIRECTS}")
        if not (isinstance(self.max_retries, int) and 0 <= self.max_retries <= MAX_RETRIES):
            raise ValueError(f"max_retries must be in 0..{MAX_RETRIES}")
        if not (
            isinstance(self.default_retry_after, int | float) and self.default_retry_after >= 0
        ):
            raise ValueError("default_retry_after must be >= 0")


@final
class GuardedResponse(httpx.Response):
    """An :class:`httpx.Response` already read (up to the cap), with what the guard did.

    Attributes:
        truncated: the body was longer than ``max_body`` and was cut there.
        waited: seconds slept honouring ``Retry-After`` (all hops).
        retries: ``429`` retries made (all hops).
        target: the guarded destination of the final hop (host, port, vetted addresses).

    One layer of ``gzip``/``deflate`` is undone (in bounded steps) and that header
    removed; stacked or other codings are handed out as received, header kept. When
    the body was decoded or cut, ``Content-Length`` is the length of what is kept.
    """

    truncated: bool
    waited: float
    retries: int
    target: GuardedTarget


_DROP_ON_FINISH: Final = frozenset({"content-encoding", "content-length", "transfer-encoding"})
_DROP_ON_CUT: Final = frozenset({"content-length", "transfer-encoding"})


def finish_response(
    raw: httpx.Response,
    body: bytes,
    *,
    truncated: bool,
    decoded: bool,
    waited: float,
    retries: int,
    history: list[httpx.Response],
    elapsed: datetime.timedelta,
) -> GuardedResponse:
    """Turn *raw*, closed after its body was read as *body*, into a :class:`GuardedResponse`."""
    if decoded or truncated:
        # The body we hand out is decoded and/or cut: describe that body, not the wire.
        drop = _DROP_ON_FINISH if decoded else _DROP_ON_CUT
        kept = [(k, v) for k, v in raw.headers.multi_items() if k.lower() not in drop]
        raw.headers = httpx.Headers([*kept, ("Content-Length", str(len(body)))])
    # *raw* is closed and fully read: re-label it rather than build a second response
    # (GuardedResponse adds attributes only, no state to httpx.Response's layout).
    raw.__class__ = GuardedResponse
    out = cast(GuardedResponse, raw)
    out.stream = httpx.ByteStream(body)
    # Already decoded and capped: mark it read the way ``Response.read()`` does, so
    # httpx does not run its decoders over the body a second time (~18 µs per call).
    out._content = body
    out.history = history
    out.truncated = truncated
    out.waited = waited
    out.retries = retries
    target = raw.extensions.get("flux_target")
    assert isinstance(target, GuardedTarget)
    out.target = target
    out.elapsed = elapsed
    return out
