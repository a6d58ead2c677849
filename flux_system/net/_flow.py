"""The decisions of one guarded request, without IO (as h11 is to httpcore).

:class:`RequestFlow` owns everything the sync and async clients decide the same way:
the total deadline and the per-phase timeouts it caps, ``429`` retries and their
``Retry-After`` waits, which redirects are followed and what a hop keeps (see
:func:`._redirects.redirect_request`), caller auth across origins, the body cap, and
the :class:`GuardedResponse` handed back. The clients only drive it: send what it says,
sleep what it says, feed it what they read.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, final

import httpx

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._body import BodyCollector
from flux_system.net._deadline import DeadlineTimeouts
from flux_system.net._limits import (
    MAX_REDIRECTS,
    MAX_RETRIES,
    GuardedResponse,
    RequestLimits,
    finish_response,
)
from flux_system.net._redirects import origin, redirect_request, replayable, retry_delay, url_host

__all__ = ["FOLLOW", "MAX_SENDS", "Follow", "RequestFlow", "Wait"]

#: Requests one call may send: every hop (≤ 5 redirects) retried ≤ 5 times.
MAX_SENDS: Final = (MAX_REDIRECTS + 1) * (MAX_RETRIES + 1)


@final
@dataclass(frozen=True, slots=True)
class Wait:
    """Sleep *delay* seconds, then send :attr:`RequestFlow.request` again (a ``429``)."""

    delay: float


@final
@dataclass(frozen=True, slots=True)
class Follow:
    """Send :attr:`RequestFlow.request` (the next redirect hop) right away."""


FOLLOW: Final = Follow()


@final
class RequestFlow:
    """One call of ``send``: the state between attempts, hops and the body.

    Guarantee: :meth:`attempt` never hands out a request once the deadline has passed;
    at most :data:`MAX_SENDS` attempts are ever asked for; a refused redirect raises.
    Not guaranteed: anything about the wire — the driver does the IO.
    """

    __slots__ = (
        "_attempt",
        "_auth",
        "_base",
        "_clock",
        "_crossed",
        "_follow",
        "_hops",
        "_limits",
        "_wall_clock",
        "deadline",
        "history",
        "request",
        "retries",
        "start",
        "waited",
    )

    def __init__(
        self,
        request: httpx.Request,
        *,
        limits: RequestLimits,
        follow: bool,
        auth: Any,
        timeouts: Mapping[str, float | None],
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.request = request
        self._limits = limits
        self._follow = follow
        self._auth = auth
        self._base = timeouts
        self._clock = clock
        self._wall_clock = wall_clock
        self.start = clock()
        self.deadline = self.start + limits.deadline
        self.history: list[httpx.Response] = []
        self.waited = 0.0
        self.retries = 0
        self._attempt = 0
        self._hops = 0
        self._crossed = False  # once a hop leaves the first origin, caller auth stays off

    def attempt(self) -> tuple[httpx.Request, Any]:
        """The request to send now and the auth to send it with.

        Raises:
            EgressDeniedError: DEADLINE.
        """
        self.check_deadline()
        self.request.extensions["timeout"] = DeadlineTimeouts(
            self._base, deadline=self.deadline, clock=self._clock
        )
        return self.request, None if self._crossed else self._auth

    def check_deadline(self) -> None:
        """Raises: EgressDeniedError (DEADLINE) once the total deadline has passed."""
        if self._clock() >= self.deadline:
            raise self._expired()

    def timed_out(self, exc: httpx.TimeoutException) -> None:
        """A phase timed out: DEADLINE if that was the total deadline, else nothing."""
        if self._clock() >= self.deadline:
            raise self._expired() from exc

    def _expired(self) -> EgressDeniedError:
        return EgressDeniedError(
            "request: total deadline expired",
            op="request",
            target=url_host(self.request.url),
            reason=EgressReason.DEADLINE,
        )

    def next_step(self, response: httpx.Response) -> Wait | Follow | None:
        """What to do after *response*: ``None`` finish with it, :class:`Wait` or
        :class:`Follow`.

        The driver closes *response* unless told to finish with it (also when this
        raises).

        Raises:
            EgressDeniedError: REDIRECT (a refused hop, or more than ``max_redirects``).
        """
        limits = self._limits
        if (
            response.status_code == 429
            and self._attempt < limits.max_retries
            and replayable(self.request)
        ):
            delay = retry_delay(response.headers.get("retry-after"), now=self._wall_clock)
            if delay is None:
                delay = limits.default_retry_after
            if self._clock() + delay < self.deadline:  # else: hand back the 429
                self._attempt += 1
                self.retries += 1
                self.waited += delay
                return Wait(delay)
        nxt = redirect_request(self.request, response) if self._follow else None
        if nxt is None:
            return None
        if self._hops == limits.max_redirects:
            raise EgressDeniedError(
                f"redirect: more than {limits.max_redirects} hops",
                op="redirect",
                target=url_host(nxt.url),
                reason=EgressReason.REDIRECT,
            )
        self._hops += 1
        self._attempt = 0
        self.history.append(response)
        self._crossed = self._crossed or origin(nxt.url) != origin(self.request.url)
        self.request = nxt
        return FOLLOW

    def collector(self, response: httpx.Response) -> BodyCollector:
        """The body collector for the final *response* (cap and decoding)."""
        return BodyCollector(self._limits.max_body, response.headers.get("content-encoding"))

    def finish(self, response: httpx.Response, body: BodyCollector) -> GuardedResponse:
        """The :class:`GuardedResponse` for the final *response*, read into *body*."""
        return finish_response(
            response,
            body.body(),
            truncated=body.truncated,
            decoded=body.decoded,
            waited=self.waited,
            retries=self.retries,
            history=self.history,
            elapsed=datetime.timedelta(seconds=self._clock() - self.start),
        )
