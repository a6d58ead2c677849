"""The async guarded transport: httpcore's AnyIO pool over a backend that dials only pins."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any, final

import anyio.to_thread
import httpcore
import httpx

from flux_system.net._guard import GuardedTarget
from flux_system.net._pins import PINS, Pins, capped, dial_attempts, map_httpcore_errors
from flux_system.net._pool import PinningTransport

__all__ = ["AsyncGuardedTransport"]


@final
class _AsyncDeadlineStream(httpcore.AsyncNetworkStream):
    """A socket stream whose every operation is capped by the request's total deadline."""

    __slots__ = ("_inner",)

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, capped(timeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, capped(timeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        inner = await self._inner.start_tls(ssl_context, server_hostname, capped(timeout))
        return _AsyncDeadlineStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


@final
class _AsyncPinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials only addresses pinned in the current task's context; never resolves.

    AnyIO's ``connect_tcp`` connects an IP literal directly (no ``getaddrinfo``).
    """

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
        attempts = dial_attempts(host, port, timeout, local_address)
        for address, left in attempts:
            try:
                stream = await self._inner.connect_tcp(
                    str(address), port, left, None, socket_options
                )
                return _AsyncDeadlineStream(stream)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                attempts.failed(exc)
        raise attempts.error()

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
    """The body, read with the request's pins in context (so its deadline caps reads)."""

    def __init__(self, stream: AsyncIterable[bytes], pins: Pins) -> None:
        self._stream = stream
        self._pins = pins

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._stream.__aiter__()
        while True:
            token = PINS.set(self._pins)
            try:
                with map_httpcore_errors():
                    chunk = await anext(chunks, None)
            finally:
                PINS.reset(token)
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


@final
class AsyncGuardedTransport(PinningTransport, httpx.AsyncBaseTransport):
    """The async :class:`GuardedTransport`: same guarantees, same limits.

    The guard (and its one blocking DNS resolution) runs in a worker thread so the
    event loop is not blocked.
    """

    def _make_pool(self, **options: Any) -> None:
        self._pool = httpcore.AsyncConnectionPool(network_backend=_AsyncPinnedBackend(), **options)

    async def guard(self, url: str) -> GuardedTarget:
        """Run the guard in a worker thread (one resolution)."""
        return await anyio.to_thread.run_sync(self._guard_url, url)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = await self.guard(str(request.url))
        core, pins = self._prepare(request, target)
        self._check_fork()
        token = PINS.set(pins)
        try:
            with map_httpcore_errors():
                response = await self._pool.handle_async_request(core)
        finally:
            PINS.reset(token)
        assert isinstance(response.stream, AsyncIterable)
        return self._response(response, _AsyncResponseStream(response.stream, pins), target)

    async def aclose(self) -> None:
        self._check_fork()  # in a forked child: never close the parent's connections
        await self._pool.aclose()
