"""One DNS answer cache, many callers: grants judged per hit, and pinning (decision 0035).

A real DNS server on loopback changes its answer between requests; real HTTP servers on
two loopback addresses show where each connection went. Each cached answer must be
classified again, under the calling client's own grants, on every hit; an expired one
must be resolved and vetted again before any connection to the new address.
"""

from __future__ import annotations

import threading
from ipaddress import ip_address

import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    DnsResolver,
    PrivateNetAllow,
    dial_tcp,
    guard_url,
    guarded_async_client,
    guarded_client,
)
from tests.flux_system.net._cache_support import (
    NAME,
    ROUND,
    SOA,
    Clock,
    resolver_for,
    served_by,
    served_by_then_close,
)
from tests.flux_system.net._servers import FlipDnsServer, LoopbackHTTP, free_port_on

# -------------------------------------------------- one cache, clients with other grants


def test_shared_cache_classifies_every_hit_under_the_callers_grants() -> None:
    port = free_port_on(["127.0.0.2"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=300, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": served_by}) as server,
    ):
        shared = resolver_for(dns_server, clock)
        url = f"http://{NAME}:{port}/"
        granted = guarded_client(
            allow=PrivateNetAllow(cidrs=["127.0.0.2/32"]), resolver=shared, ports=[port]
        )
        ungranted = guarded_client(resolver=shared, ports=[port])
        other_grant = guarded_client(
            allow=PrivateNetAllow(cidrs=["127.0.0.3/32"]), resolver=shared, ports=[port]
        )
        with granted, ungranted, other_grant:
            # The denial comes first: it must not be remembered as the name's verdict.
            for client in (ungranted, other_grant):
                with pytest.raises(EgressDeniedError) as info:
                    client.get(url)
                assert info.value.reason is EgressReason.BLOCKED_ADDRESS
                assert info.value.address == "127.0.0.2"
            assert granted.get(url).text == "127.0.0.2"  # positive control: reachable
            # ...and the admission must not be handed to the clients without the grant.
            for client in (ungranted, other_grant):
                with pytest.raises(EgressDeniedError) as info:
                    client.get(url)
                assert info.value.reason is EgressReason.BLOCKED_ADDRESS
            assert granted.get(url).text == "127.0.0.2"
        assert dns_server.queries() == ROUND  # every verdict after the first came from a hit
        assert len(server.seen) == 2  # only the granted client's requests arrived


def test_shared_cache_checks_cname_targets_under_the_callers_host_grants() -> None:
    clock = Clock()
    chain = {"svc.flux.example": "db.corp.internal"}
    with FlipDnsServer(
        {"db.corp.internal": ["93.184.216.34"]},
        cname=chain,
        ttl=300,
        soa_minimum=SOA,
        zone="corp.internal",  # the SOA of the zone the chain ends in (RFC 2308 §2.1)
    ) as dns_server:
        shared = resolver_for(dns_server, clock)
        url = "http://svc.flux.example/"
        corp = PrivateNetAllow(hosts=["*.corp.internal"])
        assert guard_url(url, resolver=shared, allow=corp).addresses == (
            ip_address("93.184.216.34"),
        )
        with pytest.raises(EgressDeniedError) as info:  # a hit, judged without the grant
            guard_url(url, resolver=shared)
        assert info.value.reason is EgressReason.INTERNAL_NAME
        assert guard_url(url, resolver=shared, allow=corp).host == "svc.flux.example"
        assert len(dns_server.queries()) == 2


# ------------------------------------------------------------- pinning, no rebinding


def test_new_connections_dial_the_vetted_answer_until_it_expires() -> None:
    # Every response closes its connection, so each request dials anew. The DNS server
    # changes its answer after the first request: until the cached answer expires,
    # every new connection still goes to the address that was vetted (never to the new
    # one); after it, the name is resolved again and the new address vetted and used.
    port = free_port_on(["127.0.0.2", "127.0.0.3"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=60, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": served_by_then_close}) as old,
        LoopbackHTTP("127.0.0.3", port, routes={"/": served_by_then_close}) as new,
    ):
        allow = PrivateNetAllow(cidrs=["127.0.0.2/32", "127.0.0.3/32"])
        resolver = resolver_for(dns_server, clock)
        with guarded_client(allow=allow, resolver=resolver, ports=[port]) as client:
            url = f"http://{NAME}:{port}/"
            assert client.get(url).text == "127.0.0.2"
            dns_server.answer_with({NAME: ["127.0.0.3"]})
            for _ in range(3):
                clock.now += 15.0  # 45 s: inside the TTL
                response = client.get(url)
                assert response.text == "127.0.0.2"
                assert response.target.addresses == (ip_address("127.0.0.2"),)
            assert new.seen == []
            assert dns_server.queries() == ROUND
            clock.now += 15.0  # 60 s: expired
            response = client.get(url)
            assert response.text == "127.0.0.3"  # re-resolved, re-vetted, then dialled
            assert response.target.addresses == (ip_address("127.0.0.3"),)
        assert dns_server.queries() == ROUND * 2
        assert len(old.seen) == 4 and len(new.seen) == 1
        # Negative control: the server really did change its answer at once.
        assert DnsResolver(["127.0.0.1"], port=dns_server.port, cache_size=0).resolve(
            NAME, port
        ) == (ip_address("127.0.0.3"),)


def test_expired_answer_rebinding_to_a_blocked_address_is_refused_despite_keepalive() -> None:
    # A kept-alive connection to the vetted address sits in the pool; the name now
    # resolves to an address this client may not reach. After expiry the request is
    # guarded afresh and refused before the pool could hand out the old connection.
    port = free_port_on(["127.0.0.2", "127.0.0.4"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=60, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": served_by}) as vetted,
        LoopbackHTTP("127.0.0.4", port, routes={"/": served_by}) as blocked,
    ):
        allow = PrivateNetAllow(cidrs=["127.0.0.2/32"])
        resolver = resolver_for(dns_server, clock)
        with guarded_client(allow=allow, resolver=resolver, ports=[port]) as client:
            url = f"http://{NAME}:{port}/"
            assert client.get(url).text == "127.0.0.2"
            dns_server.answer_with({NAME: ["127.0.0.4"]})
            clock.now += 30.0
            assert client.get(url).text == "127.0.0.2"  # control: a hit, the kept-alive conn
            clock.now += 30.0
            with pytest.raises(EgressDeniedError) as info:
                client.get(url)
            assert info.value.reason is EgressReason.BLOCKED_ADDRESS
            assert info.value.address == "127.0.0.4"
        assert len(vetted.seen) == 2 and blocked.seen == []
        assert dns_server.queries() == ROUND * 2


def test_dial_tcp_uses_the_cache_and_pins_to_the_cached_answer() -> None:
    port = free_port_on(["127.0.0.2", "127.0.0.3"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=60, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": served_by}),
        LoopbackHTTP("127.0.0.3", port, routes={"/": served_by}),
    ):
        allow = PrivateNetAllow(cidrs=["127.0.0.0/8"])
        resolver = resolver_for(dns_server, clock)
        peers = []
        for step in range(2):
            if step:
                dns_server.answer_with({NAME: ["127.0.0.3"]})
            with dial_tcp(NAME, port, allow=allow, resolver=resolver, ports=[port]) as sock:
                peers.append(sock.getpeername())
        clock.now += 60.0
        with dial_tcp(NAME, port, allow=allow, resolver=resolver, ports=[port]) as sock:
            peers.append(sock.getpeername())
        assert peers == [("127.0.0.2", port), ("127.0.0.2", port), ("127.0.0.3", port)]
        assert dns_server.queries() == ROUND * 2


def test_async_client_shares_the_cache() -> None:
    import anyio

    port = free_port_on(["127.0.0.2"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=60, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": served_by}),
    ):
        resolver = resolver_for(dns_server, clock)
        allow = PrivateNetAllow(cidrs=["127.0.0.2/32"])

        async def main() -> list[str]:
            async with guarded_async_client(allow=allow, resolver=resolver, ports=[port]) as c:
                return [(await c.get(f"http://{NAME}:{port}/")).text for _ in range(3)]

        assert anyio.run(main) == ["127.0.0.2"] * 3
        with pytest.raises(EgressDeniedError):  # same resolver, no grant: a hit, refused
            guard_url(f"http://{NAME}:{port}/", resolver=resolver, ports=[port])
        assert dns_server.queries() == ROUND


def test_concurrent_clients_with_other_grants_never_see_each_others_verdicts() -> None:
    # Threads of a granted and an ungranted caller share one resolver while a third
    # thread keeps expiring the cache (so hits, misses and stores interleave).
    clock = Clock()
    with FlipDnsServer({NAME: ["10.1.2.3"]}, ttl=5, soa_minimum=SOA) as dns_server:
        shared = resolver_for(dns_server, clock)
        granted = PrivateNetAllow(cidrs=["10.0.0.0/8"])
        wrong: list[str] = []
        stop = threading.Event()

        def caller(allow: PrivateNetAllow | None) -> None:
            for _ in range(60):
                try:
                    guard_url(f"http://{NAME}/", allow=allow, resolver=shared)
                    outcome = "allowed"
                except EgressDeniedError as exc:
                    outcome = exc.reason.value
                expected = "allowed" if allow is not None else "blocked_address"
                if outcome != expected:
                    wrong.append(outcome)

        def expirer() -> None:
            while not stop.is_set():
                clock.now += 5.0
                stop.wait(0.002)

        threads = [threading.Thread(target=caller, args=(a,)) for a in (granted, None) * 2]
        ticker = threading.Thread(target=expirer)
        ticker.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        ticker.join()
        assert wrong == []
        assert len(dns_server.queries()) >= 4  # the control: the cache did expire and refill
