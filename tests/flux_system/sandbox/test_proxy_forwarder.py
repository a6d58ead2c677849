"""The forwarder carries real clients' traffic to the proxy unchanged (on the host here;
tests/flux_system/sandbox/test_proxy_sandbox.py runs it inside the real sandbox)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

import flux_system.sandbox._forwarder as fw
from flux_system.net import StaticResolver
from flux_system.sandbox._forwarder import bind_listener, proxy_environment, serve
from flux_system.sandbox._proxy import EgressProxy, ProxySettings
from tests.flux_system.net._servers import Handler, LoopbackHTTP

PINNED = StaticResolver({"api.flux.test": ["127.0.0.1"], "other.flux.test": ["127.0.0.1"]})


def _hello(h: Handler) -> None:
    h.reply(200, b"hello through the forwarder")


@contextlib.contextmanager
def _forwarder(upstream: str) -> Iterator[int]:
    listener = bind_listener(0)
    port = int(listener.getsockname()[1])
    thread = threading.Thread(target=serve, args=(listener, upstream), daemon=True)
    thread.start()
    try:
        yield port
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes accept(): serve() returns
        thread.join(10)
        listener.close()
    assert not thread.is_alive()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_httpx_through_forwarder_and_proxy(ca: trustme.CA) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("api.flux.test").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    with (
        LoopbackHTTP(routes={"/hello": _hello}) as plain,
        LoopbackHTTP(tls=server_ctx, routes={"/hello": _hello}) as tls,
    ):
        settings = ProxySettings(
            allow_hosts=("api.flux.test",),
            allow_private=("127.0.0.0/8",),
            ports=frozenset({plain.port, tls.port}),
        )
        with EgressProxy(settings, resolver=PINNED) as proxy, _forwarder(proxy.socket_path) as fp:
            url = f"http://127.0.0.1:{fp}"
            with httpx.Client(proxy=url, verify=client_ctx, timeout=10) as client:
                got_plain = client.get(f"http://api.flux.test:{plain.port}/hello")
                got_tls = client.get(f"https://api.flux.test:{tls.port}/hello")
                refused = client.get(f"http://other.flux.test:{plain.port}/hello")
                with pytest.raises(httpx.ProxyError):
                    client.get(f"https://other.flux.test:{tls.port}/hello")
    assert (got_plain.status_code, got_plain.content) == (200, b"hello through the forwarder")
    assert (got_tls.status_code, got_tls.content) == (200, b"hello through the forwarder")
    assert refused.status_code == 403
    assert refused.headers["x-flux-denied"] == "not_allowed"
    assert [(d.method, d.host) for d in proxy.denials()] == [
        ("GET", "other.flux.test"),
        ("CONNECT", "other.flux.test"),
    ]
    assert tls.sni == ["api.flux.test"]


def test_forwarder_with_the_proxy_gone_closes_the_client() -> None:
    with _forwarder("/nonexistent/flux-proxy.sock") as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"CONNECT api.flux.test:443 HTTP/1.1\r\n\r\n")
            try:
                got = s.recv(1)
            except ConnectionResetError:  # closed with our bytes unread: a reset
                got = b""
            assert got == b""


def test_proxy_environment_points_every_variable_at_the_forwarder() -> None:
    env = proxy_environment(3128)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        assert env[name] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == ""


def test_forwarder_loads_by_file_path_without_the_flux_package() -> None:
    """Inside the sandbox the launcher loads it by path; flux may not be importable there."""
    code = (
        "import sys, importlib.util\n"
        "sys.modules['flux_system'] = None  # importing flux now fails\n"
        f"spec = importlib.util.spec_from_file_location('fw', {str(Path(fw.__file__))!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(m._relay().__module__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "_flux_proxy_relay"
