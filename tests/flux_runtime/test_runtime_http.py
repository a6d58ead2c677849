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


class _BigHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        size = int(self.path.rsplit("/", 1)[1])
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(size))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client may stop reading at its cap
            for _ in range(size // 65536):
                self.wfile.write(b"a" * 65536)
            self.wfile.write(b"a" * (size % 65536))

    def log_message(self, *args: object) -> None:
        pass


def test_a_body_larger_than_the_cap_is_a_typed_error_naming_host_and_cap(
    tmp_path: Path,
) -> None:
    from flux_runtime._builtins_system import HTTP_BODY_CAP
    from flux_system.net import RequestLimits

    srv = _Server(("127.0.0.1", 0), _BigHandler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    port = srv.server_address[1]
    big = HTTP_BODY_CAP + 1024 * 1024
    grant = PrivateNetAllow(cidrs=["127.0.0.1/32"])
    # (the client's own cap, body size, the cap the error names): the default client
    # reads 10 MiB; flux run's and flux serve's stop at HTTP_BODY_CAP; a serving side
    # may cap lower still.
    cases = [
        (None, big, HTTP_BODY_CAP),
        (HTTP_BODY_CAP, big, HTTP_BODY_CAP),
        (1024, 4096, 1024),
    ]
    try:
        for cap, size, named in cases:
            limits = None if cap is None else RequestLimits(max_body=cap)
            client = guarded_client(allow=grant, ports=[port], limits=limits)
            ws = Workspace(tmp_path)
            sub = Substrate.native(ws, http=GuardedHttp(client))
            url = f"http://127.0.0.1:{port}/{size}"
            # Positive control: the server sends the body, the client reads to its cap.
            got = sub.http.http_request("GET", url)
            assert len(got.body) == (size if cap is None else cap)
            with rig(tmp_path, policy=PERMISSIVE, substrate=sub) as r:
                for op in ("http.request", "web.fetch"):
                    out = r.executor.dispatch(Call(op, {"url": url}), Context("s", "agent"))
                    assert not out.ok and out.reason is EnvelopeReason.TOO_LARGE, (op, cap, out)
                    assert "127.0.0.1" in out.view and f"{named}-byte" in out.view
                small = f"http://127.0.0.1:{port}/2000"
                for op in ("http.request", "web.fetch"):
                    if cap is None or cap >= 2000:
                        ok = r.executor.dispatch(Call(op, {"url": small}), Context("s", "agent"))
                        assert ok.ok, (op, ok)
            client.close()
            ws.close()
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def test_the_flux_run_client_stops_reading_at_the_cap() -> None:
    import argparse

    from flux_runtime._builtins_system import HTTP_BODY_CAP
    from flux_runtime.cli._run import _agent_http

    args = argparse.Namespace(allow_host=[], allow_private=[], allow_port=[])
    http_port = _agent_http(args)
    assert http_port._client.limits.max_body == HTTP_BODY_CAP


class _Redirector(http.server.BaseHTTPRequestHandler):
    server: _Server
    target = ""  # where /r... redirects (set by the test)

    def do_GET(self) -> None:
        self.server.auth.append(f"{self.server.server_address[0]!s}{self.path}")
        if self.path.startswith("/r"):
            self.send_response(302)
            self.send_header("location", _Redirector.target)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = b"landed"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


NO_OTHER = """
version = 1
[[grant]]
id = "net"
subjects = ["**"]
actions = ["http.request", "web.fetch"]
resources = ["net/**"]
[[deny]]
id = "no-other"
subjects = ["**"]
actions = ["**"]
resources = ["net/127.0.0.2"]
"""


def test_a_redirect_cannot_take_a_request_past_a_host_deny(tmp_path: Path) -> None:
    # The policy decides on the host of the URL asked for; a client that follows
    # redirects took the request on to a host the policy denies.
    import argparse

    from flux_runtime.cli._run import _agent_http

    seen: list[str] = []
    servers = [_Server((host, 0), _Redirector) for host in ("127.0.0.1", "127.0.0.2")]
    threads = []
    for srv in servers:
        srv.statuses, srv.auth = [], seen
        threads.append(threading.Thread(target=srv.serve_forever, daemon=True))
        threads[-1].start()
    here, there = (srv.server_address[1] for srv in servers)
    _Redirector.target = f"http://127.0.0.2:{there}/leak?data=x"
    try:
        grants = PrivateNetAllow(cidrs=["127.0.0.0/8"])
        following = guarded_client(allow=grants, ports=[here, there])
        # Positive control: a following client lands on the denied host.
        got = following.get(f"http://127.0.0.1:{here}/r")
        assert got.status_code == 200 and seen[-1] == "127.0.0.2/leak?data=x"
        following.close()
        seen.clear()
        args = argparse.Namespace(
            allow_host=[], allow_private=["127.0.0.0/8"], allow_port=[here, there]
        )
        ws = Workspace(tmp_path)
        sub = Substrate.native(ws, http=_agent_http(args))  # the client flux run builds
        with rig(tmp_path, policy=NO_OTHER, substrate=sub) as r:
            for op in ("http.request", "web.fetch"):
                url = f"http://127.0.0.1:{here}/r-{op}"
                out = r.executor.dispatch(Call(op, {"url": url}), Context("s", "agent"))
                assert out.ok and out.content["status"] == 302, out
                assert out.content["location"] == _Redirector.target
                assert "not followed" in out.view
                onward = Call(op, {"url": out.content["location"]})
                denied = r.executor.dispatch(onward, Context("s", "agent"))
                assert denied.reason is EnvelopeReason.POLICY_DENIED
        assert seen == ["127.0.0.1/r-http.request", "127.0.0.1/r-web.fetch"]  # never /leak
        ws.close()
    finally:
        for srv, thread in zip(servers, threads, strict=True):
            srv.shutdown()
            srv.server_close()
            thread.join(timeout=10)
