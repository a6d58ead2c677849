"""The guarded async HTTP client (:func:`guarded_async_client`): the async driver."""

from __future__ import annotations

import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, cast, final

import anyio
import httpx

from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._async_transport import AsyncGuardedTransport
from flux_system.net._client_base import GuardedClientBase
from flux_system.net._flow import MAX_SENDS, RequestFlow, Wait
from flux_system.net._limits import GuardedResponse, RequestLimits
from flux_system.net._resolver import Resolver

__all__ = ["GuardedAsyncClient", "guarded_async_client"]


@final
class GuardedAsyncClient(GuardedClientBase, httpx.AsyncClient):
    """The async :class:`GuardedClient`: the same guarantees and the same limits."""

    def __init__(
        self,
        *,
        transport: AsyncGuardedTransport,
        limits: RequestLimits | None,
        timeout: httpx.Timeout | float,
        headers: Mapping[str, str] | None,
        follow_redirects: bool,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._setup(
            transport,
            limits=limits,
            timeout=timeout,
            headers=headers,
            follow_redirects=follow_redirects,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._sleep = sleep

    async def request(self, method: str, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        """As :meth:`httpx.Client.request`; returns a :class:`GuardedResponse`."""
        return cast(GuardedResponse, await super().request(method, url, **kwargs))

    async def get(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, await super().get(url, **kwargs))

    async def options(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, await super().options(url, **kwargs))

    async def head(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, await super().head(url, **kwargs))

    async def post(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, await super().post(url, **kwargs))

    async def put(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, await super().put(url, **kwargs))

    async def patch(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, await super().patch(url, **kwargs))

    async def delete(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, await super().delete(url, **kwargs))

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: bool | httpx._client.UseClientDefault = httpx.USE_CLIENT_DEFAULT,
    ) -> GuardedResponse:
        """Send *request* under the guard and the limits (see :class:`GuardedClient`).

        Raises:
            EgressDeniedError: a hop, a redirect or the deadline (its reason).
            httpx.HTTPError: a transport or protocol error.
        """
        flow = self._flow(request, auth, follow_redirects)
        for _ in range(MAX_SENDS):
            current, hop_auth = flow.attempt()
            try:
                if self._direct(hop_auth):  # no auth, no hooks: skip httpx's no-op layers
                    self._opened()
                    response = await self._send_single_request(current)
                else:
                    response = await super().send(
                        current, stream=True, auth=hop_auth, follow_redirects=False
                    )
            except httpx.TimeoutException as exc:
                flow.timed_out(exc)
                raise
            try:
                step = flow.next_step(response)
            except BaseException:
                await response.aclose()
                raise
            if step is None:
                return await self._read(response, flow)
            await response.aclose()
            if isinstance(step, Wait):
                await self._sleep(step.delay)
        raise AssertionError("unreachable: the flow bounds the sends")  # pragma: no cover

    async def _read(self, response: httpx.Response, flow: RequestFlow) -> GuardedResponse:
        body = flow.collector(response)
        try:
            async for chunk in response.aiter_raw():
                if body.feed(chunk):
                    break
                flow.check_deadline()
        except httpx.TimeoutException as exc:
            flow.timed_out(exc)
            raise
        finally:
            await response.aclose()
        return flow.finish(response, body)


def guarded_async_client(
    *,
    allow: PrivateNetAllow | None = None,
    resolver: Resolver | None = None,
    ports: Collection[int] | None = None,
    policy: EgressPolicy | None = None,
    verify: ssl.SSLContext | None = None,
    limits: RequestLimits | None = None,
    timeout: httpx.Timeout | float = 10.0,
    headers: Mapping[str, str] | None = None,
    follow_redirects: bool = True,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> GuardedAsyncClient:
    """An :class:`httpx.AsyncClient` with the guarantees of :func:`guarded_client`.

    Args and Raises: as :func:`guarded_client` (*sleep* is awaitable).
    """
    return GuardedAsyncClient(
        transport=AsyncGuardedTransport(
            allow=allow, resolver=resolver, ports=ports, policy=policy, verify=verify
        ),
        limits=limits,
        timeout=timeout,
        headers=headers,
        follow_redirects=follow_redirects,
        clock=clock,
        wall_clock=wall_clock,
        sleep=sleep,
    )
