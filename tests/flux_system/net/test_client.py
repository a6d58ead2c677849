"""The guarded HTTP clients against real loopback servers: redirects, deadline, 429,
503, body cap, headers, proxies."""

from __future__ import annotations

import email.utils
import gzip
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    GuardedClient,
    PrivateNetAllow,
    RequestLimits,
    StaticResolver,
    guarded_async_client,
    guarded_client,
)
from tests.flux_system.net._servers import Handler, LoopbackHTTP, Route, free_port_on

GRANT = PrivateNetAllow(cidrs=["127.0.0.1/32"])  # 127.0.0.2 stays blocked
NAMES = {
    "a.flux.example": ["127.0.0.1"],
    "b.flux.example": ["127.0.0.1"],
    "evil.flux.example": ["127.0.0.2"],
}


class Sleeps:
    """Records requested sleeps instead of sleeping (the clock is a parameter)."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def port() -> int:
    return free_port_on(["127.0.0.1", "127.0.0.2"])


@pytest.fixture
def evil(port: int) -> Iterator[LoopbackHTTP]:
    with LoopbackHTTP("127.0.0.2", port, routes={"/x": lambda h: h.reply(200, b"evil")}) as s:
        yield s


def _client(port: int, **kw: Any) -> GuardedClient:
    return guarded_client(allow=GRANT, resolver=StaticResolver(NAMES), ports=[port], **kw)


def _redirect(to: str, status: int = 302) -> Route:
    def route(h: Handler) -> None:
        h.reply(status, headers={"Location": to.format(port=h.server.owner.port)})

    return route


def _echo_headers(h: Handler) -> None:
    h.reply(200, b"ok")


# ------------------------------------------------------------------ redirects


def test_redirect_chain_ending_at_a_blocked_address_is_refused_at_that_hop(
    port: int, evil: LoopbackHTTP
) -> None:
    routes = {
        "/start": _redirect("http://b.flux.example:{port}/next"),
        "/next": _redirect("http://evil.flux.example:{port}/x"),
    }
    with LoopbackHTTP("127.0.0.1", port, routes=routes) as good:
        with _client(port) as client, pytest.raises(EgressDeniedError) as info:
            client.get(f"http://a.flux.example:{port}/start")
    assert info.value.reason is EgressReason.BLOCKED_ADDRESS
    assert info.value.address == "127.0.0.2"
    assert info.value.host == "evil.flux.example"
    assert good.paths() == ["/start", "/next"]
    assert evil.seen == []


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("http://169.254.169.254:{port}/latest/meta-data/", EgressReason.BLOCKED_ADDRESS),
        ("http://localhost:{port}/x", EgressReason.INTERNAL_NAME),
        ("http://2130706433:{port}/", EgressReason.NON_CANONICAL_IP),
        ("http://[::ffff:127.0.0.1]:{port}/", EgressReason.BLOCKED_ADDRESS),
        ("gopher://a.flux.example/", EgressReason.SCHEME),
        ("http://user@a.flux.example:{port}/", EgressReason.USERINFO),
        ("http://a.flux.example:22/", EgressReason.PORT),
    ],
)
def test_redirect_targets_are_guarded_again(port: int, location: str, reason: EgressReason) -> None:
    with LoopbackHTTP("127.0.0.1", port, routes={"/r": _redirect(location)}) as srv:
        with _client(port) as client, pytest.raises(EgressDeniedError) as info:
            client.get(f"http://a.flux.example:{port}/r")
    assert info.value.reason is reason
    assert srv.paths() == ["/r"]


def test_at_most_five_hops(port: int) -> None:
    routes = {f"/r{i}": _redirect(f"/r{i + 1}") for i in range(10)}
    with LoopbackHTTP("127.0.0.1", port, routes=routes) as srv:
        with _client(port) as client:
            with pytest.raises(EgressDeniedError) as info:
                client.get(f"http://a.flux.example:{port}/r0")
            assert info.value.reason is EgressReason.REDIRECT
            assert len(srv.seen) == 6  # the first request and five followed hops
            ok = client.get(f"http://a.flux.example:{port}/r5")  # five hops: allowed
            assert ok.status_code == 404 and len(ok.history) == 5
    with pytest.raises(ValueError):
        RequestLimits(max_redirects=6)


def test_cross_origin_hop_drops_caller_headers_same_origin_keeps_them(port: int) -> None:
    routes = {
        "/same": _redirect("/echo"),
        "/cross": _redirect("http://b.flux.example:{port}/echo"),
        "/echo": _echo_headers,
    }
    secret = {"X-Api-Key": "k1", "Authorization": "Bearer t", "Cookie": "s=1"}
    with LoopbackHTTP("127.0.0.1", port, routes=routes) as srv:
        with _client(port) as client:
            client.get(f"http://a.flux.example:{port}/same", headers=secret)
            client.get(f"http://a.flux.example:{port}/cross", headers=secret)
            client.get(f"http://a.flux.example:{port}/cross", auth=("u", "p"))
    same_hop, cross_hop, auth_hop = srv.seen[1], srv.seen[3], srv.seen[5]
    assert same_hop.headers["x-api-key"] == "k1" and same_hop.headers["cookie"] == "s=1"
    for hop in (cross_hop, auth_hop):
        assert {"x-api-key", "authorization", "cookie"}.isdisjoint(hop.headers)
        assert hop.headers["host"] == f"b.flux.example:{port}"
    assert "authorization" in srv.seen[4].headers  # auth was sent to the first origin


def test_bodies_are_never_replayed(port: int) -> None:
    routes = {
        "/307": _redirect("/echo", 307),
        "/308": _redirect("/echo", 308),
        "/302": _redirect("/echo", 302),
        "/303": _redirect("/echo", 303),
        "/echo": _echo_headers,
    }
    with LoopbackHTTP("127.0.0.1", port, routes=routes) as srv:
        with _client(port) as client:
            for path in ("/307", "/308"):
                with pytest.raises(EgressDeniedError) as info:
                    client.post(f"http://a.flux.example:{port}{path}", content=b"payload")
                assert info.value.reason is EgressReason.REDIRECT
            for path in ("/302", "/303"):
                r = client.post(f"http://a.flux.example:{port}{path}", content=b"payload")
                assert r.status_code == 200
            r = client.get(f"http://a.flux.example:{port}/307")  # no body: followed
            assert r.status_code == 200
    followed = [s for s in srv.seen if s.path == "/echo"]
    assert [(s.method, s.body) for s in followed] == [("GET", b""), ("GET", b""), ("GET", b"")]
    assert all(
        "content-length" not in s.headers or s.headers["content-length"] == "0" for s in followed
    )


def test_redirects_can_be_left_unfollowed(port: int) -> None:
    with LoopbackHTTP("127.0.0.1", port, routes={"/r": _redirect("http://evil.flux.example/")}):
        with _client(port, follow_redirects=False) as client:
            r = client.get(f"http://a.flux.example:{port}/r")
    assert r.status_code == 302 and r.history == []


# ------------------------------------------------------------------ 429 / 503


class Limited:
    def __init__(self, answers: list[tuple[int, dict[str, str]]]) -> None:
        self.answers = answers

    def __call__(self, h: Handler) -> None:
        status, headers = self.answers.pop(0) if self.answers else (200, {})
        h.reply(status, b"done" if status == 200 else b"busy", headers)


def test_429_retried_honouring_delay_seconds(port: int) -> None:
    route = Limited([(429, {"Retry-After": "2"}), (429, {"Retry-After": "1"})])
    sleeps = Sleeps()
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}) as srv:
        with _client(port, sleep=sleeps, limits=RequestLimits(max_retries=3)) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert (r.status_code, r.text) == (200, "done")
    assert sleeps.calls == [2.0, 1.0]
    assert r.waited == 3.0 and r.retries == 2
    assert len(srv.seen) == 3


def test_429_retried_honouring_http_date(port: int) -> None:
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    route = Limited([(429, {"Retry-After": date})])
    sleeps = Sleeps()
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}):
        with _client(port, sleep=sleeps, wall_clock=lambda: now) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert r.status_code == 200 and sleeps.calls == [7.0] and r.waited == 7.0


def test_429_not_waited_beyond_the_deadline(port: int) -> None:
    route = Limited([(429, {"Retry-After": "120"})])
    sleeps = Sleeps()
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}) as srv:
        with _client(port, sleep=sleeps, limits=RequestLimits(deadline=30)) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert r.status_code == 429 and r.waited == 0.0 and sleeps.calls == []
    assert len(srv.seen) == 1


def test_429_retries_are_bounded(port: int) -> None:
    route = Limited([(429, {"Retry-After": "0"})] * 10)
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}) as srv:
        with _client(port, sleep=Sleeps(), limits=RequestLimits(max_retries=2)) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert r.status_code == 429 and r.retries == 2 and len(srv.seen) == 3


def test_429_with_streamed_body_is_not_retried(port: int) -> None:
    route = Limited([(429, {"Retry-After": "0"})])
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}) as srv:
        with _client(port, sleep=Sleeps()) as client:
            r = client.post(f"http://a.flux.example:{port}/", content=iter([b"a", b"b"]))
    assert r.status_code == 429 and len(srv.seen) == 1


def test_503_is_not_retried(port: int) -> None:
    route = Limited([(503, {"Retry-After": "0"})])
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}) as srv:
        with _client(port, sleep=Sleeps()) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert r.status_code == 503 and r.retries == 0 and len(srv.seen) == 1


# ------------------------------------------------------------------ body cap, deadline


def _big(size: int) -> Route:
    return lambda h: h.reply(200, b"x" * size)


def test_body_cap_and_truncation_flag(port: int) -> None:
    def gz(h: Handler) -> None:
        h.reply(200, gzip.compress(b"z" * 50_000), {"Content-Encoding": "gzip"})

    routes = {"/small": _big(1000), "/big": _big(1001), "/gz": gz}
    with LoopbackHTTP("127.0.0.1", port, routes=routes):
        with _client(port, limits=RequestLimits(max_body=1000)) as client:
            small = client.get(f"http://a.flux.example:{port}/small")
            big = client.get(f"http://a.flux.example:{port}/big")
            packed = client.get(f"http://a.flux.example:{port}/gz")
    assert len(small.content) == 1000 and not small.truncated
    assert len(big.content) == 1000 and big.truncated
    # The cap applies to the decoded body (a compression bomb is cut too).
    assert packed.content == b"z" * 1000 and packed.truncated
    assert "content-encoding" not in packed.headers
    assert packed.headers["content-length"] == "1000"


def test_head_keeps_the_servers_content_length(port: int) -> None:
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _big(5000)}):
        with _client(port) as client:
            r = client.head(f"http://a.flux.example:{port}/")
    assert r.status_code == 200 and r.content == b"" and not r.truncated
    assert r.headers["content-length"] == "5000"


def test_default_cap_is_10_mib(port: int) -> None:
    size = 10 * 1024 * 1024
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _big(size + 1)}):
        with _client(port) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert len(r.content) == size and r.truncated


def _drip(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Length", "1000")
    h.end_headers()
    for _ in range(1000):
        try:
            h.wfile.write(b"x")
            h.wfile.flush()
        except OSError:
            return
        time.sleep(0.05)


def _hang(h: Handler) -> None:
    time.sleep(1.5)
    h.reply(200, b"late")


@pytest.mark.parametrize("path", ["/drip", "/hang"])
def test_total_deadline_covers_the_whole_request(port: int, path: str) -> None:
    # Per-phase timeouts are generous; only the total deadline can stop these.
    limits = RequestLimits(deadline=0.4)
    routes: dict[str, Route] = {"/drip": _drip, "/hang": _hang}
    with LoopbackHTTP("127.0.0.1", port, routes=routes):
        with _client(port, limits=limits, timeout=30.0) as client:
            with pytest.raises(EgressDeniedError) as info:
                client.get(f"http://a.flux.example:{port}{path}")
    assert info.value.reason is EgressReason.DEADLINE


def test_deadline_covers_retry_waits(port: int) -> None:
    # A fake clock: every sleep advances it; the third wait no longer fits.
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    route = Limited([(429, {"Retry-After": "4"})] * 5)
    with LoopbackHTTP("127.0.0.1", port, routes={"/": route}) as srv:
        client = _client(
            port,
            sleep=sleep,
            clock=lambda: now[0],
            limits=RequestLimits(deadline=10, max_retries=5),
        )
        with client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert r.status_code == 429 and r.waited == 8.0 and len(srv.seen) == 3


# ------------------------------------------------------------------ headers, proxies


def test_host_header_and_sni_extension_cannot_be_overridden(port: int) -> None:
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _echo_headers}) as srv:
        with _client(port) as client:
            client.get(
                f"http://a.flux.example:{port}/",
                headers={"Host": "internal.admin"},
                extensions={"sni_hostname": "other.example"},
            )
    assert srv.seen[0].headers["host"] == f"a.flux.example:{port}"


def test_environment_proxies_are_ignored(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.9:9")
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _echo_headers}) as srv:
        with _client(port) as client:
            r = client.get(f"http://a.flux.example:{port}/")
    assert r.status_code == 200 and len(srv.seen) == 1
    assert client.trust_env is False


def test_stream_api_returns_the_capped_body(port: int) -> None:
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _big(5000)}):
        with _client(port, limits=RequestLimits(max_body=100)) as client:
            with client.stream("GET", f"http://a.flux.example:{port}/") as r:
                assert b"".join(r.iter_bytes()) == b"x" * 100


def test_blocked_before_any_connection_with_no_grant(port: int) -> None:
    with LoopbackHTTP("127.0.0.1", port, routes={"/": _echo_headers}) as srv:
        client = guarded_client(resolver=StaticResolver(NAMES), ports=[port])
        with client, pytest.raises(EgressDeniedError) as info:
            client.get(f"http://a.flux.example:{port}/")
    assert info.value.reason is EgressReason.BLOCKED_ADDRESS and srv.seen == []


def test_ipv6_loopback_by_name_and_by_literal() -> None:
    with LoopbackHTTP("::1", 0, routes={"/": _echo_headers}) as srv:
        v6 = StaticResolver({"v6.flux.example": ["::1"]})
        grant = PrivateNetAllow(cidrs=["::1/128"])
        with guarded_client(allow=grant, resolver=v6, ports=[srv.port]) as client:
            by_name = client.get(f"http://v6.flux.example:{srv.port}/")
            by_literal = client.get(f"http://[::1]:{srv.port}/")
        with guarded_client(resolver=v6, ports=[srv.port]) as client:
            with pytest.raises(EgressDeniedError) as info:
                client.get(f"http://[0:0:0:0:0:0:0:1]:{srv.port}/")
    assert by_name.status_code == by_literal.status_code == 200
    assert [s.headers["host"] for s in srv.seen] == [
        f"v6.flux.example:{srv.port}",
        f"[::1]:{srv.port}",
    ]
    assert info.value.reason is EgressReason.BLOCKED_ADDRESS and info.value.address == "::1"


# ------------------------------------------------------------------ async


def test_async_client_redirect_retry_and_refusal(port: int, evil: LoopbackHTTP) -> None:
    route = Limited([(429, {"Retry-After": "1"})])
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    routes: dict[str, Route] = {
        "/limited": route,
        "/to-evil": _redirect("http://evil.flux.example:{port}/x"),
        "/to-b": _redirect("http://b.flux.example:{port}/limited"),
    }

    async def main() -> None:
        client = guarded_async_client(
            allow=GRANT, resolver=StaticResolver(NAMES), ports=[port], sleep=fake_sleep
        )
        async with client:
            r = await client.get(f"http://a.flux.example:{port}/to-b", headers={"X-K": "v"})
            assert (r.status_code, r.waited, r.retries, len(r.history)) == (200, 1.0, 1, 1)
            with pytest.raises(EgressDeniedError) as info:
                await client.get(f"http://a.flux.example:{port}/to-evil")
            assert info.value.reason is EgressReason.BLOCKED_ADDRESS

    with LoopbackHTTP("127.0.0.1", port, routes=routes) as srv:
        anyio.run(main)
    assert waits == [1.0]
    assert evil.seen == []
    assert all("x-k" not in s.headers for s in srv.seen if s.path == "/limited")


def test_async_deadline(port: int) -> None:
    async def main() -> None:
        client = guarded_async_client(
            allow=GRANT,
            resolver=StaticResolver(NAMES),
            ports=[port],
            limits=RequestLimits(deadline=0.4),
            timeout=30.0,
        )
        async with client:
            with pytest.raises(EgressDeniedError) as info:
                await client.get(f"http://a.flux.example:{port}/hang")
            assert info.value.reason is EgressReason.DEADLINE

    with LoopbackHTTP("127.0.0.1", port, routes={"/hang": _hang}):
        anyio.run(main)


def test_transport_errors_stay_httpx_errors(port: int) -> None:
    # Nothing listens on the port: a vetted address that refuses the connection.
    with _client(port) as client, pytest.raises(httpx.ConnectError):
        client.get(f"http://a.flux.example:{port}/")
