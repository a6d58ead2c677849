"""Regression tests from the second adversarial review of the egress guard (decision 0034).

Each test reproduces one way a hostile server or URL got around a guarantee of
DESIGN §2.4. Real servers on loopback, nothing patched.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address
from typing import Any

import anyio
import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    PrivateNetAllow,
    RequestLimits,
    StaticResolver,
    guard_url,
    guarded_async_client,
    guarded_client,
)
from flux_system.net._resolver import MAX_ANSWERS, Resolution
from tests.flux_system.net._servers import Handler, LoopbackHTTP, Route, free_port_on

GRANT = PrivateNetAllow(cidrs=["127.0.0.1/32"])
NAMES = {"a.flux.example": ["127.0.0.1"]}
#: How long the hostile routes below keep going at most; then they hang up without a
#: response, so a regression fails the test (a protocol error, not DEADLINE) instead of
#: hanging it. Far beyond the deadlines the tests use.
_HOSTILE_FOR: float = 4.0


@pytest.fixture
def port() -> int:
    return free_port_on(["127.0.0.1"])


def _write(h: Handler, data: bytes) -> bool:
    try:
        h.wfile.write(data)
        h.wfile.flush()
    except OSError:
        return False
    return True


def _informational_flood(h: Handler) -> None:
    h.close_connection = True
    # Each "100 Continue" is a complete event: every read returns at once, so no
    # per-read timeout ever fires however short it is.
    end = time.monotonic() + _HOSTILE_FOR
    while time.monotonic() < end:
        if not _write(h, b"HTTP/1.1 100 Continue\r\n\r\n" * 64):
            return


def _header_drip(h: Handler) -> None:
    h.close_connection = True
    # One header byte every 50 ms: well inside any per-read timeout.
    if not _write(h, b"HTTP/1.1 200 OK\r\nX-Slow: "):
        return
    end = time.monotonic() + _HOSTILE_FOR
    while time.monotonic() < end:
        if not _write(h, b"a"):
            return
        time.sleep(0.05)


_HOSTILE: dict[str, Route] = {"/flood": _informational_flood, "/drip": _header_drip}


def _limits() -> dict[str, Any]:
    return {"limits": RequestLimits(deadline=0.5), "timeout": 30.0}


@pytest.mark.parametrize("path", sorted(_HOSTILE))
def test_response_head_cannot_outlast_the_total_deadline(port: int, path: str) -> None:
    # httpcore reads the "read" timeout once per response head and reuses it for every
    # read, and 1xx responses loop without bound: only a per-read deadline stops these.
    with LoopbackHTTP("127.0.0.1", port, routes=dict(_HOSTILE)):
        client = guarded_client(
            allow=GRANT, resolver=StaticResolver(NAMES), ports=[port], **_limits()
        )
        with client, pytest.raises(EgressDeniedError) as info:
            client.get(f"http://a.flux.example:{port}{path}")
    assert info.value.reason is EgressReason.DEADLINE


@pytest.mark.parametrize("path", sorted(_HOSTILE))
def test_async_response_head_cannot_outlast_the_total_deadline(port: int, path: str) -> None:
    async def main() -> None:
        client = guarded_async_client(
            allow=GRANT, resolver=StaticResolver(NAMES), ports=[port], **_limits()
        )
        async with client:
            with pytest.raises(EgressDeniedError) as info:
                await client.get(f"http://a.flux.example:{port}{path}")
        assert info.value.reason is EgressReason.DEADLINE

    with LoopbackHTTP("127.0.0.1", port, routes=dict(_HOSTILE)):
        anyio.run(main)


class _Aliased:
    """A resolver (the protocol allows any) that reports a CNAME chain with its answer."""

    def __init__(self, aliases: object) -> None:
        self.aliases = aliases

    def resolve(self, host: str, port: int) -> Sequence[IPv4Address | IPv6Address]:
        answer = Resolution([IPv4Address("93.184.216.34")])
        answer.aliases = self.aliases  # type: ignore[assignment]
        return answer


@pytest.mark.parametrize(
    ("aliases", "reason"),
    [
        # An internal name after the first MAX_ANSWERS aliases was never looked at.
        (
            (*(f"hop{i}.flux.example" for i in range(MAX_ANSWERS)), "db.corp.internal"),
            EgressReason.TOO_MANY_ANSWERS,
        ),
        # Aliases that cannot be sliced escaped as a TypeError, not a refusal.
        ({"db.corp.internal"}, EgressReason.RESOLUTION_FAILED),
    ],
)
def test_every_alias_a_resolver_reports_is_checked(aliases: object, reason: EgressReason) -> None:
    with pytest.raises(EgressDeniedError) as info:
        guard_url("https://example.com/", resolver=_Aliased(aliases))
    assert info.value.reason is reason
