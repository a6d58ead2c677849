"""Network mode ``proxy`` end to end: a real bubblewrap sandbox, the forwarder inside
it, the guarded proxy on the host, real loopback servers and a recording DNS server.

The client inside is the system interpreter's standard library (``urllib`` honours
``HTTP(S)_PROXY``; raw sockets for the direct attempts). Each refusal has its
positive control: the allowed server is reached through the same sandbox.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from flux_system import ProcessTimeoutError, RunResult, System, Workspace
from flux_system.net import DnsResolver, Resolver, StaticResolver
from flux_system.sandbox import Sandbox, SandboxSettings, _proxy_run
from tests._capabilities import require
from tests.flux_system.net._servers import FlipDnsServer, Handler, LoopbackHTTP
from tests.flux_system.sandbox._support import (
    SYSTEM_PYTHON,
    copy_package,
    require_bwrap,
    require_landlock,
    require_unprivileged,
    world_dir,
)

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


UNPRIVILEGED_RUN = r"""
import json, sys
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings, _proxy_run
host, ws_path, client, specs = sys.argv[1:5]
settings = SandboxSettings(mode="require", profile="net-proxy", network="proxy",
                           allow_hosts=(host,), allow_private=("127.0.0.0/8",))
with Workspace(ws_path) as ws, System(ws, sandbox=Sandbox.resolve(settings)) as system:
    result = system.run(["/usr/bin/python3", "-c", client, specs], timeout=120)
records = [[d.layer, d.what, d.detail] for d in result.denials.records]
print(json.dumps({"code": result.exit_code, "err": result.stderr_text, "records": records,
                  "out": json.loads(result.stdout_text.strip().splitlines()[-1])}))
"""
# The egress package's pure-Python dependencies, copied next to the package for the
# system interpreter that the unprivileged side runs (it cannot read the checkout's).
# sniffio is a dependency of older anyio releases only: copied when it is installed
# (a missing one that is needed fails the unprivileged run loudly, on import).
DEPENDENCIES = ("dns", "idna", "httpx", "httpcore", "h11", "anyio", "sniffio", "certifi")


def test_proxy_mode_as_an_unprivileged_user(server: LoopbackHTTP) -> None:
    require_bwrap()
    require_unprivileged()
    base = world_dir("flux-proxy-e2e-")
    try:
        lib = copy_package(base)
        for name in DEPENDENCIES:
            if importlib.util.find_spec(name) is None:
                continue
            module = importlib.import_module(name)
            shutil.copytree(
                Path(module.__file__ or "").parent,
                lib / name,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        for extra in ("typing_extensions",):
            found = importlib.util.find_spec(extra)
            if found is not None and found.origin:
                shutil.copy(found.origin, lib)
        for root, dirs, files in os.walk(lib):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        ws = base / "ws"
        ws.mkdir()
        os.chown(ws, 65534, 65534)
        specs = [
            ["get", "allowed", f"http://{server.host}/"],
            ["get", "other", "http://other.flux.test/"],
            ["connect", "direct", "93.184.216.34", 80],
        ]
        script = base / "run.py"
        script.write_text(UNPRIVILEGED_RUN)
        script.chmod(0o644)
        proc = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "env",
                "-i",
                "PATH=/usr/bin:/bin",
                "HOME=/nonexistent",
                f"PYTHONPATH={lib}",
                SYSTEM_PYTHON,
                "-B",
                str(script),
                server.host,
                str(ws),
                CLIENT,
                json.dumps(specs),
            ],
            capture_output=True,
            timeout=180,
            cwd=base,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        got = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert got["code"] == 0, got["err"]
    assert got["out"]["allowed"] == [200, "hello from the host"]  # positive control
    assert got["out"]["other"] == [403, "not_allowed"]
    assert got["out"]["direct"] == 101
    assert got["records"] == [["proxy", "GET other.flux.test:80", "not_allowed"]]


def _sandbox(hosts: tuple[str, ...], *, profile: str = "net-proxy") -> Sandbox:
    require_bwrap()
    settings = SandboxSettings(
        mode="require",
        profile=profile,
        network="proxy",
        allow_hosts=hosts,
        allow_private=("127.0.0.0/8",),
    )
    return Sandbox.resolve(settings)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[_proxy_run.ProxyRun]:
    """Every ProxyRun the backend starts (observed, not replaced)."""
    runs: list[_proxy_run.ProxyRun] = []
    real = _proxy_run.ProxyRun

    def observe(*args: Any, **kwargs: Any) -> _proxy_run.ProxyRun:
        run = real(*args, **kwargs)
        runs.append(run)
        return run

    monkeypatch.setattr(_proxy_run, "ProxyRun", observe)
    return runs


def _gone(path: str) -> bool:
    for _ in range(2000):  # hang guard: 20 s
        if not os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def test_proxy_ends_with_a_timed_out_run(
    workspace: Workspace, started: list[_proxy_run.ProxyRun]
) -> None:
    with System(workspace, sandbox=_sandbox(("127.0.0.1",))) as system:
        with pytest.raises(ProcessTimeoutError):
            system.run([SYSTEM_PYTHON, "-c", "import time; time.sleep(120)"], timeout=3)
    [run] = started
    assert _gone(run.socket_path)  # the lifeline ended with the tree: no result needed


def test_proxy_ends_with_a_killed_spawned_child(
    workspace: Workspace, started: list[_proxy_run.ProxyRun]
) -> None:
    code = "import sys, time; print('up', flush=True); time.sleep(120)"
    with System(workspace, sandbox=_sandbox(("127.0.0.1",))) as system:
        child = system.spawn([SYSTEM_PYTHON, "-c", code])
        for _ in range(2000):  # hang guard: wait for the child to be up
            if b"up" in child.read_output().stdout:
                break
            time.sleep(0.01)
        [run] = started
        assert os.path.exists(run.socket_path)  # positive control: alive with the child
        child.kill()
    assert _gone(run.socket_path)


def test_strict_profile_with_proxy_runs_the_forwarder_under_landlock(
    workspace: Workspace, server: LoopbackHTTP
) -> None:
    sandbox = _sandbox((server.host,), profile="strict")
    require("landlock" in sandbox.report().active_layers, "Landlock inside bwrap (strict)")
    with System(workspace, sandbox=sandbox) as system:
        result = system.run(
            [SYSTEM_PYTHON, "-c", CLIENT, json.dumps([["get", "a", f"http://{server.host}/"]])],
            timeout=120,
        )
    assert result.exit_code == 0, result.stderr_text
    assert json.loads(result.stdout_text.strip().splitlines()[-1])["a"] == [
        200,
        "hello from the host",
    ]


def test_landlock_backend_with_proxy_gets_no_network_at_all(workspace: Workspace) -> None:
    """There is no namespace to hold a forwarder: proxy must fail closed, not open."""
    require_landlock(4)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    code = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    outcome = {}
    try:
        for network in ("proxy", "host"):
            settings = SandboxSettings(
                mode="on", profile="default", backend="landlock", network=network
            )
            sandbox = Sandbox.resolve(settings)
            assert sandbox.backend == "landlock"
            with System(workspace, sandbox=sandbox) as system:
                result = system.run([SYSTEM_PYTHON, "-c", code], timeout=60)
            outcome[network] = result.stdout_text.split()[0]
            if network == "proxy":
                assert sandbox.network == "none"  # planned down to no network, and said so
                assert "proxy" in sandbox._plan.missing
                assert "Landlock" in sandbox._plan.reasons["proxy"]
    finally:
        listener.close()
    assert outcome == {"proxy": "refused", "host": "connected"}  # host: positive control


def test_the_proxy_socket_itself_is_no_way_around_the_guard(
    workspace: Workspace, server: LoopbackHTTP
) -> None:
    """The command can reach the bound socket directly: it gets the same rules."""
    code = (
        "import socket, sys\n"
        "def ask(raw):\n"
        "    s = socket.socket(socket.AF_UNIX); s.settimeout(10)\n"
        "    s.connect('/run/flux-proxy/egress.sock'); s.sendall(raw)\n"
        "    print(s.recv(4096).split(b'\\r\\n')[0].decode()); s.close()\n"
        "ask(b'CONNECT 10.0.0.1:443 HTTP/1.1\\r\\n\\r\\n')\n"
        "ask(b'LIFELINE flux HTTP/1.1\\r\\n\\r\\n')\n"
        f"ask(b'GET http://{server.host}/ HTTP/1.1\\r\\n\\r\\n')\n"
    )
    require_bwrap()
    settings = SandboxSettings(
        mode="require",
        profile="net-proxy",
        network="proxy",
        allow_hosts=(server.host,),
        allow_private=("127.0.0.0/8",),
    )
    with System(workspace, sandbox=Sandbox.resolve(settings)) as system:
        result = system.run([SYSTEM_PYTHON, "-c", code], timeout=60)
    assert result.exit_code == 0, result.stderr_text
    assert result.stdout_text.splitlines() == [
        "HTTP/1.1 403 Forbidden",  # not on the allow-list
        "HTTP/1.1 403 Forbidden",  # a second lifeline is only a bad request
        "HTTP/1.1 200 OK",  # positive control: the allowed server, same socket
    ]
