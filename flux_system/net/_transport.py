"""The sync guarded transport: httpcore's pool over a backend that dials only pins."""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Iterator
from typing import Any, final

import httpcore
import httpx
from httpcore._backends.sync import SyncStream

from flux_system.net._guard import GuardedTarget
from flux_system.net._pins import (
    PINS,
    Pins,
    capped,
    connect_socket,
    dial_attempts,
    map_httpcore_errors,
)
from flux_system.net._pool import PinningTransport

__all__ = ["GuardedTransport"]


@final
class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every operation is capped by the request's total deadline."""

    __slots__ = ("_inner",)

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, capped(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, capped(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, capped(timeout))
        return _DeadlineStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


@final
class _PinnedBackend(httpcore.NetworkBackend):
    """Dials only addresses pinned in the current context; never resolves a name."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        attempts = dial_attempts(host, port, timeout, local_address)
        for address, left in attempts:
            try:
                return _DeadlineStream(
                    SyncStream(connect_socket(address, port, left, socket_options))
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                attempts.failed(exc)
        raise attempts.error()

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable through the egress guard")

    def sleep(self, seconds: float) -> None:
        httpcore.SyncBackend().sleep(seconds)


@final
class _ResponseStream(httpx.SyncByteStream):
    """The body, read with the request's pins in context (so its deadline caps reads)."""

    def __init__(self, stream: Iterable[bytes], pins: Pins) -> None:
        self._stream = stream
        self._pins = pins

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._stream)
        while True:
            token = PINS.set(self._pins)
            try:
                with map_httpcore_errors():
                    chunk = next(chunks, None)
            finally:
                PINS.reset(token)
            if chunk is None:
                return
            yield chunk

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


@final
class GuardedTransport(PinningTransport, httpx.BaseTransport):
    """A sync httpx transport: guard every request, then dial only its vetted addresses.

    Guarantee: each request's host is resolved once by the guard (a
    :class:`DnsResolver` may answer from its cache of raw answers, classified afresh
    under this transport's grants) and the TCP connection goes to one of the vetted
    addresses; no other resolution happens (not
    even ``getaddrinfo`` on the literal); SNI, the Host header and certificate
    verification use the guarded hostname; no proxy is ever used. A kept-alive
    connection to the same host and port (vetted by an earlier request of this
    transport) may be reused; connections are never shared between host names.
    Not guaranteed: redirect policy, deadlines and body caps — that is
    :class:`GuardedClient`'s job; this transport follows nothing by itself.

    Args: as :func:`guard_url` (*allow*, *resolver*, *ports*, *policy*) and *verify*
    as :func:`guarded_client`.

    Raises (from ``handle_request``):
        EgressDeniedError: the guard refused the URL.
        httpx.TransportError: the usual httpx errors for what happened on the wire.
    """

    def _make_pool(self, **options: Any) -> None:
        self._pool = httpcore.ConnectionPool(network_backend=_PinnedBackend(), **options)

    def guard(self, url: str) -> GuardedTarget:
        """Run the guard with this transport's grants (one resolution)."""
        return self._guard_url(url)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self._guard_url(str(request.url))
        core, pins = self._prepare(request, target)
        self._check_fork()
        token = PINS.set(pins)
        try:
            with map_httpcore_errors():
                response = self._pool.handle_request(core)
        finally:
            PINS.reset(token)
        assert isinstance(response.stream, Iterable)
        return self._response(response, _ResponseStream(response.stream, pins), target)

    def close(self) -> None:
        self._check_fork()  # in a forked child: never close the parent's connections
        self._pool.close()
