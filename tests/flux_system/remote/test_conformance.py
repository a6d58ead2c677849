"""The conformance kit against every substrate we ship, and against a broken one."""

from __future__ import annotations

import contextlib
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from flux_system import System, Workspace
from flux_system.port import Substrate
from flux_system.remote import connect
from flux_system.testing import ConformanceError, check_substrate
from tests.flux_system.remote._harness import served

FAMILIES = ("files", "processes", "metrics", "identity")


def _fresh_dirs() -> Iterator[Path]:
    while True:
        yield Path(tempfile.mkdtemp(prefix="flux-kit-"))


def test_native_substrate_conforms() -> None:
    opened: list[tuple[Workspace, System]] = []

    def factory() -> Substrate:
        ws = Workspace(next(_fresh_dirs()))
        system = System(ws)
        opened.append((ws, system))

        def close() -> None:
            system.close()
            ws.close()

        sub = Substrate.native(ws, processes=system)
        return Substrate(
            files=sub.files,
            processes=sub.processes,
            http=sub.http,
            metrics=sub.metrics,
            identity=sub.identity,
            closer=close,
        )

    results = check_substrate(factory, require=FAMILIES)
    assert {r.outcome for r in results} == {"passed", "unserved"}
    assert [r.name for r in results if r.outcome == "unserved"] == ["http.guarded"]


def test_remote_substrate_over_a_unix_socket_conforms(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        results = check_substrate(lambda: connect(srv.target), require=FAMILIES)
    assert all(r.outcome in ("passed", "unserved") for r in results)


def test_remote_substrate_over_tcp_tls_token_conforms(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    token = "kit-token-0123456789"
    with served(tmp_path, tcp=True, ssl_context=server_ctx, token=token.encode()) as srv:
        assert srv.target.startswith("tcp://127.0.0.1:")
        results = check_substrate(
            lambda: connect(srv.target, token=token, ssl_context=client_ctx), require=FAMILIES
        )
        # Positive control for TLS: a client that does not trust the CA is refused.
        with pytest.raises(Exception):
            connect(srv.target, token=token, ssl_context=ssl.create_default_context())
    assert all(r.outcome in ("passed", "unserved") for r in results)


class _Lying:
    """A files port that fabricates: ``exists`` is always False."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws

    def __getattr__(self, name: str) -> object:
        return getattr(self._ws, name)

    def exists(self, path: str) -> bool:
        return False


def test_kit_negative_control_catches_a_fabricating_substrate() -> None:
    def factory() -> Substrate:
        ws = Workspace(next(_fresh_dirs()))
        return Substrate(files=_Lying(ws), closer=ws.close)  # type: ignore[arg-type]

    with pytest.raises(ConformanceError) as info:
        check_substrate(factory, require=("files",))
    failed = {r.name for r in info.value.results if r.outcome == "failed"}
    assert "files.exists_not_fabricated" in failed


def test_kit_requires_what_it_is_told() -> None:
    def factory() -> Substrate:
        ws = Workspace(next(_fresh_dirs()))
        return Substrate(files=ws, closer=ws.close)

    with contextlib.suppress(ConformanceError):
        check_substrate(factory, require=("files",))
    with pytest.raises(ConformanceError) as info:
        check_substrate(factory, require=("files", "processes"))
    failed = {r.name for r in info.value.results if r.outcome == "failed"}
    assert failed == {
        "processes.run",
        "processes.argv_only",
        "processes.spawn_kill",
        "processes.spawn_output",
    }


def test_tls_connections_opened_and_closed_in_a_row_never_cross(tmp_path: Path) -> None:
    # Regression: closing the socket while the reader thread was still inside recv let
    # the next connection reuse the fd number under the old reader (bad record MACs,
    # and bytes of one connection read as another's).
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    with served(tmp_path, tcp=True, ssl_context=server_ctx, token=b"t") as srv:
        for i in range(40):
            with connect(srv.target, token="t", ssl_context=client_ctx) as sub:
                sub.files.write_bytes(f"f{i}", str(i).encode())
                assert sub.files.read_bytes(f"f{i}") == str(i).encode()


def test_unix_connections_from_many_threads_never_cross(tmp_path: Path) -> None:
    import threading

    errors: list[BaseException] = []
    with served(tmp_path) as srv:

        def worker(n: int) -> None:
            try:
                for i in range(15):
                    with connect(srv.target) as sub:
                        name = f"w{n}-{i}"
                        sub.files.write_bytes(name, name.encode() * 100)
                        assert sub.files.read_bytes(name) == name.encode() * 100
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert errors == []


STDIO_SERVER = """
import sys
sys.path.insert(0, {repo!r})
from flux_system import System, Workspace
from flux_system.remote import PortServer, ServerConfig
ws = Workspace({root!r})
with System(ws) as system:
    PortServer(ServerConfig(ws, system=system), log=lambda line: None).serve_stdio()
"""


def test_remote_substrate_over_stdio_conforms() -> None:
    import sys

    from tests.flux_system.remote._harness import REPO

    def factory() -> Substrate:
        root = next(_fresh_dirs())
        return connect([sys.executable, "-c", STDIO_SERVER.format(repo=REPO, root=str(root))])

    results = check_substrate(factory, require=FAMILIES)
    assert all(r.outcome in ("passed", "unserved") for r in results)


def test_stdio_transport_kills_the_server_on_close(tmp_path: Path) -> None:
    import sys

    import psutil

    from tests.flux_system.remote._harness import REPO

    sub = connect([sys.executable, "-c", STDIO_SERVER.format(repo=REPO, root=str(tmp_path))])
    me = sub.identity.identity()
    assert me.remotely_reported and psutil.pid_exists(me.pid)  # positive control
    child = sub.processes.spawn(["sleep", "60"])
    grandchild = child.pid
    sub.close()
    for pid in (me.pid, grandchild):
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(pid)
            with contextlib.suppress(psutil.TimeoutExpired):
                proc.wait(30)
            assert proc.status() == psutil.STATUS_ZOMBIE, f"{pid} outlived close()"
