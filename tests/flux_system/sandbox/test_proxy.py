"""The host-side egress proxy against real loopback HTTP, TLS and DNS servers.

Each refusal has a positive control beside it: the same request with the grant it
lacked succeeds, so a refusal is the guard's doing and not a broken set-up.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
import trustme

from flux_system.net import DnsResolver, StaticResolver
from flux_system.sandbox._forwarder import open_lifeline
from flux_system.sandbox._proxy import LIFELINE, EgressProxy, ProxyDenial, ProxySettings
from tests._capabilities import require
from tests.flux_system.net._servers import FlipDnsServer, Handler, LoopbackHTTP
from tests.flux_system.sandbox._proxy_client import (
    connect_tunnel,
    connect_unix,
    get,
    read_answer,
    request,
)

LOOPBACK = ("127.0.0.0/8",)
PINNED = StaticResolver(
    {
        "localhost": ["127.0.0.1"],
        "api.flux.test": ["127.0.0.1"],
        "other.flux.test": ["127.0.0.1"],
        "meta.flux.test": ["169.254.169.254"],
    }
)


def _hello(h: Handler) -> None:
    h.reply(200, b"hello " + h.headers.get("Host", "").encode())


@pytest.fixture
def http() -> Iterator[LoopbackHTTP]:
    with LoopbackHTTP(routes={"/hello": _hello}) as srv:
        yield srv


def _proxy(
    hosts: tuple[str, ...], port: int, *, private: tuple[str, ...] = LOOPBACK, **kw: object
) -> EgressProxy:
    settings = ProxySettings(
        allow_hosts=hosts,
        allow_private=private,
        ports=frozenset({port}),
        **kw,  # type: ignore[arg-type]
    )
    return EgressProxy(settings, resolver=PINNED).start()


def test_plain_http_to_allowed_host_succeeds(http: LoopbackHTTP) -> None:
    with _proxy(("api.flux.test",), http.port) as proxy, connect_unix(proxy.socket_path) as s:
        answer = get(s, f"http://api.flux.test:{http.port}/hello", host="x")
    assert answer.status == 200
    assert answer.body == f"hello api.flux.test:{http.port}".encode()  # Host rewritten
    assert proxy.denials() == ()


def test_plain_http_to_other_host_is_refused(http: LoopbackHTTP) -> None:
    with _proxy(("api.flux.test",), http.port) as proxy, connect_unix(proxy.socket_path) as s:
        answer = get(s, f"http://other.flux.test:{http.port}/hello", host="api.flux.test")
    assert answer.status == 403
    assert answer.headers["x-flux-denied"] == "not_allowed"
    assert http.seen == []  # the server was never reached (it resolves to the same IP)
    assert proxy.denials() == (
        ProxyDenial("GET", "other.flux.test", http.port, "not_allowed", 403),
    )


def test_host_header_cannot_pick_another_virtual_host(http: LoopbackHTTP) -> None:
    extra = "Proxy-Authorization: Basic c2VjcmV0\r\nX-Keep: 1\r\n"
    with _proxy(("api.flux.test",), http.port) as proxy, connect_unix(proxy.socket_path) as s:
        answer = get(s, f"http://api.flux.test:{http.port}/hello", host="evil.test", extra=extra)
    assert answer.status == 200
    seen = http.seen[0].headers
    assert seen["host"] == f"api.flux.test:{http.port}"
    assert "proxy-authorization" not in seen
    assert seen["x-keep"] == "1"
    assert seen["connection"] == "close"


def test_connect_blocked_ip_literal_needs_allow_private(http: LoopbackHTTP) -> None:
    authority = f"127.0.0.1:{http.port}"
    with (
        _proxy(("127.0.0.1",), http.port, private=()) as proxy,
        connect_unix(proxy.socket_path) as s,
    ):
        answer = connect_tunnel(s, authority)
    assert answer.status == 403
    assert answer.headers["x-flux-denied"] == "blocked_address"
    [denial] = proxy.denials()
    assert (denial.method, denial.host, denial.reason) == (
        "CONNECT",
        "127.0.0.1",
        "blocked_address",
    )
    assert denial.address == "127.0.0.1"
    # Positive control: with the range granted the same tunnel opens and carries HTTP.
    with _proxy(("127.0.0.1",), http.port) as proxy, connect_unix(proxy.socket_path) as s:
        assert connect_tunnel(s, authority).status == 200
        answer = request(s, b"GET /hello HTTP/1.1\r\nHost: tunnel\r\n\r\n")
    assert (answer.status, answer.body) == (200, b"hello tunnel")


def test_connect_to_metadata_literal_is_refused(http: LoopbackHTTP) -> None:
    with _proxy(("api.flux.test",), 80) as proxy, connect_unix(proxy.socket_path) as s:
        answer = connect_tunnel(s, "169.254.169.254:80")
    assert answer.status == 403
    assert proxy.denials()[0].reason == "not_allowed"


def test_no_allowed_host_denies_everything(http: LoopbackHTTP) -> None:
    with _proxy((), http.port) as proxy:
        for raw in (
            f"CONNECT localhost:{http.port} HTTP/1.1\r\n\r\n",
            f"CONNECT 127.0.0.1:{http.port} HTTP/1.1\r\n\r\n",
            f"GET http://api.flux.test:{http.port}/hello HTTP/1.1\r\n\r\n",
        ):
            with connect_unix(proxy.socket_path) as s:
                assert request(s, raw.encode()).status == 403
    assert {d.reason for d in proxy.denials()} == {"not_allowed"}
    assert http.seen == []


def test_internal_name_is_admitted_only_when_listed(http: LoopbackHTTP) -> None:
    with _proxy(("localhost",), http.port) as proxy, connect_unix(proxy.socket_path) as s:
        assert get(s, f"http://localhost:{http.port}/hello", host="x").status == 200
    with _proxy(("*.flux.test",), http.port) as proxy, connect_unix(proxy.socket_path) as s:
        answer = get(s, f"http://localhost:{http.port}/hello", host="x")
    assert answer.status == 403
    assert proxy.denials()[0].reason == "not_allowed"


def test_port_outside_the_set_is_refused(http: LoopbackHTTP) -> None:
    with _proxy(("api.flux.test",), http.port + 1) as proxy, connect_unix(proxy.socket_path) as s:
        answer = connect_tunnel(s, f"api.flux.test:{http.port}")
    assert answer.status == 403
    assert proxy.denials()[0].reason == "port"


# --- DNS: resolved on the host, once, every answer classified -----------------------------


def test_dns_denied_name_never_reaches_the_resolver(http: LoopbackHTTP) -> None:
    with FlipDnsServer({"api.flux.test": ["127.0.0.1"], "denied.flux.test": ["127.0.0.1"]}) as dns:
        resolver = DnsResolver(["127.0.0.1"], port=dns.port, timeout=2.0)
        settings = ProxySettings(
            allow_hosts=("api.flux.test",), allow_private=LOOPBACK, ports=frozenset({http.port})
        )
        with EgressProxy(settings, resolver=resolver) as proxy:
            with connect_unix(proxy.socket_path) as s:
                denied = connect_tunnel(s, f"denied.flux.test:{http.port}")
            with connect_unix(proxy.socket_path) as s:  # positive control: resolved, reached
                allowed = get(s, f"http://api.flux.test:{http.port}/hello", host="x")
        queried = {name for name, _ in dns.queries()}
    assert denied.status == 403
    assert allowed.status == 200
    assert queried == {"api.flux.test"}


def test_name_resolving_to_metadata_is_refused(http: LoopbackHTTP) -> None:
    answers = {"meta.flux.test": ["169.254.169.254"], "api.flux.test": ["127.0.0.1"]}
    with FlipDnsServer(answers) as dns:
        resolver = DnsResolver(["127.0.0.1"], port=dns.port, timeout=2.0)
        settings = ProxySettings(
            allow_hosts=("meta.flux.test", "api.flux.test"),
            allow_private=LOOPBACK,
            ports=frozenset({http.port, 80}),
        )
        with EgressProxy(settings, resolver=resolver) as proxy:
            with connect_unix(proxy.socket_path) as s:
                answer = get(s, "http://meta.flux.test/latest/meta-data/", host="x")
            with connect_unix(proxy.socket_path) as s:
                tunnel = connect_tunnel(s, "meta.flux.test:80")
        queried = {name for name, _ in dns.queries()}
    assert answer.status == tunnel.status == 403
    [first, second] = proxy.denials()
    assert (first.reason, first.address, first.method) == (
        "blocked_address",
        "169.254.169.254",
        "GET",
    )
    assert second.reason == "blocked_address"
    assert "meta.flux.test" in queried  # the host asked: DNS happened here, not inside


def test_metadata_answer_is_refused_even_with_loopback_granted(http: LoopbackHTTP) -> None:
    with _proxy(("meta.flux.test",), 80) as proxy, connect_unix(proxy.socket_path) as s:
        assert connect_tunnel(s, "meta.flux.test:80").status == 403
    assert proxy.denials()[0].address == "169.254.169.254"


# --- TLS through CONNECT ----------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_tls_through_connect_verifies_the_name(ca: trustme.CA) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("api.flux.test").configure_cert(ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    with LoopbackHTTP(tls=ctx, routes={"/hello": _hello}) as tls_srv:
        with _proxy(("api.flux.test",), tls_srv.port) as proxy:
            raw = connect_unix(proxy.socket_path)
            assert connect_tunnel(raw, f"api.flux.test:{tls_srv.port}").status == 200
            with client_ctx.wrap_socket(raw, server_hostname="api.flux.test") as tls:
                answer = request(tls, b"GET /hello HTTP/1.1\r\nHost: api.flux.test\r\n\r\n")
    assert (answer.status, answer.body) == (200, b"hello api.flux.test")
    assert tls_srv.sni == ["api.flux.test"]


# --- malformed and oversized requests ------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "status", "reason"),
    [
        (b"GET http://api.flux.test/ HTTP/1.1\nHost: x\n\n\r\n\r\n", 400, "bad_request"),
        (b"GET  http://api.flux.test/ HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"GET http://api.flux.test/ HTTP/2\r\n\r\n", 400, "bad_request"),
        (b"GET http://a/ HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", 400, "bad_request"),
        (
            b"GET http://a/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            b"GET http://a/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "bad_request",
        ),
        (b"GET https://api.flux.test/ HTTP/1.1\r\n\r\n", 400, "https_requires_connect"),
        (b"GET /hello HTTP/1.1\r\nHost: api.flux.test\r\n\r\n", 403, "malformed"),
        (b"GET http://user@api.flux.test/ HTTP/1.1\r\n\r\n", 403, "userinfo"),
        (b"GET http://0x7f.1/ HTTP/1.1\r\n\r\n", 403, "non_canonical_ip"),
        (b"CONNECT api.flux.test HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"CONNECT api.flux.test:0443 HTTP/1.1\r\n\r\n", 400, "bad_request"),
        (b"CONNECT [::1 HTTP/1.1\r\n\r\n", 400, "bad_request"),
    ],
)
def test_malformed_request_is_refused(raw: bytes, status: int, reason: str) -> None:
    with _proxy(("api.flux.test",), 80) as proxy, connect_unix(proxy.socket_path) as s:
        answer = request(s, raw)
    assert (answer.status, answer.headers["x-flux-denied"]) == (status, reason)
    assert [d.reason for d in proxy.denials()] == [reason]


def test_oversized_head_is_refused() -> None:
    with _proxy(("api.flux.test",), 80, max_head_bytes=2048) as proxy:
        with connect_unix(proxy.socket_path) as s:
            s.sendall(b"GET http://api.flux.test/ HTTP/1.1\r\nX: " + b"a" * 4096)
            answer = read_answer(s)
    assert answer.status == 431
    assert proxy.denials()[0].reason == "head_too_large"


def test_connection_bound_refuses_extra_connections(http: LoopbackHTTP) -> None:
    with _proxy(("api.flux.test",), http.port, max_connections=1) as proxy:
        holder = connect_unix(proxy.socket_path)
        assert connect_tunnel(holder, f"api.flux.test:{http.port}").status == 200
        with connect_unix(proxy.socket_path) as extra:
            assert read_answer(extra).status == 503
        holder.close()
    assert [d.reason for d in proxy.denials()] == ["too_many_connections"]


def test_idle_tunnel_is_closed(http: LoopbackHTTP) -> None:
    with _proxy(("api.flux.test",), http.port, idle_timeout=0.2) as proxy:
        with connect_unix(proxy.socket_path) as s:
            assert connect_tunnel(s, f"api.flux.test:{http.port}").status == 200
            assert s.recv(1) == b""  # the proxy ended it (TIMEOUT is the hang guard)


def test_slow_head_is_cut_off() -> None:
    with _proxy(("api.flux.test",), 80, head_timeout=0.2) as proxy:
        with connect_unix(proxy.socket_path) as s:
            s.sendall(b"GET http://api.flux.test/ HTTP/1.1\r\n")
            assert read_answer(s).status == 408


def test_close_ends_live_tunnels_and_removes_the_socket(http: LoopbackHTTP) -> None:
    proxy = _proxy(("api.flux.test",), http.port)
    path = proxy.socket_path
    s = connect_unix(path)
    assert connect_tunnel(s, f"api.flux.test:{http.port}").status == 200
    proxy.close()
    assert s.recv(1) == b""
    s.close()
    with socket.socket(socket.AF_UNIX) as late, pytest.raises(FileNotFoundError):
        late.connect(path)
    proxy.close()  # idempotent


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="bad host pattern"):
        EgressProxy(ProxySettings(allow_hosts=("a b",)))
    with pytest.raises(ValueError, match="cidrs"):
        EgressProxy(ProxySettings(allow_private=("10.0.0.1/8",)))
    with pytest.raises(ValueError, match="max_connections"):
        EgressProxy(ProxySettings(max_connections=0))
    with pytest.raises(TypeError):
        EgressProxy(object())  # type: ignore[arg-type]


# --- plain HTTP bodies: relayed by declared length, nothing after it ----------------------


@contextlib.contextmanager
def _keepalive_server() -> Iterator[tuple[int, list[bytes]]]:
    """A raw server that answers every head it reads (ignoring ``Connection: close``)
    and records every byte; it closes after 1 s without input (its own hang guard)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(1.0)
            data = b""
            while True:
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    break
                if not chunk:
                    break
                data += chunk
                while b"\r\n\r\n" in data:
                    head, data = data.split(b"\r\n\r\n", 1)
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    while len(data) < length:
                        data += conn.recv(65536)
                    received.append(head + b"\r\n\r\n" + data[:length])
                    data = data[length:]
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(srv.getsockname()[1]), received
    finally:
        thread.join(10)
        srv.close()


def test_second_request_cannot_ride_along_with_another_host() -> None:
    with _keepalive_server() as (port, received):
        with _proxy(("api.flux.test",), port) as proxy, connect_unix(proxy.socket_path) as s:
            s.sendall(
                f"GET http://api.flux.test:{port}/a HTTP/1.1\r\nHost: api.flux.test\r\n\r\n"
                "GET /internal HTTP/1.1\r\nHost: evil.internal\r\n\r\n".encode()
            )
            answer = read_answer(s)
    assert answer.status == 200
    assert len(received) == 1
    assert b"evil.internal" not in b"".join(received)


def test_request_body_is_relayed_by_its_length() -> None:
    with _keepalive_server() as (port, received):
        with _proxy(("api.flux.test",), port) as proxy, connect_unix(proxy.socket_path) as s:
            s.sendall(
                f"POST http://api.flux.test:{port}/p HTTP/1.1\r\nContent-Length: 5\r\n\r\n"
                "hello"
                "GET /smuggled HTTP/1.1\r\n\r\n".encode()
            )
            assert read_answer(s).status == 200
    [got] = received
    assert got.startswith(b"POST /p HTTP/1.1\r\nHost: api.flux.test:")
    assert got.endswith(b"\r\n\r\nhello")


def test_chunked_request_body_on_plain_http_is_refused() -> None:
    raw = b"POST http://api.flux.test/p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    with _proxy(("api.flux.test",), 80) as proxy, connect_unix(proxy.socket_path) as s:
        answer = request(s, raw)
    assert (answer.status, answer.headers["x-flux-denied"]) == (400, "bad_request")


PEER_CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
try:
    s.sendall(("CONNECT api.flux.test:%s HTTP/1.1\\r\\n\\r\\n" % sys.argv[2]).encode())
except BrokenPipeError:
    pass  # refused at accept: the answer is already waiting
print(s.recv(4096).split(b"\\r\\n")[0].decode())
"""


def test_peer_with_another_uid_is_refused(http: LoopbackHTTP) -> None:
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None, "root and setpriv")
    with _proxy(("api.flux.test",), http.port) as proxy:
        os.chmod(os.path.dirname(proxy.socket_path), 0o711)  # let uid 65534 reach the socket
        os.chmod(proxy.socket_path, 0o777)
        argv = ["/usr/bin/python3", "-I", "-c", PEER_CLIENT, proxy.socket_path, str(http.port)]
        other = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        same = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert other.stdout.strip() == "HTTP/1.1 403 Forbidden"
    assert same.stdout.strip() == "HTTP/1.1 200 Connection established"  # positive control
    assert [d.reason for d in proxy.denials()] == ["peer"]


def test_ipv6_literal_through_connect_needs_its_range() -> None:
    with LoopbackHTTP(host="::1", routes={"/hello": _hello}) as v6:
        authority = f"[::1]:{v6.port}"
        with _proxy(("::1",), v6.port, private=()) as proxy, connect_unix(proxy.socket_path) as s:
            assert connect_tunnel(s, authority).status == 403
        assert proxy.denials()[0].reason == "blocked_address"
        with (
            _proxy(("::1",), v6.port, private=("::1/128",)) as proxy,
            connect_unix(proxy.socket_path) as s,
        ):
            assert connect_tunnel(s, authority).status == 200  # positive control
            answer = request(s, b"GET /hello HTTP/1.1\r\nHost: v6\r\n\r\n")
    assert (answer.status, answer.body) == (200, b"hello v6")


def test_ipv4_mapped_ipv6_literal_is_refused() -> None:
    with _proxy(("::ffff:127.0.0.1",), 80) as proxy, connect_unix(proxy.socket_path) as s:
        assert connect_tunnel(s, "[::ffff:127.0.0.1]:80").status == 403
    assert proxy.denials()[0].reason == "blocked_address"


# --- the lifeline: the proxy ends with the run, however the run ended --------------------


def _wait_closed(path: str) -> None:
    for _ in range(1000):  # hang guard: 10 s
        if not os.path.exists(path):
            return
        time.sleep(0.01)
    raise AssertionError("the proxy did not close")


def test_proxy_closes_when_the_lifeline_ends(http: LoopbackHTTP) -> None:
    proxy = _proxy(("api.flux.test",), http.port, lifeline_deadline=60.0)
    path = proxy.socket_path
    lifeline = open_lifeline(path)
    tunnel = connect_unix(path)
    assert connect_tunnel(tunnel, f"api.flux.test:{http.port}").status == 200
    with connect_unix(path) as fake:  # a second "lifeline" is only a bad request
        assert request(fake, LIFELINE).status == 403
    assert os.path.exists(path)  # positive control: alive while the lifeline is held
    lifeline.close()  # as when the sandbox's processes are gone
    _wait_closed(path)
    assert tunnel.recv(1) == b""  # live tunnels ended too
    tunnel.close()
    proxy.close()  # idempotent after closing itself
    assert [d.reason for d in proxy.denials()] == ["malformed"]


def test_proxy_closes_when_no_lifeline_comes() -> None:
    proxy = _proxy(("api.flux.test",), 80, lifeline_deadline=0.2)
    _wait_closed(proxy.socket_path)
    proxy.close()


class _SlowResolver:
    """A resolver that takes *delay* seconds (a slow nameserver), then answers."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def resolve(self, host: str, port: int) -> list[ipaddress.IPv4Address]:
        time.sleep(self.delay)
        return [ipaddress.IPv4Address("127.0.0.1")]


def test_close_waits_for_a_close_already_under_way(http: LoopbackHTTP) -> None:
    """Regression: the run's finish() called close() while the lifeline's own close was
    still joining a handler; it returned at once, the interpreter could exit, and the
    socket directory was left behind in /tmp."""
    settings = ProxySettings(
        allow_hosts=("api.flux.test",),
        allow_private=LOOPBACK,
        ports=frozenset({http.port}),
        lifeline_deadline=60.0,
    )
    proxy = EgressProxy(settings, resolver=_SlowResolver(1.0)).start()
    path = proxy.socket_path
    lifeline = open_lifeline(path)
    busy = connect_unix(path)
    busy.sendall(f"CONNECT api.flux.test:{http.port} HTTP/1.1\r\n\r\n".encode())
    time.sleep(0.2)  # let the handler reach the slow resolver (not an assertion)
    lifeline.close()  # the proxy starts closing itself, joining the busy handler
    for _ in range(1000):  # hang guard: 10 s
        if proxy._closed:
            break
        time.sleep(0.01)
    proxy.close()
    assert not os.path.exists(path)
    busy.close()
