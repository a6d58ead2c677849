"""Network mode ``proxy`` end to end: a real bubblewrap sandbox, the forwarder inside
it, the guarded proxy on the host, real loopback servers and a recording DNS server.

The client inside is the system interpreter's standard library (``urllib`` honours
``HTTP(S)_PROXY``; raw sockets for the direct attempts). Each refusal has its
positive control: the allowed server is reached through the same sandbox.
"""

from __future__ import annotations

import json
import os
import random
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from flux_system import RunResult, System, Workspace
from flux_system.net import DnsResolver, Resolver, StaticResolver
from flux_system.sandbox import Sandbox, SandboxSettings
from tests._capabilities import require
from tests.flux_system.net._servers import FlipDnsServer, Handler, LoopbackHTTP
from tests.flux_system.sandbox._support import SYSTEM_PYTHON, require_bwrap

pytestmark = pytest.mark.slow

CLIENT = r"""
import json, socket, sys, urllib.request, urllib.error
out = {}
def get(name, url, **kw):
    try:
        with urllib.request.urlopen(url, timeout=20, **kw) as r:
            out[name] = [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        out[name] = [e.code, e.headers.get("X-Flux-Denied")]
    except Exception as e:
        out[name] = ["error", type(e).__name__]
def connect(name, host, port, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port)); out[name] = "connected"
    except OSError as e:
        out[name] = e.errno
    finally:
        s.close()
for spec in json.loads(sys.argv[1]):
    kind, name, *args = spec
    if kind == "get":
        get(name, args[0])
    elif kind == "tls":
        import ssl
        ctx = ssl.create_default_context(cadata=args[1])
        get(name, args[0], context=ctx)
    elif kind == "connect":
        connect(name, args[0], args[1])
    elif kind == "connect6":
        connect(name, args[0], args[1], socket.AF_INET6)
    elif kind == "dns":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        try:
            query = bytes.fromhex("123401000001000000000000") + b"\x03api\x04flux\x04test\x00"
            s.sendto(query + b"\x00\x01\x00\x01", (args[0], args[1]))
            s.recv(512); out[name] = "answered"
        except OSError as e:
            out[name] = type(e).__name__
    elif kind == "resolve":
        try:
            socket.getaddrinfo(args[0], 80); out[name] = "resolved"
        except OSError as e:
            out[name] = type(e).__name__
print(json.dumps(out))
"""


def _hello(h: Handler) -> None:
    h.reply(200, b"hello from the host")


def _loopback_address() -> str:
    """A random 127/8 address: port 80 there is free even with other tests running."""
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    root = tmp_path / "ws"
    root.mkdir()
    with Workspace(root) as ws:
        yield ws


@pytest.fixture
def server() -> Iterator[LoopbackHTTP]:
    require(os.geteuid() == 0, "root, to listen on port 80 of a loopback address")
    with LoopbackHTTP(host=_loopback_address(), port=80, routes={"/": _hello}) as srv:
        yield srv


def _run(
    ws: Workspace,
    specs: list[list[object]],
    *,
    hosts: tuple[str, ...],
    private: tuple[str, ...] = ("127.0.0.0/8",),
    resolver: Resolver | None = None,
) -> tuple[dict[str, object], RunResult]:
    require_bwrap()
    require(os.access(SYSTEM_PYTHON, os.X_OK), f"{SYSTEM_PYTHON} inside the sandbox")
    settings = SandboxSettings(
        mode="require",
        profile="net-proxy",
        network="proxy",
        allow_hosts=hosts,
        allow_private=private,
    )
    sandbox = Sandbox.resolve(settings, resolver=resolver)
    with System(ws, sandbox=sandbox) as system:
        result = system.run([SYSTEM_PYTHON, "-c", CLIENT, json.dumps(specs)], timeout=120)
    assert result.exit_code == 0, result.stderr_text
    return json.loads(result.stdout_text.strip().splitlines()[-1]), result


def test_allowed_loopback_server_is_reached_and_others_refused(
    workspace: Workspace, server: LoopbackHTTP
) -> None:
    url = f"http://{server.host}/"
    out, result = _run(
        workspace,
        [
            ["get", "allowed", url],
            ["get", "other_name", "http://other.flux.test/"],
            ["get", "metadata", "http://169.254.169.254/latest/meta-data/"],
            ["connect", "direct_host_server", server.host, 80],
            ["connect", "direct_public", "93.184.216.34", 80],
            ["connect6", "direct_v6", "2606:2800:220:1:248:1893:25c8:1946", 80],
        ],
        hosts=(server.host,),
    )
    assert out["allowed"] == [200, "hello from the host"]  # positive control
    assert out["other_name"] == [403, "not_allowed"]
    assert out["metadata"] == [403, "not_allowed"]
    assert out["direct_host_server"] == 111  # ECONNREFUSED: the sandbox's own lo
    assert out["direct_public"] == 101  # ENETUNREACH: no route
    assert out["direct_v6"] in (101, 97)  # ENETUNREACH (or no IPv6 at all)
    assert [s.path for s in server.seen] == ["/"]
    assert result.denials is not None
    proxy = [d for d in result.denials.records if d.layer == "proxy"]
    assert [(d.what, d.detail) for d in proxy] == [
        ("GET other.flux.test:80", "not_allowed"),
        ("GET 169.254.169.254:80", "not_allowed"),
    ]


def test_loopback_server_needs_allow_private(workspace: Workspace, server: LoopbackHTTP) -> None:
    out, _ = _run(
        workspace, [["get", "allowed", f"http://{server.host}/"]], hosts=(server.host,), private=()
    )
    assert out["allowed"] == [403, "blocked_address"]
    assert server.seen == []


def test_no_host_given_denies_everything(workspace: Workspace, server: LoopbackHTTP) -> None:
    out, _ = _run(workspace, [["get", "allowed", f"http://{server.host}/"]], hosts=())
    assert out["allowed"] == [403, "not_allowed"]


def test_dns_is_resolved_on_the_host_only(workspace: Workspace, server: LoopbackHTTP) -> None:
    answers = {"api.flux.test": [server.host], "meta.flux.test": ["169.254.169.254"]}
    with FlipDnsServer(answers) as dns:
        resolver = DnsResolver(["127.0.0.1"], port=dns.port, timeout=2.0)
        out, _ = _run(
            workspace,
            [
                ["get", "by_name", "http://api.flux.test/"],
                ["get", "metadata_name", "http://meta.flux.test/"],
                ["get", "denied_name", "http://denied.flux.test/"],
                ["dns", "dns_inside", "127.0.0.1", dns.port],
                ["dns", "dns_public", "8.8.8.8", 53],
                ["resolve", "libc_resolve", "api.flux.test"],
            ],
            hosts=("api.flux.test", "meta.flux.test"),
            resolver=resolver,
        )
        asked = {name for name, _ in dns.queries()}
    assert out["by_name"] == [200, "hello from the host"]  # resolved on the host
    assert out["metadata_name"] == [403, "blocked_address"]
    assert out["denied_name"] == [403, "not_allowed"]
    assert out["dns_inside"] in ("ConnectionRefusedError", "TimeoutError")
    assert out["dns_public"] == "OSError"  # ENETUNREACH
    assert out["libc_resolve"] == "gaierror"
    assert asked == {"api.flux.test", "meta.flux.test"}  # the proxy's lookups, none else


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_https_through_connect_inside_the_sandbox(workspace: Workspace, ca: trustme.CA) -> None:
    require(os.geteuid() == 0, "root, to listen on port 443 of a loopback address")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("api.flux.test").configure_cert(ctx)
    host = _loopback_address()
    with LoopbackHTTP(host=host, port=443, tls=ctx, routes={"/": _hello}) as tls:
        pem = ca.cert_pem.bytes().decode()
        out, _ = _run(
            workspace,
            [["tls", "https", "https://api.flux.test/", pem]],
            hosts=("api.flux.test",),
            resolver=StaticResolver({"api.flux.test": [host]}),
        )
    assert out["https"] == [200, "hello from the host"]
    assert tls.sni == ["api.flux.test"]
