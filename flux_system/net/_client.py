"""The guarded sync HTTP client (:func:`guarded_client`): a driver of :class:`RequestFlow`."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, cast, final

import httpx

from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._client_base import GuardedClientBase
from flux_system.net._flow import MAX_SENDS, RequestFlow, Wait
from flux_system.net._limits import GuardedResponse, RequestLimits
from flux_system.net._resolver import Resolver
from flux_system.net._transport import GuardedTransport

__all__ = ["GuardedClient", "guarded_client"]


@final
class GuardedClient(GuardedClientBase, httpx.Client):
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
    the deadline is checked right after it, before any connection); the body cap
    against a response event hook or an auth flow that reads the body itself
    (``response.read()``): httpx runs them on the raw response, before the capped
    read, and decodes what they read uncapped — hooks should look at status and
    headers only.
    """

    def __init__(
        self,
        *,
        transport: GuardedTransport,
        limits: RequestLimits | None,
        timeout: httpx.Timeout | float,
        headers: Mapping[str, str] | None,
        follow_redirects: bool,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        sleep: Callable[[float], None],
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
        flow = self._flow(request, auth, follow_redirects)
        for _ in range(MAX_SENDS):
            current, hop_auth = flow.attempt()
            try:
                if self._direct(hop_auth):  # no auth, no hooks: skip httpx's no-op layers
                    self._opened()
                    response = self._send_single_request(current)
                else:
                    response = super().send(
                        current, stream=True, auth=hop_auth, follow_redirects=False
                    )
            except httpx.TimeoutException as exc:
                flow.timed_out(exc)
                raise
            try:
                step = flow.next_step(response)
            except BaseException:
                response.close()
                raise
            if step is None:
                return self._read(response, flow)
            response.close()
            if isinstance(step, Wait):
                self._sleep(step.delay)
        raise AssertionError("unreachable: the flow bounds the sends")  # pragma: no cover

    def _read(self, response: httpx.Response, flow: RequestFlow) -> GuardedResponse:
        body = flow.collector(response)
        try:
            for chunk in response.iter_raw():
                if body.feed(chunk):
                    break
                flow.check_deadline()
        except httpx.TimeoutException as exc:
            flow.timed_out(exc)
            raise
        finally:
            response.close()
        return flow.finish(response, body)


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
        limits=limits,
        timeout=timeout,
        headers=headers,
        follow_redirects=follow_redirects,
        clock=clock,
        wall_clock=wall_clock,
        sleep=sleep,
    )
