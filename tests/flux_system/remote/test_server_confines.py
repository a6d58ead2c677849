"""The server's own sandbox and egress guard hold for what a client asks, whatever it
sends: run and spawn see the sandbox's view; HTTP goes through the server's grants."""

from __future__ import annotations

import contextlib
import http.server
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from flux_system import RefusedError, System, Workspace
from flux_system.net import PrivateNetAllow, guarded_client
from flux_system.port import GuardedHttp, Substrate
from flux_system.remote import PortServer, ServerConfig, connect
from flux_system.sandbox import Sandbox, SandboxSettings
from tests.flux_system.sandbox._support import require_bwrap


class _Page(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Page.hits.append(self.path)
        body = b"internal page\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _page() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)


@contextlib.contextmanager
def _confined(
    root: Path, allow: PrivateNetAllow | None, ports: tuple[int, ...] = (80, 443)
) -> Iterator[Substrate]:
    """A server of *root* sandboxed as ``flux serve``'s default, its egress *allow*."""
    ws = Workspace(root)
    system = System(ws, sandbox=Sandbox.resolve(SandboxSettings(mode="require")))
    http = GuardedHttp(guarded_client(allow=allow, ports=ports))
    server = PortServer(ServerConfig(ws, system=system, http=http), log=lambda line: None)
    where = tempfile.mkdtemp(prefix="flux-port-")
    server.start_unix(f"{where}/s")
    try:
        with connect(f"unix:{where}/s") as sub:
            yield sub
    finally:
        server.close()
        system.close()
        ws.close()


def test_run_and_spawn_see_the_servers_sandbox_not_the_host(tmp_path: Path) -> None:
    require_bwrap()
    marker = Path(tempfile.mkdtemp(prefix="flux-host-")) / "host-only"
    marker.write_text("host\n")
    with Workspace(tmp_path) as ws, System(ws) as bare:  # positive control: it is there
        assert bare.run(["cat", str(marker)]).stdout == b"host\n"
    with _confined(tmp_path, None) as sub:
        ran = sub.processes.run(["cat", str(marker)], env={"HOME": str(marker.parent)})
        assert ran.exit_code != 0 and b"host" not in ran.stdout
        child = sub.processes.spawn(["cat", str(marker)])
        assert child.join(60)
        out = child.read_output()
        assert child.status().exit_code != 0 and b"host" not in out.stdout
        assert sub.processes.run(["cat", "/dev/null"]).exit_code == 0  # it runs at all


def test_http_goes_through_the_servers_grants_not_the_clients(tmp_path: Path) -> None:
    _Page.hits.clear()
    with _page() as url:
        port = (int(url.rsplit(":", 1)[1]),)
        assert urllib.request.urlopen(url + "/direct", timeout=10).read() == b"internal page\n"
        with _confined(tmp_path, None, port) as sub:  # no grant: loopback is private
            try:
                sub.http.http_request("GET", url + "/denied", headers={"Host": "example.com"})
            except RefusedError as exc:
                assert "blocked address (loopback)" in exc.message, exc
            else:
                raise AssertionError("the server fetched a private address it was not granted")
        with _confined(tmp_path, PrivateNetAllow(cidrs=("127.0.0.1/32",)), port) as sub:
            got = sub.http.http_request("GET", url + "/granted")  # positive control
            assert got.status == 200 and got.body == b"internal page\n"
    assert _Page.hits == ["/direct", "/granted"]  # the denied request never arrived
