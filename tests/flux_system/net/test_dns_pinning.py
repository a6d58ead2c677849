"""DNS pinning against a real DNS server on loopback whose answers flip (TTL 0).

The guard resolves once; the connection goes to what was vetted; the server sees one
query per record type and never a second round, even though a second round would
now be answered with a different (blocked or other) address.
"""

from __future__ import annotations

from ipaddress import ip_address

import dns.message
import dns.query
import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    DnsResolver,
    PrivateNetAllow,
    RequestLimits,
    dial_tcp,
    guard_url,
    guarded_client,
)
from tests.flux_system.net._servers import FlipDnsServer, Handler, LoopbackHTTP, free_port_on

NAME = "rebind.flux.example"


def _ok(h: Handler) -> None:
    h.reply(200, f"served by {h.server.owner.host}".encode())


def _resolver(dns_server: FlipDnsServer) -> DnsResolver:
    return DnsResolver(["127.0.0.1"], port=dns_server.port, timeout=2.0)


def test_client_connects_to_what_it_vetted_and_never_asks_twice() -> None:
    port = free_port_on(["127.0.0.2", "127.0.0.3"])
    first = {NAME: ["127.0.0.2"]}
    then = {NAME: ["127.0.0.3", "::1"]}
    with (
        FlipDnsServer(first, then) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _ok}) as vetted,
        LoopbackHTTP("127.0.0.3", port, routes={"/": _ok}) as rebound,
    ):
        # A wide grant: both addresses would be admitted, so only pinning decides.
        allow = PrivateNetAllow(cidrs=["127.0.0.0/8"])
        with guarded_client(allow=allow, resolver=_resolver(dns_server), ports=[port]) as c:
            response = c.get(f"http://{NAME}:{port}/")
        assert response.status_code == 200
        assert response.text == "served by 127.0.0.2"
        assert response.target.addresses == (ip_address("127.0.0.2"),)
        assert len(vetted.seen) == 1 and vetted.seen[0].headers["host"] == f"{NAME}:{port}"
        assert rebound.seen == []
        assert dns_server.queries() == [(NAME, "A"), (NAME, "AAAA")]
        # Negative control: the server really flipped — a fresh query gets the new answer.
        reply = dns.query.udp(
            dns.message.make_query(NAME, "A"), "127.0.0.1", port=dns_server.port, timeout=2
        )
        assert [r.address for r in reply.answer[0]] == ["127.0.0.3"]


def test_second_guard_sees_the_rebound_answer_and_denies() -> None:
    with FlipDnsServer({NAME: ["93.184.216.34"]}, {NAME: ["169.254.169.254"]}) as dns_server:
        resolver = _resolver(dns_server)
        target = guard_url(f"http://{NAME}/", resolver=resolver)
        assert target.addresses == (ip_address("93.184.216.34"),)
        with pytest.raises(EgressDeniedError) as info:
            guard_url(f"http://{NAME}/", resolver=resolver)
        assert info.value.reason is EgressReason.BLOCKED_ADDRESS
        assert info.value.address == "169.254.169.254"
        assert dns_server.queries() == [(NAME, "A"), (NAME, "AAAA")] * 2


def test_blocked_first_answer_is_never_dialled() -> None:
    port = free_port_on(["127.0.0.3"])
    with (
        FlipDnsServer({NAME: ["127.0.0.3"]}, {NAME: ["93.184.216.34"]}) as dns_server,
        LoopbackHTTP("127.0.0.3", port, routes={"/": _ok}) as blocked,
    ):
        allow = PrivateNetAllow(cidrs=["127.0.0.2/32"])
        with (
            guarded_client(allow=allow, resolver=_resolver(dns_server), ports=[port]) as c,
            pytest.raises(EgressDeniedError) as info,
        ):
            c.get(f"http://{NAME}:{port}/")
        assert info.value.reason is EgressReason.BLOCKED_ADDRESS
        assert info.value.address == "127.0.0.3"
        assert blocked.seen == []
        assert dns_server.queries() == [(NAME, "A"), (NAME, "AAAA")]


def test_one_blocked_aaaa_answer_denies_although_a_is_public() -> None:
    with FlipDnsServer({NAME: ["93.184.216.34", "fd00::1"]}) as dns_server:
        with pytest.raises(EgressDeniedError) as info:
            guard_url(f"https://{NAME}/", resolver=_resolver(dns_server))
        assert info.value.reason is EgressReason.BLOCKED_ADDRESS
        assert info.value.address == "fd00::1"


def test_cname_chain_is_followed_and_its_answers_classified() -> None:
    chain = {"alias.flux.example": "mid.flux.example", "mid.flux.example": "end.flux.example"}
    with FlipDnsServer({"end.flux.example": ["10.0.0.9"]}, cname=chain) as dns_server:
        with pytest.raises(EgressDeniedError) as info:
            guard_url("http://alias.flux.example/", resolver=_resolver(dns_server))
        assert info.value.address == "10.0.0.9"
    with FlipDnsServer({"end.flux.example": ["93.184.216.34"]}, cname=chain) as dns_server:
        target = guard_url("http://alias.flux.example/", resolver=_resolver(dns_server))
        assert target.addresses == (ip_address("93.184.216.34"),)
        assert target.host == "alias.flux.example"


def test_answer_cap_over_tcp_fallback() -> None:
    many = {"many.flux.example": [f"93.184.{i}.1" for i in range(40)]}
    with FlipDnsServer(many) as dns_server:
        with pytest.raises(EgressDeniedError) as info:
            guard_url("http://many.flux.example/", resolver=_resolver(dns_server))
        assert info.value.reason is EgressReason.TOO_MANY_ANSWERS
        # The UDP answer was truncated; the resolver retried the same question on TCP.
        assert [(e.rdtype, e.transport) for e in dns_server.log] == [("A", "udp"), ("A", "tcp")]


def test_nxdomain_and_internal_names_never_queried() -> None:
    with FlipDnsServer({}) as dns_server:
        resolver = _resolver(dns_server)
        with pytest.raises(EgressDeniedError) as info:
            guard_url("http://nothing.flux.example/", resolver=resolver)
        assert info.value.reason is EgressReason.RESOLUTION_FAILED
        for url in ("http://localhost/", "http://metadata.google.internal/", "http://db.lan/"):
            with pytest.raises(EgressDeniedError) as info:
                guard_url(url, resolver=resolver)
            assert info.value.reason is EgressReason.INTERNAL_NAME
        assert {q[0] for q in dns_server.queries()} == {"nothing.flux.example"}


def test_unanswering_nameserver_fails_closed() -> None:
    # A UDP port with nothing behind it: every query times out or is refused.
    resolver = DnsResolver(["127.0.0.1"], port=free_port_on(["127.0.0.1"]), timeout=0.3)
    with pytest.raises(EgressDeniedError) as info:
        guard_url("http://example.com/", resolver=resolver)
    assert info.value.reason is EgressReason.RESOLUTION_FAILED


def test_dial_tcp_pins_too() -> None:
    port = free_port_on(["127.0.0.2", "127.0.0.3"])
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, {NAME: ["127.0.0.3"]}) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _ok}),
        LoopbackHTTP("127.0.0.3", port, routes={"/": _ok}),
    ):
        allow = PrivateNetAllow(cidrs=["127.0.0.0/8"])
        sock = dial_tcp(NAME, port, allow=allow, resolver=_resolver(dns_server), ports=[port])
        with sock:
            assert sock.getpeername() == ("127.0.0.2", port)
        assert dns_server.queries() == [(NAME, "A"), (NAME, "AAAA")]


def test_resolver_timeout_is_one_budget_for_both_record_types() -> None:
    # Each answer takes 0.4 s; the 0.6 s budget is spent before AAAA can be answered.
    with FlipDnsServer({NAME: ["93.184.216.34"]}, delay=0.4) as dns_server:
        resolver = DnsResolver(["127.0.0.1"], port=dns_server.port, timeout=0.6)
        with pytest.raises(EgressDeniedError) as info:
            guard_url(f"http://{NAME}/", resolver=resolver)
        assert info.value.reason is EgressReason.RESOLUTION_FAILED


def test_total_deadline_includes_the_resolution() -> None:
    port = free_port_on(["127.0.0.2"])
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, delay=0.3) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _ok}) as server,
    ):
        client = guarded_client(
            allow=PrivateNetAllow(cidrs=["127.0.0.2/32"]),
            resolver=DnsResolver(["127.0.0.1"], port=dns_server.port, timeout=5.0),
            ports=[port],
            limits=RequestLimits(deadline=0.4),
        )
        with client, pytest.raises(EgressDeniedError) as info:
            client.get(f"http://{NAME}:{port}/")
        assert info.value.reason is EgressReason.DEADLINE
        assert server.seen == []
