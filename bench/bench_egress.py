"""Egress guard benchmarks: guard decision cost and guarded GET vs plain httpx.

Run: ``python bench/bench_egress.py``. Prints ratios measured side by side in this run
(interleaved rounds, medians) and records them under ``egress`` in bench/results.json.

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
    figures = bench_guard()
    figures.update(bench_get())
    record("egress", figures)


if __name__ == "__main__":
    main()
