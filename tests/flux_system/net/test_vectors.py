"""The egress vector table (tests/vectors/flux_system/egress.json) against every operation.

Each case runs through ``guard_url`` / ``guard_host``; denied URL cases run through the
guarded HTTP client as well, and denied host cases through ``dial_tcp``: every entry
point must refuse them, with the same reason, before any connection.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from ipaddress import ip_address
from typing import Any

import anyio
import httpx
import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    EgressPolicy,
    GuardedTarget,
    PrivateNetAllow,
    RequestLimits,
    StaticResolver,
    dial_tcp,
    dial_udp,
    guard_host,
    guard_url,
    guarded_async_client,
    guarded_client,
)
from tests._vectors import load_vector_file, load_vectors

CASES = load_vectors("flux_system", "egress")
DEFAULT_DNS = {"example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]}
# Reasons decided before any lookup: the resolver must never be asked.
BEFORE_LOOKUP = {r.value for r in EgressReason} - {
    "blocked_address",
    "resolution_failed",
    "too_many_answers",
    "unreachable",
}


def _setup(case: dict[str, Any]) -> tuple[StaticResolver, dict[str, Any]]:
    resolver = StaticResolver({**DEFAULT_DNS, **case.get("dns", {})})
    kwargs: dict[str, Any] = {"resolver": resolver}
    if "allow" in case:
        kwargs["allow"] = PrivateNetAllow(**case["allow"])
    if "policy" in case:
        kwargs["policy"] = EgressPolicy(allow_hosts=case["policy"])
    if "ports" in case:
        kwargs["ports"] = case["ports"]
    return resolver, kwargs


def _guard(case: dict[str, Any], kwargs: dict[str, Any]) -> GuardedTarget:
    if "url" in case:
        return guard_url(case["url"], **kwargs)
    return guard_host(case["host"], case["port"], **kwargs)


def test_vector_file_has_provenance_and_enough_cases() -> None:
    data = load_vector_file("flux_system", "egress")
    sources = data["provenance"]["sources"]
    assert len(CASES) >= 150
    assert {c["source"] for c in CASES} <= set(sources)
    assert {"iana-ipv4", "iana-ipv6", "smokescreen", "payloadsallthethings", "doyensec"} <= {
        c["source"] for c in CASES
    }
    expects = {c["expect"] for c in CASES}
    assert "allow" in expects and expects - {"allow"} <= {r.value for r in EgressReason}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_guard(case: dict[str, Any]) -> None:
    resolver, kwargs = _setup(case)
    if case["expect"] == "allow":
        target = _guard(case, kwargs)
        if "addresses" in case:
            assert target.addresses == tuple(ip_address(a) for a in case["addresses"])
        if "expect_host" in case:
            assert target.host == case["expect_host"]
        assert target.addresses
        return
    with pytest.raises(EgressDeniedError) as info:
        _guard(case, kwargs)
    err = info.value
    assert err.reason.value == case["expect"]
    if "address" in case:
        assert err.address == case["address"]
    if case["expect"] in BEFORE_LOOKUP:
        assert resolver.calls == 0, "a refused name must never reach the resolver"
    # Never the query (it may carry secrets): not in the message, target or repr.
    for text in (str(err), repr(err), err.target or "", err.address or ""):
        assert "SECRET" not in text and "?" not in text


DENIED_URLS = [c for c in CASES if c["expect"] != "allow" and "url" in c]


@pytest.mark.parametrize("case", DENIED_URLS, ids=[c["id"] for c in DENIED_URLS])
def test_guarded_client_refuses(case: dict[str, Any]) -> None:
    _, kwargs = _setup(case)
    limits = RequestLimits(deadline=2.0)
    with guarded_client(limits=limits, timeout=1.0, **kwargs) as client:
        try:
            client.get(case["url"])
        except EgressDeniedError as exc:
            # httpx normalizes some spellings before our guard sees them (e.g. it maps
            # IDNA dots to ASCII); the URL must still be refused, for a reason.
            assert isinstance(exc.reason, EgressReason)
            if case["expect"] in {"blocked_address", "internal_name", "port", "not_allowed"}:
                assert exc.reason.value == case["expect"]
        except (httpx.InvalidURL, httpx.UnsupportedProtocol):
            pass  # httpx refused to even build the request: nothing was sent
        else:
            pytest.fail("the guarded client reached a URL the guard denies")


DENIED_HOSTS = [c for c in CASES if c["expect"] != "allow" and "host" in c]


@pytest.mark.parametrize("case", DENIED_HOSTS, ids=[c["id"] for c in DENIED_HOSTS])
@pytest.mark.parametrize("dial", [dial_tcp, dial_udp], ids=["tcp", "udp"])
def test_dial_refuses(case: dict[str, Any], dial: Callable[..., socket.socket]) -> None:
    _, kwargs = _setup(case)
    with pytest.raises(EgressDeniedError) as info:
        dial(case["host"], case["port"], timeout=1.0, **kwargs).close()
    assert info.value.reason.value == case["expect"]


def test_async_client_refuses_every_denied_url() -> None:
    async def main() -> list[str]:
        reached = []
        for case in DENIED_URLS:
            _, kwargs = _setup(case)
            client = guarded_async_client(limits=RequestLimits(deadline=2.0), **kwargs)
            async with client:
                try:
                    await client.get(case["url"])
                except (EgressDeniedError, httpx.InvalidURL, httpx.UnsupportedProtocol):
                    continue
                reached.append(case["id"])
        return reached

    assert anyio.run(main) == []


def test_negative_control_an_allowed_case_is_reachable_by_the_guard() -> None:
    # Must always pass through: proves the table can tell allow from deny.
    target = guard_url("http://example.com/", resolver=StaticResolver(DEFAULT_DNS))
    assert target.addresses[0] == ip_address("93.184.216.34")
