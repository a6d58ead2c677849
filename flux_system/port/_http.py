"""The network capability: one guarded HTTP request through the serving side's guard."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["HttpPort", "HttpResult"]


@typing.final
@dataclass(frozen=True, slots=True)
class HttpResult:
    """A response read (up to the serving side's body cap), with what the guard did.

    Attributes:
        status: the HTTP status code of the final hop.
        headers: response headers as ``(name, value)`` pairs, in order (names lower-case).
        body: the body bytes kept (at most the cap).
        truncated: the body was longer than the cap and was cut there.
        url: the final URL after redirects the guard allowed.
        waited: seconds slept honouring ``Retry-After``.
        retries: ``429`` retries made.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    truncated: bool
    url: str
    waited: float = 0.0
    retries: int = 0


@typing.runtime_checkable
class HttpPort(typing.Protocol):
    """One HTTP request decided and sent by the *serving* side's egress guard.

    Guarantee: the destination is vetted by that side's guard (DESIGN §2.4) against
    that side's grants; a denial raises :class:`~flux_system.EgressDeniedError`
    (natively) or :class:`~flux_system.RefusedError` (remotely). The caller cannot
    widen the grants through this call.
    """

    def http_request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 30.0,
    ) -> HttpResult: ...
