"""Egress proxy benchmark: a GET through the forwarder and the guarded proxy vs direct.

Run: ``python bench/bench_proxy.py``. Prints ratios measured side by side in this run
(interleaved rounds, medians) and records them under ``proxy`` in bench/results.json.
:func:`proxy_figures` is what bench/bench_sandbox.py may call for its ``proxy`` row.

Every party is its own process, as in a sandboxed run: the origin server (asyncio,
fixed 2 KiB response), the host-side :class:`EgressProxy` (StaticResolver, loopback
granted), the forwarder (what runs inside the sandbox) and this process as the
client. Baselines:

1. ``plain``: a plain-HTTP GET through forwarder → proxy (guard, dial, rewritten
   head, one request per connection: the proxy asks upstream to close) vs a direct GET
   on a new connection each time — the fair baseline, as the proxied path cannot
   reuse connections.
2. ``tunnel``: GETs on one keep-alive ``CONNECT`` tunnel vs direct keep-alive GETs on
   one connection — the cost of the two relays per request, what an HTTPS client pays
   once its tunnel is up.
3. ``run``: ``System(ws, sandbox=net-proxy).run(["/bin/true"])`` vs the same run with
   ``network="none"`` (both bubblewrap + seccomp, default limits): what network
   ``proxy`` adds per run — the host proxy started and closed, the in-sandbox
   launcher (a Python start) and the forwarder's fork. :func:`run_figures`.
4. ``audit``: the protected-path audit a run with ``SandboxSettings(audit=True)`` pays
   (snapshot + check with restore) on a ``.git`` with 13 sample hooks and a config
   plus ``.vscode``, vs a bare ``os.lstat`` of the same 17 names (the least any
   comparison must do). :func:`audit_figures`.
"""

from __future__ import annotations

import contextlib
import http.client
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import record, side_by_side  # noqa: E402

SERVER = r"""
import asyncio
BODY = b"x" * 2048
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(BODY)
class P(asyncio.Protocol):
    def connection_made(self, t): self.t, self.buf = t, b""
    def data_received(self, data):
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            self.t.write(HEAD + BODY)
            if b"connection: close" in head.lower():
                self.t.close()
async def main():
    srv = await asyncio.get_running_loop().create_server(P, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""

PROXY = r"""
import sys, time
from flux_system.net import StaticResolver
from flux_system.sandbox._proxy import EgressProxy, ProxySettings
port = int(sys.argv[1])
settings = ProxySettings(allow_hosts=("api.bench.test",), allow_private=("127.0.0.0/8",),
                         ports=frozenset({port}))
with EgressProxy(settings, resolver=StaticResolver({"api.bench.test": ["127.0.0.1"]})) as p:
    print(p.socket_path, flush=True)
    sys.stdin.read()
"""

FORWARDER = r"""
import sys
from flux_system.sandbox._forwarder import bind_listener, serve
listener = bind_listener(0)
print(listener.getsockname()[1], flush=True)
serve(listener, sys.argv[1])
"""


@contextlib.contextmanager
def _process(code: str, *args: str, polite: bool = False) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the proxy script then leaves its with-block: socket removed
        try:
            proc.wait(5 if polite else 0.01)
        except subprocess.TimeoutExpired:  # the server and forwarder never read stdin
            proc.kill()
            proc.wait()


def _get(conn: http.client.HTTPConnection, target: str, close: bool) -> None:
    conn.request("GET", target, headers={"Connection": "close"} if close else {})
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200 and len(body) == 2048, resp.status


def proxy_figures(*, number: int = 300, rounds: int = 7) -> dict[str, Any]:
    """Measure both ratios (see the module docstring); returns the figures."""
    with (
        _process(SERVER) as server_port,
        _process(PROXY, server_port, polite=True) as socket_path,
        _process(FORWARDER, socket_path) as forwarder_port,
    ):
        sport, fport = int(server_port), int(forwarder_port)
        url = f"http://api.bench.test:{sport}/x"

        def direct_new() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", sport, timeout=10)
            _get(conn, "/x", close=True)
            conn.close()

        def proxied_new() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", fport, timeout=10)
            _get(conn, url, close=True)
            conn.close()

        plain = side_by_side(proxied_new, direct_new, number=number, rounds=rounds)

        direct = http.client.HTTPConnection("127.0.0.1", sport, timeout=10)
        tunnel = http.client.HTTPConnection("127.0.0.1", fport, timeout=10)
        tunnel.set_tunnel("api.bench.test", sport)
        tunnelled = side_by_side(
            lambda: _get(tunnel, "/x", close=False),
            lambda: _get(direct, "/x", close=False),
            number=number * 3,
            rounds=rounds,
        )
        direct.close()
        tunnel.close()
    return {
        "plain_get_new_connection": plain,
        "tunnel_get_keepalive": tunnelled,
    }


def run_figures(*, number: int = 10, rounds: int = 5) -> dict[str, Any]:
    """Figure 3 (see the module docstring): proxy-mode run vs network none."""
    import tempfile

    from flux_system import System, Workspace
    from flux_system.sandbox import Sandbox, SandboxSettings

    proxy = Sandbox.resolve(SandboxSettings(mode="require", profile="net-proxy"))
    none = Sandbox.resolve(SandboxSettings(mode="require", profile="net-proxy", network="none"))
    with (
        tempfile.TemporaryDirectory(dir="/tmp") as root,
        Workspace(root) as ws,
        System(ws, sandbox=proxy) as with_proxy,
        System(ws, sandbox=none) as without,
    ):
        for system in (with_proxy, without):  # warm both paths once
            assert system.run(["/bin/true"]).exit_code == 0
        return {
            "run_true_proxy_vs_none": side_by_side(
                lambda: with_proxy.run(["/bin/true"]),
                lambda: without.run(["/bin/true"]),
                number=number,
                rounds=rounds,
            )
        }


def audit_figures(*, number: int = 100, rounds: int = 7) -> dict[str, Any]:
    """Figure 4 (see the module docstring)."""
    import os
    import tempfile

    from flux_system.sandbox._audit import ProtectedPathAudit

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        root = Path(tmp)
        (root / ".git" / "hooks").mkdir(parents=True)
        for i in range(13):
            (root / ".git" / "hooks" / f"hook{i}.sample").write_bytes(b"x" * 2000)
        (root / ".git" / "config").write_bytes(b"[core]\n" * 10)
        (root / ".vscode").mkdir()
        (root / ".vscode" / "settings.json").write_bytes(b"{}")
        names = [str(p) for p in root.rglob("*")]

        def audit() -> None:
            with ProtectedPathAudit(root) as snapshot:
                snapshot.check(restore=True)

        def lstat_all() -> None:
            for name in names:
                os.lstat(name)

        return {"audit_vs_lstat": side_by_side(audit, lstat_all, number=number, rounds=rounds)}


def main() -> None:
    figures = proxy_figures()
    figures.update(run_figures())
    figures.update(audit_figures())
    for name, fig in figures.items():
        cand, base = fig["candidate_s"] * 1e6, fig["baseline_s"] * 1e6
        print(f"{name}: {fig['ratio']:.2f}x  ({cand:.0f} us vs {base:.0f} us baseline)")
    record("proxy", figures)


if __name__ == "__main__":
    main()
