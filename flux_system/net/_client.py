"""The guarded sync HTTP client (:func:`guarded_client`)."""

from __future__ import annotations

import datetime
import ssl
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, cast, final

import httpx

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._allow import EgressPolicy, PrivateNetAllow
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
from flux_system.net._transport import GuardedTransport
from flux_system.net._url import parse_url

__all__ = ["GuardedClient", "guarded_client"]


def _deadline_error(host: str) -> EgressDeniedError:
    return EgressDeniedError(
        "request: total deadline expired", op="request", target=host, reason=EgressReason.DEADLINE
    )


@final
class GuardedClient(httpx.Client):
    """An :class:`httpx.Client` whose every request crosses the egress guard.

    Build it with :func:`guarded_client`. Every request (``get``, ``post``, ``send``,
    ``stream``...) is sent through :meth:`send`, which applies the limits below, and
    every hop through a :class:`GuardedTransport` (one resolution, dial only vetted
    addresses). Guarantee: redirects are followed only after re-guarding and
    re-pinning each hop, at most ``limits.max_redirects`` (≤ 5); https→http is
    refused; cross-origin hops drop the caller's headers; request bodies are never
    replayed by a redirect; a total deadline covers the whole request (hops, retries,
    ``Retry-After`` waits, body); ``429`` is retried within it; ``503`` is not
    retried; the body is read up to ``limits.max_body`` with a truncation flag. No
    proxy from the environment is ever used (``trust_env=False``).
    Not guaranteed: streaming — the body is always read (up to the cap) before
    :meth:`send` returns, also for ``client.stream(...)``; a DNS lookup in progress is
    not interrupted by the deadline (it is bounded by the resolver's own timeout, and
    the deadline is checked right after it, before any connection).
    """

    def __init__(
        self,
        *,
        transport: GuardedTransport,
        limits: RequestLimits,
        timeout: httpx.Timeout,
        headers: Mapping[str, str] | None,
        follow_redirects: bool,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        sleep: Callable[[float], None],
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

    def request(self, method: str, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        """As :meth:`httpx.Client.request`; returns a :class:`GuardedResponse`."""
        return cast(GuardedResponse, super().request(method, url, **kwargs))

    def get(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, super().get(url, **kwargs))

    def options(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, super().options(url, **kwargs))

    def head(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, super().head(url, **kwargs))

    def post(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, super().post(url, **kwargs))

    def put(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, super().put(url, **kwargs))

    def patch(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, super().patch(url, **kwargs))

    def delete(self, url: httpx.URL | str, **kwargs: Any) -> GuardedResponse:
        return cast(GuardedResponse, super().delete(url, **kwargs))

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

    def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: bool | httpx._client.UseClientDefault = httpx.USE_CLIENT_DEFAULT,
    ) -> GuardedResponse:
        """Send *request* under the guard and the limits (see the class docstring).

        Raises:
            EgressDeniedError: a hop was refused (its reason), a redirect was refused
                (REDIRECT) or the total deadline expired (DEADLINE).
            httpx.HTTPError: a transport or protocol error.
        """
        follow = (
            self.follow_redirects
            if isinstance(follow_redirects, httpx._client.UseClientDefault)
            else follow_redirects
        )
        limits = self.limits
        start = self._clock()
        deadline = start + limits.deadline
        history: list[httpx.Response] = []
        waited = 0.0
        retries = 0
        current = request
        crossed = False  # once a hop leaves the first origin, caller auth is never sent
        for _hop in range(limits.max_redirects + 1):
            hop_auth = None if crossed else auth
            response, hop_waited, hop_retries = self._send_hop(current, hop_auth, deadline)
            waited += hop_waited
            retries += hop_retries
            try:
                nxt = redirect_request(current, response) if follow else None
            except BaseException:
                response.close()
                raise
            if nxt is None:
                return self._finish(
                    response,
                    deadline=deadline,
                    start=start,
                    history=history,
                    waited=waited,
                    retries=retries,
                )
            response.close()
            history.append(response)
            crossed = crossed or origin(nxt.url) != origin(current.url)
            current = nxt
        raise EgressDeniedError(
            f"redirect: more than {limits.max_redirects} hops",
            op="redirect",
            target=url_host(current.url),
            reason=EgressReason.REDIRECT,
        )

    def _send_hop(
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
                response = super().send(
                    request,
                    stream=True,
                    auth=auth if auth is not None else None,
                    follow_redirects=False,
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
                return response, waited, attempt  # cannot wait within the deadline
            response.close()
            self._sleep(delay)
            waited += delay
        raise AssertionError("unreachable")  # pragma: no cover

    def _finish(
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
            for chunk in response.iter_raw():
                if collector.feed(chunk):
                    break
                if self._clock() >= deadline:
                    raise _deadline_error(url_host(response.request.url))
        except httpx.TimeoutException as exc:
            if self._clock() >= deadline:
                raise _deadline_error(url_host(response.request.url)) from exc
            raise
        finally:
            response.close()
        elapsed = datetime.timedelta(seconds=self._clock() - start)
        return finish_response(
            response,
            collector.body(),
            truncated=collector.truncated,
            decoded=collector.decoded,
            waited=waited,
            retries=retries,
            history=history,
            elapsed=elapsed,
        )


def guarded_client(
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
    sleep: Callable[[float], None] = time.sleep,
) -> GuardedClient:
    """A sync :class:`httpx.Client` that reaches only what the egress guard accepts.

    Guarantee: see :class:`GuardedClient` and :func:`guard_url` — one resolution per
    hop, connections only to vetted addresses, SNI/Host/certificate on the hostname,
    no environment proxies, redirect/deadline/retry/body-cap rules.
    Not guaranteed: that a vetted public address is benign; HTTP/2 (not offered).

    Args:
        allow, resolver, ports, policy: as :func:`guard_url`.
        verify: an ``ssl.SSLContext`` with verification on; ``None``: certifi's CAs.
            Turning verification off is not offered.
        limits: deadline, body cap, redirects, retries (:class:`RequestLimits`).
        timeout: httpx per-phase timeouts (each also capped by the deadline).
        headers: default headers (dropped on cross-origin hops like any caller header).
        follow_redirects: follow redirects (under the rules) by default.
        clock, wall_clock, sleep: monotonic clock, wall clock (HTTP-date
            ``Retry-After``) and sleep — parameters so tests can fix them.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    return GuardedClient(
        transport=GuardedTransport(
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
