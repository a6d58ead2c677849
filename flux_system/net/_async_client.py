"""The guarded async HTTP client (:func:`guarded_async_client`)."""

from __future__ import annotations

import datetime
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, cast, final

import anyio
import httpx

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._async_transport import AsyncGuardedTransport
from flux_system.net._body import BodyCollector
from flux_system.net._deadline import DeadlineTimeouts
from flux_system.net._limits import GuardedResponse, RequestLimits, finish_response
from flux_system.net._redirects import (
    origin,
    redirect_request,
    replayable,
    retry_delay,
    url_host,
)
from flux_system.net._resolver import Resolver
from flux_system.net._url import parse_url

__all__ = ["GuardedAsyncClient", "guarded_async_client"]


def _deadline_error(host: str) -> EgressDeniedError:
    return EgressDeniedError(
        "request: total deadline expired", op="request", target=host, reason=EgressReason.DEADLINE
    )


@final
class GuardedAsyncClient(httpx.AsyncClient):
    """The async :class:`GuardedClient`: the same guarantees and the same limits."""

    def __init__(
        self,
        *,
        transport: AsyncGuardedTransport,
        limits: RequestLimits,
        timeout: httpx.Timeout,
        headers: Mapping[str, str] | None,
        follow_redirects: bool,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        super().__init__(
            transport=transport,
            trust_env=False,
            timeout=timeout,
            headers=headers,
            follow_redirects=follow_redirects,
            max_redirects=limits.max_redirects,
        )
        self.limits = limits
        self._clock = clock
        self._wall_clock = wall_clock
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

    def build_request(self, method: str, url: httpx.URL | str, **kwargs: Any) -> httpx.Request:
        """Build a request; a URL given as text is first parsed strictly (no lookup).

        httpx normalizes URLs (drops an empty userinfo, maps IDNA dots, accepts ``:+80``);
        the guard judges what the caller wrote, before that happens.

        Raises:
            EgressDeniedError: the text is refused by the strict parser.
        """
        if isinstance(url, str):
            parse_url(url, op="request")
        return super().build_request(method, url, **kwargs)

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
        follow = (
            self.follow_redirects
            if isinstance(follow_redirects, httpx._client.UseClientDefault)
            else follow_redirects
        )
        start = self._clock()
        deadline = start + self.limits.deadline
        history: list[httpx.Response] = []
        waited = 0.0
        retries = 0
        current = request
        crossed = False
        for _hop in range(self.limits.max_redirects + 1):
            response, hop_waited, hop_retries = await self._send_hop(
                current, None if crossed else auth, deadline
            )
            waited += hop_waited
            retries += hop_retries
            try:
                nxt = redirect_request(current, response) if follow else None
            except BaseException:
                await response.aclose()
                raise
            if nxt is None:
                return await self._finish(
                    response,
                    deadline=deadline,
                    start=start,
                    history=history,
                    waited=waited,
                    retries=retries,
                )
            await response.aclose()
            history.append(response)
            crossed = crossed or origin(nxt.url) != origin(current.url)
            current = nxt
        raise EgressDeniedError(
            f"redirect: more than {self.limits.max_redirects} hops",
            op="redirect",
            target=url_host(current.url),
            reason=EgressReason.REDIRECT,
        )

    async def _send_hop(
        self, request: httpx.Request, auth: Any, deadline: float
    ) -> tuple[httpx.Response, float, int]:
        waited = 0.0
        base = self.timeout.as_dict()
        for attempt in range(self.limits.max_retries + 1):
            if self._clock() >= deadline:
                raise _deadline_error(url_host(request.url))
            request.extensions["timeout"] = DeadlineTimeouts(
                base, deadline=deadline, clock=self._clock
            )
            try:
                response = await super().send(
                    request, stream=True, auth=auth, follow_redirects=False
                )
            except httpx.TimeoutException as exc:
                if self._clock() >= deadline:
                    raise _deadline_error(url_host(request.url)) from exc
                raise
            if (
                response.status_code != 429
                or attempt == self.limits.max_retries
                or not replayable(request)
            ):
                return response, waited, attempt
            delay = retry_delay(response.headers.get("retry-after"), now=self._wall_clock)
            if delay is None:
                delay = self.limits.default_retry_after
            if self._clock() + delay >= deadline:
                return response, waited, attempt
            await response.aclose()
            await self._sleep(delay)
            waited += delay
        raise AssertionError("unreachable")  # pragma: no cover

    async def _finish(
        self,
        response: httpx.Response,
        *,
        deadline: float,
        start: float,
        history: list[httpx.Response],
        waited: float,
        retries: int,
    ) -> GuardedResponse:
        collector = BodyCollector(self.limits.max_body, response.headers.get("content-encoding"))
        try:
            async for chunk in response.aiter_raw():
                if collector.feed(chunk):
                    break
                if self._clock() >= deadline:
                    raise _deadline_error(url_host(response.request.url))
        except httpx.TimeoutException as exc:
            if self._clock() >= deadline:
                raise _deadline_error(url_host(response.request.url)) from exc
            raise
        finally:
            await response.aclose()
        return finish_response(
            response,
            collector.body(),
            truncated=collector.truncated,
            decoded=collector.decoded,
            waited=waited,
            retries=retries,
            history=history,
            elapsed=datetime.timedelta(seconds=self._clock() - start),
        )


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
        limits=RequestLimits() if limits is None else limits,
        timeout=timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
        headers=headers,
        follow_redirects=follow_redirects,
        clock=clock,
        wall_clock=wall_clock,
        sleep=sleep,
    )
