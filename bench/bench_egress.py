"""Egress guard benchmarks: guard decision cost and guarded GET vs plain httpx.

Run: ``python bench/bench_egress.py``. Prints ratios measured side by side in this run
(interleaved rounds, medians) and records them under ``egress`` in bench/results.json;
``--dns`` runs only part 3 and records nothing.

1. ``guard_url`` with a ``StaticResolver`` (µs per call), for an IP literal and for a
   name, each for a repeated URL (parse memoized) and a fresh URL text per call,
   against ``httpx.URL(...)`` parsing of the same text as the baseline.
2. ``guarded_client().get`` against a loopback server (granted CIDR, keep-alive) vs a
   plain ``httpx.Client().get`` of the same URL. Target: ratio ≤ 1.15. Measured for a
   repeated URL (the guard's parse of the URL text is then memoized; httpx parses it
   every time) and for a fresh URL text per request on both sides (no memo hit: the
   full strict parse on every request, as for a crawler or paged API calls).
   The server runs in a separate process (asyncio, fixed 2 KiB response) so the
   client side is what is measured.
3. ``guarded_client().get`` with its real ``DnsResolver`` against a real DNS server on
   loopback (a separate process; ``svc.bench.example`` has an A record 127.0.0.1 with
   TTL 300 and no AAAA, the empty answer carrying the zone's SOA) vs a plain
   ``httpx.Client().get`` of ``http://127.0.0.1:PORT/`` — no DNS at all on the plain
   side. Both keep-alive, interleaved rounds, medians. Target: ratio <= 1.2 (decision
   0035: the answer cache). The same with the cache turned off (``cache_size=0``: two
   queries per request) is printed as context.
"""

from __future__ import annotations

import itertools
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import record, side_by_side
from flux_system.net import (
    DnsResolver,
    PrivateNetAllow,
    StaticResolver,
    guard_url,
    guarded_client,
)

SERVER = r"""
import asyncio, sys
BODY = b"x" * 2048
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(BODY)
class P(asyncio.Protocol):
    def connection_made(self, t): self.t, self.buf = t, b""
    def data_received(self, data):
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            _, self.buf = self.buf.split(b"\r\n\r\n", 1)
            self.t.write(HEAD + BODY)
async def main():
    srv = await asyncio.get_running_loop().create_server(P, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


DNS_SERVER = r"""
import socket, sys
import dns.message, dns.rcode, dns.rdatatype, dns.rrset
ZONE, NAME, TTL = "bench.example.", "svc.bench.example.", 300
SOA = dns.rrset.from_text(ZONE, TTL, "IN", "SOA", f"ns.{ZONE} host.{ZONE} 1 3600 600 86400 {TTL}")
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("127.0.0.1", 0))
print(udp.getsockname()[1], flush=True)
while True:
    wire, peer = udp.recvfrom(4096)
    query = dns.message.from_wire(wire)
    reply = dns.message.make_response(query)
    question = query.question[0]
    if question.name.to_text().lower() != NAME:
        reply.set_rcode(dns.rcode.NXDOMAIN)
        reply.authority.append(SOA)
    elif question.rdtype == dns.rdatatype.A:
        reply.answer.append(dns.rrset.from_text(question.name, TTL, "IN", "A", "127.0.0.1"))
    else:  # no AAAA: NODATA with the zone's SOA (RFC 2308), so the answer is cacheable
        reply.authority.append(SOA)
    udp.sendto(reply.to_wire(), peer)
"""


def _server(script: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def bench_dns_get() -> dict[str, float]:
    http, port = _server(SERVER)
    dns_proc, dns_port = _server(DNS_SERVER)
    try:
        allow = PrivateNetAllow(cidrs=["127.0.0.1/32"])
        resolver = DnsResolver(["127.0.0.1"], port=dns_port)
        cached = guarded_client(allow=allow, resolver=resolver, ports=[port])
        uncached = guarded_client(
            allow=allow,
            resolver=DnsResolver(["127.0.0.1"], port=dns_port, cache_size=0),
            ports=[port],
        )
        plain = httpx.Client(trust_env=False)
        g_url = f"http://svc.bench.example:{port}/items?page=2"
        p_url = f"http://127.0.0.1:{port}/items?page=2"
        for _ in range(200):  # warm both pools and code paths (and the answer cache)
            cached.get(g_url)
            plain.get(p_url)
        for _ in range(20):
            uncached.get(g_url)
        figures = side_by_side(
            lambda: cached.get(g_url), lambda: plain.get(p_url), number=100, rounds=41
        )
        cpu = _cpu_side_by_side(lambda: cached.get(g_url), lambda: plain.get(p_url))
        off = side_by_side(
            lambda: uncached.get(g_url), lambda: plain.get(p_url), number=50, rounds=15
        )
        # The guard alone: a cache hit of DnsResolver vs a StaticResolver lookup.
        static = StaticResolver({"svc.bench.example": ["127.0.0.1"]})
        decision = side_by_side(
            lambda: guard_url(g_url, allow=allow, resolver=resolver, ports=[port]),
            lambda: guard_url(g_url, allow=allow, resolver=static, ports=[port]),
            number=5000,
        )
        for client in (cached, uncached, plain):
            client.close()
    finally:
        for proc in (http, dns_proc):
            proc.terminate()
            proc.wait(5)
    print(
        f"GET via DnsResolver (cached answer, TTL 300) vs plain httpx to the IP: guarded "
        f"{figures['candidate_s'] * 1e6:.0f} µs, plain {figures['baseline_s'] * 1e6:.0f} µs; "
        f"ratio {figures['ratio']:.3f}x (target <= 1.2x); client CPU ratio {cpu['ratio']:.3f}x"
    )
    print(
        f"GET via DnsResolver, cache off (two queries per request): guarded "
        f"{off['candidate_s'] * 1e6:.0f} µs, plain {off['baseline_s'] * 1e6:.0f} µs; "
        f"ratio {off['ratio']:.3f}x"
    )
    print(
        f"guard_url, DnsResolver cache hit: {decision['candidate_s'] * 1e6:.1f} µs/call; "
        f"StaticResolver {decision['baseline_s'] * 1e6:.1f} µs; ratio {decision['ratio']:.2f}x"
    )
    return {
        "guard_dns_cache_hit_us": decision["candidate_s"] * 1e6,
        "guard_dns_cache_hit_vs_static": decision["ratio"],
        "get_dns_cached_guarded_us": figures["candidate_s"] * 1e6,
        "get_dns_cached_plain_ip_us": figures["baseline_s"] * 1e6,
        "get_dns_cached_ratio": figures["ratio"],
        "get_dns_cached_cpu_ratio": cpu["ratio"],
        "get_dns_cached_target_ratio": 1.2,
        "get_dns_uncached_guarded_us": off["candidate_s"] * 1e6,
        "get_dns_uncached_plain_ip_us": off["baseline_s"] * 1e6,
        "get_dns_uncached_ratio": off["ratio"],
    }


def bench_guard() -> dict[str, float]:
    static = StaticResolver({"api.example.com": ["93.184.216.34", "2606:2800::1"]})
    bases = {
        "literal": "https://93.184.216.34/v1/items?page=",
        "name": "https://api.example.com/v1/items?page=",
    }
    out: dict[str, float] = {}
    for label, base in bases.items():
        for mode in ("repeat", "fresh"):
            # "repeat": the same URL every call (parse memoized); "fresh": a new URL
            # text every call (full strict parse + decision), as for a crawler.
            counter = iter(range(10**9))

            def url(base: str = base, mode: str = mode, counter: Iterator[int] = counter) -> str:
                return base + ("2" if mode == "repeat" else str(next(counter)))

            figures = side_by_side(
                lambda url=url: guard_url(url(), resolver=static),  # type: ignore[misc]
                lambda url=url: httpx.URL(url()),  # type: ignore[misc]
                number=5000,
            )
            key = f"guard_{label}_{mode}"
            out[f"{key}_us"] = figures["candidate_s"] * 1e6
            out[f"{key}_vs_httpx_url_parse"] = figures["ratio"]
            print(
                f"guard_url ({label}, {mode} URL): {figures['candidate_s'] * 1e6:.1f} µs/call; "
                f"httpx.URL parse {figures['baseline_s'] * 1e6:.1f} µs; "
                f"ratio {figures['ratio']:.2f}x"
            )
    return out


def _cpu_side_by_side(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    number: int = 100,
    rounds: int = 41,
) -> dict[str, float]:
    """As ``side_by_side`` but in this process's CPU time: the client-side work only,
    insensitive to how long the (separate) server process waits for a core."""
    cand: list[float] = []
    base: list[float] = []
    for _ in range(rounds):
        for func, out in ((baseline, base), (candidate, cand)):
            start = time.process_time()
            for _ in range(number):
                func()
            out.append((time.process_time() - start) / number)
    c, b = statistics.median(cand), statistics.median(base)
    return {"candidate_s": c, "baseline_s": b, "ratio": c / b}


def bench_get() -> dict[str, float]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        guarded = guarded_client(
            allow=PrivateNetAllow(cidrs=["127.0.0.1/32"]),
            resolver=StaticResolver({"svc.bench.example": ["127.0.0.1"]}),
            ports=[port],
        )
        plain = httpx.Client(trust_env=False)
        g_base = f"http://svc.bench.example:{port}/items?page="
        g_url = g_base + "2"
        # The same URL shape (a hostname); it resolves once, for the kept-alive connection.
        p_base = f"http://localhost:{port}/items?page="
        p_url = p_base + "2"
        for _ in range(200):  # warm both pools and code paths
            guarded.get(g_url)
            plain.get(p_url)
        figures = side_by_side(
            lambda: guarded.get(g_url), lambda: plain.get(p_url), number=100, rounds=41
        )
        cpu = _cpu_side_by_side(lambda: guarded.get(g_url), lambda: plain.get(p_url))
        # A fresh URL text per request on both sides: the guard's parse memo never hits.
        g_page, p_page = itertools.count(3), itertools.count(3)
        fresh = side_by_side(
            lambda: guarded.get(g_base + str(next(g_page))),
            lambda: plain.get(p_base + str(next(p_page))),
            number=100,
            rounds=41,
        )
        guarded.close()
        plain.close()
    finally:
        proc.terminate()
        proc.wait(5)
    print(
        f"GET loopback: guarded {figures['candidate_s'] * 1e6:.0f} µs, "
        f"plain httpx {figures['baseline_s'] * 1e6:.0f} µs; ratio {figures['ratio']:.3f}x "
        f"(target <= 1.15x)"
    )
    print(
        f"GET loopback, client CPU time: guarded {cpu['candidate_s'] * 1e6:.0f} µs, "
        f"plain httpx {cpu['baseline_s'] * 1e6:.0f} µs; ratio {cpu['ratio']:.3f}x"
    )
    print(
        f"GET loopback, fresh URL per request: guarded {fresh['candidate_s'] * 1e6:.0f} µs, "
        f"plain httpx {fresh['baseline_s'] * 1e6:.0f} µs; ratio {fresh['ratio']:.3f}x "
        f"(target <= 1.15x)"
    )
    return {
        "get_fresh_guarded_us": fresh["candidate_s"] * 1e6,
        "get_fresh_plain_httpx_us": fresh["baseline_s"] * 1e6,
        "get_fresh_ratio": fresh["ratio"],
        "get_cpu_guarded_us": cpu["candidate_s"] * 1e6,
        "get_cpu_plain_httpx_us": cpu["baseline_s"] * 1e6,
        "get_cpu_ratio": cpu["ratio"],
        "get_guarded_us": figures["candidate_s"] * 1e6,
        "get_plain_httpx_us": figures["baseline_s"] * 1e6,
        "get_ratio": figures["ratio"],
        "get_target_ratio": 1.15,
    }


def main() -> None:
    if "--dns" in sys.argv[1:]:
        print(bench_dns_get())  # not recorded: a partial run
        return
    figures = bench_guard()
    figures.update(bench_get())
    figures.update(bench_dns_get())
    record("egress", figures)


if __name__ == "__main__":
    main()
