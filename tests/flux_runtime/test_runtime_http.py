"""``http.request`` through the envelope and a real guarded client on loopback."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

from flux_runtime import Call, Context, EnvelopeReason, Outcome
from flux_system import System, Workspace
from flux_system.net import PrivateNetAllow, guarded_client
from flux_system.port import GuardedHttp, Substrate
from tests.flux_runtime._runtime import PERMISSIVE, rig

TOKEN = "tok-0123456789-abcdefgh"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    statuses: list[int]
    auth: list[str]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.auth.append(self.headers.get("authorization", ""))
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        body = f"status {status}; you sent {self.headers.get('authorization')}".encode()
        self.send_response(status)
        if status == 429:
            self.send_header("retry-after", "0")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def server(statuses: list[int]) -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.statuses, srv.auth = statuses, []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def _dispatch(tmp_path: Path, statuses: list[int]) -> tuple[Outcome, _Server, bytes]:
    with server(statuses) as srv:
        port = srv.server_address[1]
        client = guarded_client(allow=PrivateNetAllow(cidrs=["127.0.0.1/32"]), ports=[port])
        ws = Workspace(tmp_path)
        sub = Substrate.native(ws, processes=System(ws), http=GuardedHttp(client))
        with rig(tmp_path, policy=PERMISSIVE, environ={"API": TOKEN}, substrate=sub) as r:
            call = Call(
                "http.request",
                {
                    "url": f"http://127.0.0.1:{port}/x",
                    "headers": {"authorization": "Bearer secret:env/API"},
                },
            )
            out = r.executor.dispatch(call, Context("s", "agent"))
            evidence = r.log_path.read_bytes()
        client.close()
        ws.close()
    return out, srv, evidence


def test_429_is_retried_and_the_result_says_it_waited(tmp_path: Path) -> None:
    out, srv, evidence = _dispatch(tmp_path, [429, 200])
    assert out.ok and out.content["status"] == 200 and out.content["retries"] == 1
    assert "retries" in out.view
    assert srv.auth == [f"Bearer {TOKEN}"] * 2  # positive control: the secret was sent
    assert TOKEN not in out.view and TOKEN.encode() not in evidence


def test_503_is_not_retried(tmp_path: Path) -> None:
    out, srv, _ = _dispatch(tmp_path, [503, 200])
    assert out.ok and out.content["status"] == 503 and out.content["retries"] == 0
    assert len(srv.auth) == 1


def test_request_outside_the_grant_is_refused(tmp_path: Path) -> None:
    with server([]) as srv, rig(tmp_path, policy=PERMISSIVE) as r:
        client = guarded_client(ports=[srv.server_address[1]])  # loopback not granted
        ws = Workspace(tmp_path)
        sub = Substrate.native(ws, http=GuardedHttp(client))
        r.executor.substrate = sub
        call = Call("http.request", {"url": f"http://127.0.0.1:{srv.server_address[1]}/"})
        out = r.executor.dispatch(call, Context("s", "agent"))
        client.close()
        ws.close()
        assert out.reason is EnvelopeReason.OPERATION_FAILED and "Egress" in (out.error or "")
        assert srv.auth == []
