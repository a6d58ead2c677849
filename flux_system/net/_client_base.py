"""What the sync and async guarded clients share besides the request flow itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx

from flux_system.net._flow import RequestFlow
from flux_system.net._limits import RequestLimits
from flux_system.net._url import parse_url

__all__ = ["GuardedClientBase", "client_settings"]


class GuardedClientBase(httpx._client.BaseClient):
    """Strict parsing of URL text and the start of each :class:`RequestFlow`."""

    limits: RequestLimits
    _clock: Callable[[], float]
    _wall_clock: Callable[[], float]

    def _setup(
        self,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport,
        *,
        limits: RequestLimits | None,
        timeout: httpx.Timeout | float,
        headers: Mapping[str, str] | None,
        follow_redirects: bool,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.limits, timeouts = client_settings(limits, timeout)
        options: dict[str, Any] = {
            "transport": transport,
            "trust_env": False,  # never a proxy from the environment
            "timeout": timeouts,
            "headers": headers,
            "follow_redirects": follow_redirects,
            "max_redirects": self.limits.max_redirects,
        }
        super().__init__(**options)  # httpx.Client or httpx.AsyncClient, by the MRO
        self._clock = clock
        self._wall_clock = wall_clock

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

    def _direct(self, auth: Any) -> bool:
        """True when httpx's auth and event-hook layers would do nothing for a send.

        Then the driver calls ``_send_single_request`` itself: the same transport call,
        cookie extraction and response wrapping, without the auth-flow generator and
        httpx's own redirect bookkeeping (we never let httpx follow redirects).
        """
        if isinstance(auth, httpx._client.UseClientDefault):
            auth = self.auth
        hooks = self.event_hooks
        return auth is None and not hooks["request"] and not hooks["response"]

    def _opened(self) -> None:
        """What ``httpx.Client.send`` does first: refuse a closed client, mark it open."""
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        self._state = httpx._client.ClientState.OPENED

    def _flow(self, request: httpx.Request, auth: Any, follow_redirects: Any) -> RequestFlow:
        follow = (
            self.follow_redirects
            if isinstance(follow_redirects, httpx._client.UseClientDefault)
            else bool(follow_redirects)
        )
        return RequestFlow(
            request,
            limits=self.limits,
            follow=follow,
            auth=auth,
            timeouts=self.timeout.as_dict(),
            clock=self._clock,
            wall_clock=self._wall_clock,
        )


def client_settings(
    limits: RequestLimits | None, timeout: httpx.Timeout | float
) -> tuple[RequestLimits, httpx.Timeout]:
    """Defaults for the factories: :class:`RequestLimits` and an ``httpx.Timeout``."""
    return (
        RequestLimits() if limits is None else limits,
        timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
    )
