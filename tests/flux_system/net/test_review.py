"""Regression tests from the adversarial review of the egress guard (decision 0034).

Each test is named after what it reproduces: a way a request could reach a blocked or
unvetted destination, leak a caller's secrets, or make the guard fail open or crash
with an untyped error. Real servers on loopback, a real DNS server; nothing patched.
"""

from __future__ import annotations

import gzip
import resource
import socket
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    DnsResolver,
    PrivateNetAllow,
    RequestLimits,
    StaticResolver,
    dial_tcp,
    dial_udp,
    guard_url,
    guarded_async_client,
    guarded_client,
)
from flux_system.net._redirects import retry_delay
from tests.flux_system.net._servers import (
    FlipDnsServer,
    Handler,
    LoopbackHTTP,
    Route,
    free_port_on,
)

GRANT = PrivateNetAllow(cidrs=["127.0.0.1/32"])
NAMES = {"a.flux.example": ["127.0.0.1"], "b.flux.example": ["127.0.0.1"]}


@pytest.fixture
def port() -> int:
    return free_port_on(["127.0.0.1"])


def _client(port: int, **kw: Any) -> Any:
    return guarded_client(allow=GRANT, resolver=StaticResolver(NAMES), ports=[port], **kw)


def _redirect(to: str, status: int = 302) -> Route:
    def route(h: Handler) -> None:
        h.reply(status, headers={"Location": to.format(port=h.server.owner.port)})

    return route


def _ok(h: Handler) -> None:
    h.reply(200, b"ok")


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


# ------------------------------------------------------------------ Retry-After


@pytest.mark.parametrize(
    "value",
    [
        "Wed, 21 Oct 2015 07:28:00 +999999999999999999",  # zone offset overflows
        "Wed, 21 Oct 2015 07:28:00 -999999999999999999",
        "Wed, 21 Oct 99999 07:28:00 GMT",
        "-5",
        "1e9",
        "nan",
        "\u0661",  # an Arabic-Indic digit
        "",
        "9" * 5000,
    ],
)
def test_retry_after_garbage_is_ignored_never_raises(value: str) -> None:
    delay = retry_delay(value, now=time.time)
    assert delay is None or 0 <= delay <= 86401


def test_retry_after_with_an_overflowing_zone_offset_does_not_crash_the_client(
    port: int,
) -> None:
    answers = [(429, "Wed, 21 Oct 2015 07:28:00 +999999999999999999")]

    def route(h: Handler) -> None:
        if answers:
            status, value = answers.pop(0)
            h.reply(status, b"busy", {"Retry-After": value})
        else:
            h.reply(200, b"done")

    sleeps: list[float] = []
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}) as srv:
        with _client(port, sleep=sleeps.append) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    # Unusable Retry-After: the default wait applies, then the retry succeeds.
    assert (r.status_code, r.retries, sleeps) == (200, 1, [1.0])
    assert len(srv.seen) == 2


# ------------------------------------------------------------------ bodies


def _zeros_gzip(size: int, layers: int) -> bytes:
    data = b""
    block = b"\0" * (1 << 20)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(block) for _ in range(size >> 20)]
    data = b"".join(parts) + packer.flush()
    for _ in range(layers - 1):
        data = gzip.compress(data, 9)
    return data


_BOMB = _zeros_gzip(64 << 20, 1)  # 64 MiB of zeros in ~64 KiB
_STACKED = _zeros_gzip(64 << 20, 2)  # the same behind a second gzip layer: ~300 bytes


def _peak_during(func: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = func()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("body", "coding"), [(_BOMB, "gzip"), (_STACKED, "gzip, gzip")], ids=["one", "stacked"]
)
def test_compression_bomb_is_decoded_in_bounded_steps(port: int, body: bytes, coding: str) -> None:
    route: Route = lambda h: h.reply(200, body, {"Content-Encoding": coding})  # noqa: E731
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}):
        with _client(port, limits=RequestLimits(max_body=1 << 20)) as client:
            r, peak = _peak_during(lambda: client.get(f"http://a.flux.example:{port}/"))
    # Never the whole decoded body in memory at once (64 MiB), whatever the layering.
    assert peak < 12 << 20
    assert len(r.content) <= 1 << 20
    if coding == "gzip":
        assert r.truncated and r.content == b"\0" * (1 << 20)
        assert "content-encoding" not in r.headers
    else:
        # Stacked codings are not undone: the body is handed out as received, labelled.
        assert r.content == body and not r.truncated
        assert r.headers["content-encoding"] == "gzip, gzip"


def test_async_compression_bomb_is_decoded_in_bounded_steps(port: int) -> None:
    route: Route = lambda h: h.reply(200, _BOMB, {"Content-Encoding": "gzip"})  # noqa: E731

    async def main() -> Any:
        client = guarded_async_client(
            allow=GRANT,
            resolver=StaticResolver(NAMES),
            ports=[port],
            limits=RequestLimits(max_body=1 << 20),
        )
        async with client:
            return await client.get(f"http://a.flux.example:{port}/")

    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}):
        r, peak = _peak_during(lambda: anyio.run(main))
    assert peak < 12 << 20 and r.truncated and len(r.content) == 1 << 20


def test_unknown_content_coding_is_kept_not_claimed_decoded(port: int) -> None:
    route: Route = lambda h: h.reply(200, b"\x1b\x00raw", {"Content-Encoding": "br"})  # noqa: E731
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}):
        with _client(port) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert r.content == b"\x1b\x00raw" and r.headers["content-encoding"] == "br"


def test_corrupt_gzip_body_is_an_httpx_decoding_error(port: int) -> None:
    route: Route = lambda h: h.reply(200, b"not gzip at all", {"Content-Encoding": "gzip"})  # noqa: E731
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}):
        with _client(port) as client, pytest.raises(httpx.DecodingError):
            client.get(f"http://a.flux.example:{port}/")


def test_deflate_with_and_without_zlib_header_is_decoded(port: int) -> None:
    text = b"deflated " * 100
    raw = zlib.compressobj(6, zlib.DEFLATED, -15)
    routes: dict[str, Route] = {
        "/zlib": lambda h: h.reply(200, zlib.compress(text), {"Content-Encoding": "deflate"}),
        "/raw": lambda h: h.reply(
            200, raw.compress(text) + raw.flush(), {"Content-Encoding": "deflate"}
        ),
    }
    with LoopbackHTTP("127.0.0.1", port, routes=routes):
        with _client(port) as client:
            for path in ("/zlib", "/raw"):
                r = client.get(f"http://a.flux.example:{port}{path}")
                assert r.content == text and "content-encoding" not in r.headers


# ------------------------------------------------------------------ redirects


def test_301_after_put_with_a_body_is_refused_not_sent_empty(port: int) -> None:
    routes = {"/old": _redirect("/new", 301), "/new": _ok}
    with LoopbackHTTP("127.0.0.1", port, routes=routes) as srv:
        with _client(port) as client:
            for method in ("PUT", "PATCH", "DELETE"):
                with pytest.raises(EgressDeniedError) as info:
                    client.request(method, f"http://a.flux.example:{port}/old", content=b"data")
                assert info.value.reason is EgressReason.REDIRECT
            # Without a body the hop is harmless and followed with the same method.
            r = client.request("DELETE", f"http://a.flux.example:{port}/old")
    assert r.status_code == 200
    assert [(s.method, s.path) for s in srv.seen if s.path == "/new"] == [("DELETE", "/new")]


@pytest.mark.parametrize(
    "location",
    [
        "//127.0.0.2:{port}/x",  # protocol-relative to a blocked address
        "HTTP://127.0.0.2:{port}/x",
        "http://127.0.0.2.:{port}/x",
        "http://[::ffff:7f00:2]:{port}/x",
        "http://a.flux.example:{port}@127.0.0.2:{port}/x",
        "http:127.0.0.2/x",
        "http://a.flux.example%2f@127.0.0.2/",
        "https:/127.0.0.2/",
        "http://127.0.0.2\t:{port}/",
        "http://127%2e0%2e0%2e2:{port}/",
    ],
)
def test_location_spellings_never_reach_an_unvetted_address(port: int, location: str) -> None:
    with LoopbackHTTP("127.0.0.1", port, routes={"/r": _redirect(location)}) as srv:
        with _client(port) as client:
            try:
                r = client.get(f"http://a.flux.example:{port}/r")
            except (EgressDeniedError, httpx.InvalidURL, httpx.RemoteProtocolError):
                pass  # refused by the guard, or httpx could not even parse the Location
            else:  # resolved against the first origin: it stayed on the vetted server
                assert r.target.host == "a.flux.example"
    assert all(s.path != "/x" or s.headers["host"].startswith("a.") for s in srv.seen)


def test_cross_origin_hop_drops_client_level_auth_cookies_and_proxy_auth(port: int) -> None:
    routes = {"/cross": _redirect("http://b.flux.example:{port}/echo"), "/echo": _ok}
    secrets = {"Proxy-Authorization": "Basic cHg=", "Authorization": "Bearer t", "X-Tok": "1"}
    with LoopbackHTTP("127.0.0.1", port, routes=routes) as srv:
        with _client(port, headers=secrets) as client:
            client.cookies.set("sid", "s3", domain="a.flux.example")
            client.auth = ("user", "pass")
            client.get(f"http://a.flux.example:{port}/cross")
    first, hop = srv.seen
    assert {"proxy-authorization", "authorization", "cookie", "x-tok"} <= set(first.headers)
    assert {"proxy-authorization", "authorization", "cookie", "x-tok"}.isdisjoint(hop.headers)


# ------------------------------------------------------------------ request line


def test_target_extension_cannot_rewrite_the_request_line(port: int) -> None:
    # httpcore honours a "target" extension: an absolute-form request line would turn
    # a vetted forward proxy into a path to any address.
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _ok}) as srv:
        with _client(port) as client, pytest.raises(EgressDeniedError) as info:
            client.get(
                f"http://a.flux.example:{port}/",
                extensions={"target": b"http://169.254.169.254/latest/meta-data/"},
            )
    assert info.value.reason is EgressReason.MALFORMED
    assert srv.seen == []


# ------------------------------------------------------------------ sockets: audit hooks


class _Audit:
    """Records socket name lookups and connects while ``on`` (audit hooks are forever)."""

    def __init__(self) -> None:
        self.on = False
        self.lookups: list[tuple[Any, ...]] = []
        self.connects: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.on:
            return
        if event == "socket.getaddrinfo" or event.startswith("socket.gethostby"):
            with self.lock:
                self.lookups.append(args)
        elif event == "socket.connect":
            with self.lock:
                self.connects.append(args[1])


_AUDIT = _Audit()
sys.addaudithook(_AUDIT)


@pytest.fixture
def audit() -> Iterator[_Audit]:
    _AUDIT.lookups.clear()
    _AUDIT.connects.clear()
    _AUDIT.on = True
    try:
        yield _AUDIT
    finally:
        _AUDIT.on = False


def test_no_name_lookup_and_connects_only_to_vetted_addresses(audit: _Audit) -> None:
    v6 = PrivateNetAllow(cidrs=["127.0.0.1/32", "::1/128"])
    names = StaticResolver({"a.flux.example": ["127.0.0.1"], "six.flux.example": ["::1"]})

    with (
        LoopbackHTTP("127.0.0.1", 0, routes={"/": _ok}) as four,
        LoopbackHTTP("::1", 0, routes={"/": _ok}) as six,
    ):
        p4, p6 = four.port, six.port
        ports = [p4, p6]

        async def async_get(url: str) -> int:
            async with guarded_async_client(allow=v6, resolver=names, ports=ports) as client:
                return (await client.get(url)).status_code

        with guarded_client(allow=v6, resolver=names, ports=ports) as client:
            assert client.get(f"http://a.flux.example:{p4}/").status_code == 200
            assert client.get(f"http://six.flux.example:{p6}/").status_code == 200
            assert client.get(f"http://[::1]:{p6}/").status_code == 200
        assert anyio.run(async_get, f"http://a.flux.example:{p4}/") == 200
        assert anyio.run(async_get, f"http://six.flux.example:{p6}/") == 200
        dial_tcp("a.flux.example", p4, allow=v6, resolver=names, ports=ports).close()
        dial_udp("six.flux.example", p6, allow=v6, resolver=names, ports=ports).close()
        with guarded_client(resolver=names, ports=ports) as client:  # no grant
            with pytest.raises(EgressDeniedError):
                client.get(f"http://a.flux.example:{p4}/")
    assert audit.lookups == []
    peers = [(c[0], c[1]) for c in audit.connects]
    assert set(peers) == {("127.0.0.1", p4), ("::1", p6)}
    assert len(peers) == 7  # 3 sync connections, 2 async, 2 dials; none for the refusal


def test_with_real_dns_the_only_other_peer_is_the_nameserver(audit: _Audit) -> None:
    port = free_port_on(["127.0.0.2"])
    with (
        FlipDnsServer(
            {"rebind.flux.example": ["127.0.0.2"]}, {"rebind.flux.example": ["127.0.0.3"]}
        ) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _ok}),
    ):
        resolver = DnsResolver(["127.0.0.1"], port=dns_server.port, timeout=2.0)
        allow = PrivateNetAllow(cidrs=["127.0.0.0/8"])
        with guarded_client(allow=allow, resolver=resolver, ports=[port]) as client:
            assert client.get(f"http://rebind.flux.example:{port}/").status_code == 200
    assert audit.lookups == []
    peers = {(c[0], c[1]) for c in audit.connects}
    assert peers <= {("127.0.0.2", port), ("127.0.0.1", dns_server.port)}
    assert ("127.0.0.2", port) in peers


# ------------------------------------------------------------------ connection pool


def _whoami(h: Handler) -> None:
    h.reply(200, str(h.client_address[1]).encode())


def test_kept_alive_connection_is_never_shared_between_hosts(port: int) -> None:
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _whoami}):
        with _client(port) as client:
            a1 = client.get(f"http://a.flux.example:{port}/").text
            b1 = client.get(f"http://b.flux.example:{port}/").text
            a2 = client.get(f"http://a.flux.example:{port}/").text
            ip = client.get(f"http://127.0.0.1:{port}/").text
    assert a1 == a2  # keep-alive works for the same host ...
    assert len({a1, b1, ip}) == 3  # ... and never crosses to another host name


def test_kept_alive_connection_is_not_used_once_the_host_rebinds_to_a_blocked_address() -> None:
    port = free_port_on(["127.0.0.2"])
    name = "rebind.flux.example"
    with (
        FlipDnsServer({name: ["127.0.0.2"]}, {name: ["169.254.169.254"]}) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _whoami}) as srv,
    ):
        resolver = DnsResolver(["127.0.0.1"], port=dns_server.port, timeout=2.0)
        allow = PrivateNetAllow(cidrs=["127.0.0.2/32"])
        with guarded_client(allow=allow, resolver=resolver, ports=[port]) as client:
            assert client.get(f"http://{name}:{port}/").status_code == 200
            with pytest.raises(EgressDeniedError) as info:
                client.get(f"http://{name}:{port}/")
    assert info.value.reason is EgressReason.BLOCKED_ADDRESS
    assert len(srv.seen) == 1


# ------------------------------------------------------------------ dial


def test_dial_with_an_infinite_or_bool_timeout_is_a_value_error() -> None:
    names = StaticResolver(NAMES)
    for bad in (float("inf"), float("nan"), True, -1.0):
        with pytest.raises(ValueError):
            dial_tcp("a.flux.example", 80, allow=GRANT, resolver=names, timeout=bad)


def test_dial_socket_creation_failure_is_translated() -> None:
    # Out of file descriptors: socket() itself fails; no raw OSError may escape.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hold: list[socket.socket] = []
    port = free_port_on(["127.0.0.1"])
    names = StaticResolver(NAMES)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        with pytest.raises(OSError):
            while len(hold) < 512:
                hold.append(socket.socket())
        with pytest.raises(EgressDeniedError) as info:
            dial_tcp("a.flux.example", port, allow=GRANT, resolver=names, ports=[port])
    finally:
        for s in hold:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert info.value.reason is EgressReason.UNREACHABLE
    assert isinstance(info.value.__cause__, OSError)


# ------------------------------------------------------------------ secrets in errors


def test_errors_never_carry_the_query_or_userinfo(port: int) -> None:
    def slow(h: Handler) -> None:
        time.sleep(0.6)
        h.reply(200, b"late")

    routes = {"/r": _redirect("http://127.0.0.2:{port}/?token=SECRET"), "/slow": slow}
    urls = [
        f"http://user:SECRET@a.flux.example:{port}/",
        f"http://a.flux.example:{port}/r?token=SECRET",
        "http://169.254.169.254/?token=SECRET",
        f"http://a.flux.example:{port}/slow?token=SECRET",
        f"http://unknown.flux.example:{port}/?token=SECRET",
    ]
    with LoopbackHTTP("127.0.0.1", port, routes=routes):
        with _client(port, limits=RequestLimits(deadline=0.3)) as client:
            for url in urls:
                with pytest.raises(EgressDeniedError) as info:
                    client.get(url)
                for exc in _causes(info.value):
                    assert "SECRET" not in str(exc) and "SECRET" not in repr(exc)
    with pytest.raises(EgressDeniedError) as info:
        guard_url("http://user:SECRET@example.com/")
    assert "SECRET" not in str(info.value)


# ------------------------------------------------------------------ DNS


def test_cname_to_an_internal_name_is_refused_even_with_a_public_answer() -> None:
    chain = {"alias.flux.example": "db.corp.internal"}
    with FlipDnsServer({"db.corp.internal": ["93.184.216.34"]}, cname=chain) as dns_server:
        resolver = DnsResolver(["127.0.0.1"], port=dns_server.port, timeout=2.0)
        with pytest.raises(EgressDeniedError) as info:
            guard_url("http://alias.flux.example/", resolver=resolver)
        assert info.value.reason is EgressReason.INTERNAL_NAME
        # A host grant for the internal zone lifts it, as for the name itself.
        grant = PrivateNetAllow(hosts=["*.corp.internal"])
        target = guard_url("http://alias.flux.example/", resolver=resolver, allow=grant)
        assert [str(a) for a in target.addresses] == ["93.184.216.34"]


# ------------------------------------------------------------------ httpx layers kept


def test_event_hooks_auth_and_a_closed_client_behave_as_in_httpx(port: int) -> None:
    seen: list[str] = []
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _ok}) as srv:
        client = _client(port)
        client.event_hooks = {
            "request": [lambda r: seen.append(f"request {r.url.path}")],
            "response": [lambda r: seen.append(f"response {r.status_code}")],
        }
        with client:
            client.get(f"http://a.flux.example:{port}/")
            client.get(f"http://a.flux.example:{port}/", auth=("u", "p"))
        with pytest.raises(RuntimeError):
            client.get(f"http://a.flux.example:{port}/")
        plain = _client(port)
        plain.close()
        with pytest.raises(RuntimeError):
            plain.get(f"http://a.flux.example:{port}/")
    assert seen == ["request /", "response 200"] * 2
    assert "authorization" not in srv.seen[0].headers and "authorization" in srv.seen[1].headers
