"""Plain-HTTP request smuggling through the egress proxy, seen by a raw upstream.

The upstream here records every byte of its connection, so a second request hidden in
the first one's body shows as such (an HTTP server library would parse only the first
request and hide the rest). Each refusal has a positive control: the same body with
ordinary framing reaches the upstream as exactly one request.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from flux_system.net import StaticResolver
from flux_system.sandbox._proxy import EgressProxy, ProxyDenial, ProxySettings
from tests.flux_system.sandbox._proxy_client import TIMEOUT, connect_unix, read_answer

SMUGGLED = b"GET /admin HTTP/1.1\r\nHost: denied.flux.test\r\n\r\n"


class RawUpstream:
    """A loopback TCP server that keeps every byte of each connection and answers 200."""

    def __init__(self) -> None:
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._srv.getsockname()[1])
        self.seen: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            conn.settimeout(TIMEOUT)
            data = b""
            try:
                while b"\r\n\r\n" not in data or not data.endswith(b"\r\n\r\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass
            self.seen.append(data)
            conn.close()

    def close(self) -> None:
        self._srv.close()


@pytest.fixture
def upstream() -> Iterator[RawUpstream]:
    srv = RawUpstream()
    yield srv
    srv.close()


def _send(upstream: RawUpstream, connection: str) -> tuple[int, EgressProxy]:
    settings = ProxySettings(
        allow_hosts=("api.flux.test",),
        allow_private=("127.0.0.0/8",),
        ports=frozenset({upstream.port}),
    )
    proxy = EgressProxy(settings, resolver=StaticResolver({"api.flux.test": ["127.0.0.1"]}))
    with proxy.start(), connect_unix(proxy.socket_path) as s:
        s.sendall(
            b"POST http://api.flux.test:%d/form HTTP/1.1\r\nHost: api.flux.test\r\n"
            b"Connection: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (upstream.port, connection.encode(), len(SMUGGLED), SMUGGLED)
        )
        s.shutdown(socket.SHUT_WR)
        status = read_answer(s).status
    return status, proxy


@pytest.mark.parametrize(
    "connection", ["content-length", "close, Content-Length", "keep-alive,transfer-encoding"]
)
def test_connection_naming_a_framing_header_is_refused(
    upstream: RawUpstream, connection: str
) -> None:
    status, proxy = _send(upstream, connection)
    assert status == 400
    assert upstream.seen == []  # nothing reached the origin
    assert proxy.denials() == (
        ProxyDenial("POST", "api.flux.test", upstream.port, "bad_request", 400),
    )


def test_control_the_same_body_framed_arrives_as_one_request(upstream: RawUpstream) -> None:
    status, proxy = _send(upstream, "keep-alive")
    assert status == 200
    assert proxy.denials() == ()
    [data] = upstream.seen
    head, _, body = data.partition(b"\r\n\r\n")
    # the origin is told the length, so the smuggled bytes stay the POST's body
    assert b"\r\nContent-Length: %d" % len(SMUGGLED) in head
    assert body == SMUGGLED
