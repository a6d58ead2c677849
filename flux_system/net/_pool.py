"""What both guarded transports share: the guard, the httpcore request, the pool options.

How pinning works: each request is guarded (one resolution, every answer classified),
then sent to an ``httpcore`` connection pool whose *network backend* ignores DNS
entirely — its ``connect_tcp(host, port)`` looks up the addresses pinned for that host
in the current context (see :mod:`._pins`) and connects to those addresses only.
Because the pool, the ``Host`` header, TLS SNI and certificate verification all still
see the *hostname* (httpcore calls ``start_tls(server_hostname=host)``), HTTPS keeps
verifying the name the caller asked for. See docs/decisions/0030.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Collection
from typing import Any, Final

import httpcore
import httpx

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._deadline import DeadlineTimeouts
from flux_system.net._guard import GuardedTarget, guard_url
from flux_system.net._pins import Pins, check_deadline
from flux_system.net._resolver import Resolver

__all__ = ["PinningTransport", "build_core_request", "default_ssl_context"]

_KEEPALIVE_EXPIRY: Final = 5.0
_MAX_CONNECTIONS: Final = 100  # httpx's default pool size
_MAX_KEEPALIVE: Final = 20


def default_ssl_context(verify: ssl.SSLContext | None) -> ssl.SSLContext:
    """The caller's context, or httpx's default (certifi, no environment — including no
    ``SSLKEYLOGFILE``, which ``ssl.create_default_context`` would otherwise obey by
    writing every session's secrets to the file it names)."""
    if verify is None:
        context = httpx.create_ssl_context(trust_env=False)
        context.keylog_filename = None  # type: ignore[assignment]
        return context
    if not isinstance(verify, ssl.SSLContext):
        raise TypeError(f"verify must be an ssl.SSLContext or None, not {type(verify).__name__}")
    if verify.verify_mode != ssl.CERT_REQUIRED or not verify.check_hostname:
        raise ValueError("verify: certificate and hostname verification must stay on")
    return verify


def build_core_request(
    request: httpx.Request, target: GuardedTarget
) -> tuple[httpcore.Request, Pins]:
    """The httpcore request for a guarded *request*, and the pins to dial it with.

    The URL's host is the vetted, normalized host (so the pool, SNI and certificate
    checks use it); the ``Host`` header is forced to it; a caller's ``sni_hostname``
    extension is dropped (the certificate must match the host that was guarded).

    Raises:
        EgressDeniedError: MALFORMED for a ``target`` extension — httpcore would send it
            as the request line, e.g. an absolute-form URL a vetted proxy would follow.
    """
    assert target.scheme is not None
    host = target.host
    if "target" in request.extensions:
        raise EgressDeniedError(
            "request: a 'target' extension would replace the vetted request line",
            op="request",
            target=host,
            reason=EgressReason.MALFORMED,
        )
    headers = [(b"Host", _host_header(host, target.scheme, target.port))]
    headers += [kv for kv in request.headers.raw if kv[0].lower() != b"host"]
    extensions = request.extensions
    if "sni_hostname" in extensions:
        extensions = {k: v for k, v in extensions.items() if k != "sni_hostname"}
    timeouts = extensions.get("timeout")
    remaining = timeouts.remaining if isinstance(timeouts, DeadlineTimeouts) else None
    core = httpcore.Request(
        method=request.method,
        url=httpcore.URL(
            scheme=target.scheme.encode("ascii"),
            host=host.encode("ascii"),
            port=target.port,
            target=request.url.raw_path,
        ),
        headers=headers,
        content=request.stream,
        extensions=extensions,
    )
    return core, Pins(host, target.port, target.addresses, remaining)


@functools.lru_cache(maxsize=256)
def _host_header(host: str, scheme: str, port: int) -> bytes:
    # Memoized: a pure function of the guarded destination (at most 256 of them kept).
    shown = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return (shown if port == default else f"{shown}:{port}").encode("ascii")


class PinningTransport:
    """The transport half shared by sync and async: the guard and the request build."""

    def __init__(
        self,
        *,
        allow: PrivateNetAllow | None = None,
        resolver: Resolver | None = None,
        ports: Collection[int] | None = None,
        policy: EgressPolicy | None = None,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        self._guard_url = functools.partial(
            guard_url, allow=allow, resolver=resolver, ports=ports, policy=policy
        )
        self._options: dict[str, Any] = {
            "ssl_context": default_ssl_context(verify),
            "max_connections": _MAX_CONNECTIONS,
            "max_keepalive_connections": _MAX_KEEPALIVE,
            "keepalive_expiry": _KEEPALIVE_EXPIRY,
            "http1": True,
            "http2": False,
            "retries": 0,
        }
        self._make_pool(**self._options)
        self._pid = os.getpid()

    def _check_fork(self) -> None:
        """In a child forked since the pool was built, replace it with a fresh one.

        The inherited pool's kept-alive connections are the parent's TCP/TLS streams
        (a request on one would interleave with the parent's on the same stream), and
        its lock may have been held by another thread at the fork. The old pool is
        dropped untouched: nothing is written or closed on the parent's streams (the
        child's copies of the sockets are only released). Idempotent; racing threads
        of the child may each build one, and every one of those is fresh.
        Not guaranteed: a response the child inherited mid-read stays the parent's.
        """
        if self._pid != os.getpid():
            self._make_pool(**self._options)
            self._pid = os.getpid()  # after the pool: a thread seeing it sees a fresh pool

    def _make_pool(self, **options: Any) -> None:
        """Build ``self._pool`` (sync or async) with *options* and a pinned backend."""
        raise NotImplementedError

    def _prepare(
        self, request: httpx.Request, target: GuardedTarget
    ) -> tuple[httpcore.Request, Pins]:
        core, pins = build_core_request(request, target)
        check_deadline(pins, target.host)  # the resolution may have used it all up
        return core, pins

    @staticmethod
    def _response(
        response: httpcore.Response, stream: Any, target: GuardedTarget
    ) -> httpx.Response:
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=stream,
            extensions={**response.extensions, "flux_target": target},
        )
