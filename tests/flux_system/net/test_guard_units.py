"""Grants, allow-list, resolvers, limits and the block table, one behaviour per test."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    DnsResolver,
    EgressPolicy,
    PrivateNetAllow,
    RequestLimits,
    Resolver,
    StaticResolver,
    _url,
    classify_address,
    guard_host,
    guard_url,
)
from flux_system.net._blocklist import REGISTRY_DATES, TABLE, TABLE_REVIEWED
from flux_system.net._redirects import retry_delay
from flux_system.net._url import PARSE_CACHE_SIZE, parse_url

PUBLIC = StaticResolver({"example.com": ["93.184.216.34"]})


def test_table_is_dated_and_covers_design_rows() -> None:
    assert TABLE_REVIEWED and set(REGISTRY_DATES) == {
        "iana-ipv4-special-registry",
        "iana-ipv6-special-registry",
    }
    nets = {str(e.network) for e in TABLE}
    for row in ("192.0.0.0/24", "2001::/23", "2002::/16", "3fff::/20", "64:ff9b:1::/48"):
        assert row in nets
    assert all(e.reference for e in TABLE)


def test_classify_rejects_non_addresses() -> None:
    with pytest.raises(TypeError):
        classify_address("127.0.0.1")  # type: ignore[arg-type]
    entry = classify_address(ip_address("192.0.0.9"))
    assert entry is not None and "192.0.0.0/24" in str(entry.network)
    assert classify_address(ip_address("93.184.216.34")) is None


def test_grant_validation() -> None:
    with pytest.raises(ValueError):
        PrivateNetAllow(cidrs=["127.0.0.1/8"])  # host bits set
    with pytest.raises(ValueError):
        PrivateNetAllow(hosts=["*"])
    with pytest.raises(ValueError):
        PrivateNetAllow(hosts=["a.*.example"])
    with pytest.raises(TypeError):
        PrivateNetAllow(hosts="localhost")
    with pytest.raises(TypeError):
        PrivateNetAllow(cidrs=[127])  # type: ignore[list-item]
    grant = PrivateNetAllow(hosts=["LocalHost."], cidrs=[ip_network("10.0.0.0/8")])
    assert grant.hosts == ("localhost",) and grant == PrivateNetAllow(
        hosts=["localhost"], cidrs=["10.0.0.0/8"]
    )
    assert PrivateNetAllow.none() == PrivateNetAllow()
    assert hash(grant) == hash(PrivateNetAllow(hosts=["localhost"], cidrs=["10.0.0.0/8"]))


def test_grant_pattern_matches_only_at_label_boundary() -> None:
    grant = PrivateNetAllow(hosts=["*.corp.example"])
    assert grant.admits_name("a.corp.example") and grant.admits_name("x.y.corp.example")
    assert not grant.admits_name("corp.example")
    assert not grant.admits_name("evilcorp.example")


def test_policy_validation_and_literals() -> None:
    with pytest.raises(ValueError):
        EgressPolicy(allow_hosts=["10.0.0.0/8"])  # networks are not hosts
    policy = EgressPolicy(allow_hosts=["2606:2800:0::1", "API.example.com"])
    assert policy.allow_hosts == ("2606:2800::1", "api.example.com")
    assert guard_url("https://[2606:2800::1]/", policy=policy).port == 443


def test_policy_denies_before_resolution() -> None:
    resolver = StaticResolver({"other.example": ["93.184.216.34"]})
    with pytest.raises(EgressDeniedError) as info:
        guard_url(
            "https://other.example/",
            resolver=resolver,
            policy=EgressPolicy(allow_hosts=["api.example"]),
        )
    assert info.value.reason is EgressReason.NOT_ALLOWED and resolver.calls == 0


class Misbehaving:
    def __init__(self, answer: object) -> None:
        self.answer = answer

    def resolve(self, host: str, port: int) -> Sequence[IPv4Address | IPv6Address]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (ValueError("boom"), EgressReason.RESOLUTION_FAILED),
        (OSError("network down"), EgressReason.RESOLUTION_FAILED),
        (["93.184.216.34"], EgressReason.RESOLUTION_FAILED),  # strings are not addresses
        ("93.184.216.34", EgressReason.RESOLUTION_FAILED),
        ([], EgressReason.RESOLUTION_FAILED),
        (None, EgressReason.RESOLUTION_FAILED),
        ([IPv4Address("93.184.216.34")] * 33, EgressReason.TOO_MANY_ANSWERS),
        ([IPv6Address("fe80::1%eth0")], EgressReason.ZONE_ID),
    ],
)
def test_a_misbehaving_resolver_fails_closed(answer: object, reason: EgressReason) -> None:
    resolver = Misbehaving(answer)
    assert isinstance(resolver, Resolver)
    with pytest.raises(EgressDeniedError) as info:
        guard_url("https://example.com/", resolver=resolver)
    assert info.value.reason is reason


def test_static_resolver() -> None:
    r = StaticResolver({"Example.COM.": ["93.184.216.34", IPv6Address("2606:2800::1")]})
    assert r.resolve("example.com", 80) == (
        IPv4Address("93.184.216.34"),
        IPv6Address("2606:2800::1"),
    )
    with pytest.raises(EgressDeniedError) as info:
        r.resolve("other.example", 80)
    assert info.value.reason is EgressReason.RESOLUTION_FAILED
    with pytest.raises(ValueError):
        StaticResolver({"a.example": ["not an ip"]})
    with pytest.raises(TypeError):
        StaticResolver({"a.example": "93.184.216.34"})
    assert r.calls == 2


def test_dns_resolver_arguments() -> None:
    with pytest.raises(ValueError):
        DnsResolver(["127.0.0.1"], port=0)
    with pytest.raises(ValueError):
        DnsResolver(["not-an-ip"])
    with pytest.raises(TypeError):
        DnsResolver("127.0.0.1")
    with pytest.raises(ValueError):
        DnsResolver(["127.0.0.1"], timeout=0)
    with pytest.raises(ValueError):
        DnsResolver(["127.0.0.1"], max_answers=0)


def test_argument_types_are_checked() -> None:
    with pytest.raises(TypeError, match="url"):
        guard_url(b"http://example.com/")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="port"):
        guard_host("example.com", "443")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="allow"):
        guard_url("http://93.184.216.34/", allow=["127.0.0.0/8"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="policy"):
        guard_url("http://93.184.216.34/", policy=["x"])  # type: ignore[arg-type]


def test_limits_validation() -> None:
    for bad in (
        {"deadline": 0},
        {"max_body": -1},
        {"max_redirects": 6},
        {"max_retries": 9},
        {"default_retry_after": -1},
    ):
        with pytest.raises(ValueError):
            RequestLimits(**bad)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("30", 30.0),
        (" 5 ", 5.0),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past
        ("-1", None),
        ("1.5", None),
        ("soon", None),
        (None, None),
        ("99999999999999999999", 86401.0),  # clamped: beyond any deadline
    ],
)
def test_retry_after_both_forms(value: str | None, expected: float | None) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_delay(value, now=lambda: now) == expected


def test_error_carries_address_and_pickles() -> None:
    with pytest.raises(EgressDeniedError) as info:
        guard_url("http://10.1.2.3/path?key=SECRET")
    err = info.value
    back = pickle.loads(pickle.dumps(err))
    assert (back.reason, back.address, back.host) == (
        EgressReason.BLOCKED_ADDRESS,
        "10.1.2.3",
        "10.1.2.3",
    )
    assert "SECRET" not in str(err) and "path" not in str(err)


def test_guard_host_accepts_bracketed_and_plain_ipv6() -> None:
    a = guard_host("[2606:2800::1]", 443)
    b = guard_host("2606:2800::1", 443)
    assert a == b and a.url is None and a.scheme is None


def test_default_resolver_is_dns() -> None:
    # Without a resolver the guard uses DnsResolver on the system configuration; an
    # internal name is refused before it is ever consulted.
    with pytest.raises(EgressDeniedError) as info:
        guard_url("http://localhost/")
    assert info.value.reason is EgressReason.INTERNAL_NAME
    assert guard_url("https://example.com/", resolver=PUBLIC).addresses


@pytest.mark.parametrize(
    ("host", "internal"),
    [
        ("localhost", True),
        ("a.localhost", True),
        ("home.arpa", True),  # a suffix is internal as a whole name too
        ("x.home.arpa", True),
        ("a.b.c.in-addr.arpa", True),
        ("ip6.arpa", True),
        ("printer.local", True),
        ("x.y.lan", True),
        ("intranet", True),  # single label
        ("example.com", False),
        ("a.arpa", False),
        ("evil-lan.com", False),
        ("lan.example", False),
        ("local.example.com", False),
    ],
)
def test_internal_names(host: str, internal: bool) -> None:
    from flux_system.net._names import is_internal_name

    assert is_internal_name(host) is internal


def test_parse_cache_is_keyed_by_text_and_refusals_keep_their_op() -> None:
    """A client request and its guard parse the same URL text once (the cache used to
    key on the caller's op too, so every fresh URL was parsed twice); a refusal is
    never cached and names the op of the call that was refused."""
    url = "https://cache-key.example/a?page=1"
    assert parse_url(url, op="request") is parse_url(url, op="guard_url")
    for op in ("request", "redirect"):
        with pytest.raises(EgressDeniedError) as info:
            parse_url("ftp://cache-key.example/", op=op)
        assert info.value.op == op
    for i in range(PARSE_CACHE_SIZE + 10):  # the cache stays bounded
        parse_url(f"https://cache-key.example/{i}", op="request")
    assert len(_url._accepted) <= PARSE_CACHE_SIZE
