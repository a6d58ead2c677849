"""httpx transports that dial only vetted addresses (DNS pinning inside httpcore).

How: each request is guarded (one resolution, every answer classified), then sent to
an ``httpcore`` connection pool whose *network backend* ignores DNS entirely — its
``connect_tcp(host, port)`` looks up the addresses pinned for that host in the
current context (see :mod:`._pins`) and connects to those IP literals only. Because
the pool, the ``Host`` header, TLS SNI and certificate verification all still see
the *hostname* (httpcore calls ``start_tls(server_hostname=host)``), HTTPS keeps
verifying the name the caller asked for. See docs/decisions/0030.
"""

from __future__ import annotations

import ssl
from collections.abc import Collection, Iterable, Iterator
from typing import Final, final

import httpcore
import httpx
from httpcore._backends.sync import SyncStream

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._deadline import DeadlineTimeouts
from flux_system.net._guard import GuardedTarget, guard_url
from flux_system.net._pins import (
    PINS,
    Pins,
    check_deadline,
    connect_socket,
    map_httpcore_errors,
    pinned_addresses,
)
from flux_system.net._resolver import Resolver

__all__ = ["GuardedTransport", "build_core_request", "default_ssl_context"]

_KEEPALIVE_EXPIRY: Final = 5.0
_MAX_CONNECTIONS: Final = 100  # httpx's default pool size
_MAX_KEEPALIVE: Final = 20


def default_ssl_context(verify: ssl.SSLContext | None) -> ssl.SSLContext:
    """The caller's context, or httpx's default (certifi, no environment)."""
    if verify is None:
        return httpx.create_ssl_context(trust_env=False)
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
    shown = f"[{host}]" if ":" in host else host
    default = 443 if target.scheme == "https" else 80
    host_header = shown if target.port == default else f"{shown}:{target.port}"
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"host"]
    headers.insert(0, (b"Host", host_header.encode("ascii")))
    extensions = {k: v for k, v in request.extensions.items() if k != "sni_hostname"}
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
    return core, Pins({(host, target.port): target.addresses}, remaining)


@final
class _PinnedBackend(httpcore.NetworkBackend):
    """Dials only addresses pinned in the current context; never resolves a name."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        pins, addresses = pinned_addresses(host, port)
        last: Exception | None = None
        for address in addresses:
            left = timeout if pins.remaining is None else pins.remaining()
            if timeout is not None:
                left = min(left, timeout) if left is not None else timeout
            try:
                return SyncStream(connect_socket(address, port, left, socket_options))
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable through the egress guard")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


@final
class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with map_httpcore_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


@final
class GuardedTransport(httpx.BaseTransport):
    """A sync httpx transport: guard every request, then dial only its vetted addresses.

    Guarantee: each request's host is resolved once by the guard and the TCP
    connection goes to one of the vetted addresses; no other resolution happens;
    SNI, the Host header and certificate verification use the guarded hostname; no
    proxy is ever used. A kept-alive connection to the same host and port (vetted
    by an earlier request of this transport) may be reused.
    Not guaranteed: redirect policy, deadlines and body caps — that is
    :class:`GuardedClient`'s job; this transport follows nothing by itself.

    Raises (from ``handle_request``):
        EgressDeniedError: the guard refused the URL.
        httpx.TransportError: the usual httpx errors for what happened on the wire.
    """

    def __init__(
        self,
        *,
        allow: PrivateNetAllow | None = None,
        resolver: Resolver | None = None,
        ports: Collection[int] | None = None,
        policy: EgressPolicy | None = None,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        self._allow = allow
        self._resolver = resolver
        self._ports = ports
        self._policy = policy
        self._pool = httpcore.ConnectionPool(
            ssl_context=default_ssl_context(verify),
            max_connections=_MAX_CONNECTIONS,
            max_keepalive_connections=_MAX_KEEPALIVE,
            keepalive_expiry=_KEEPALIVE_EXPIRY,
            http1=True,
            http2=False,
            retries=0,
            network_backend=_PinnedBackend(),
        )

    def guard(self, url: str) -> GuardedTarget:
        """Run the guard with this transport's grants (one resolution)."""
        return guard_url(
            url,
            allow=self._allow,
            resolver=self._resolver,
            ports=self._ports,
            policy=self._policy,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self.guard(str(request.url))
        core, pins = build_core_request(request, target)
        check_deadline(pins, target.host)  # the resolution may have used it all up
        token = PINS.set(pins)
        try:
            with map_httpcore_errors():
                response = self._pool.handle_request(core)
        finally:
            PINS.reset(token)
        assert isinstance(response.stream, Iterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions={**response.extensions, "flux_target": target},
        )

    def close(self) -> None:
        self._pool.close()
