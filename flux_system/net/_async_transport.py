"""The async twin of :mod:`._transport` (httpcore's AnyIO backend underneath)."""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Collection, Iterable
from typing import Final, final

import anyio.to_thread
import httpcore
import httpx

from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._guard import GuardedTarget, guard_url
from flux_system.net._pins import PINS, check_deadline, map_httpcore_errors, pinned_addresses
from flux_system.net._resolver import Resolver
from flux_system.net._transport import build_core_request, default_ssl_context

__all__ = ["AsyncGuardedTransport"]

_KEEPALIVE_EXPIRY: Final = 5.0
_MAX_CONNECTIONS: Final = 100
_MAX_KEEPALIVE: Final = 20


@final
class _AsyncPinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials only addresses pinned in the current task's context; never resolves."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        pins, addresses = pinned_addresses(host, port)
        last: Exception | None = None
        for address in addresses:
            left = timeout if pins.remaining is None else pins.remaining()
            if timeout is not None:
                left = min(left, timeout) if left is not None else timeout
            try:
                return await self._inner.connect_tcp(
                    str(address), port, left, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable through the egress guard")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@final
class _AsyncResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with map_httpcore_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


@final
class AsyncGuardedTransport(httpx.AsyncBaseTransport):
    """The async :class:`GuardedTransport`: same guarantees, same limits.

    The guard (and its one blocking DNS resolution) runs in a worker thread so the
    event loop is not blocked.
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
        self._guard = functools.partial(
            guard_url, allow=allow, resolver=resolver, ports=ports, policy=policy
        )
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=default_ssl_context(verify),
            max_connections=_MAX_CONNECTIONS,
            max_keepalive_connections=_MAX_KEEPALIVE,
            keepalive_expiry=_KEEPALIVE_EXPIRY,
            http1=True,
            http2=False,
            retries=0,
            network_backend=_AsyncPinnedBackend(),
        )

    async def guard(self, url: str) -> GuardedTarget:
        """Run the guard in a worker thread (one resolution)."""
        return await anyio.to_thread.run_sync(self._guard, url)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = await self.guard(str(request.url))
        core, pins = build_core_request(request, target)
        check_deadline(pins, target.host)  # the resolution may have used it all up
        token = PINS.set(pins)
        try:
            with map_httpcore_errors():
                response = await self._pool.handle_async_request(core)
        finally:
            PINS.reset(token)
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_AsyncResponseStream(response.stream),
            extensions={**response.extensions, "flux_target": target},
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
