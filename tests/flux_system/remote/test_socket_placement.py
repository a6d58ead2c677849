"""A Unix socket inside the served workspace is refused: a run there could drive the server.

The peer check admits the server's own uid, and a sandboxed command runs with it (the
user namespace maps it back), so a socket in a directory the command sees is a way
around the command's own sandbox: its network (the server's egress grants), its
processes (run with the server's profile, not the command's) and its files.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from flux_system import PortError, PortReason, System, Workspace
from flux_system.remote import PortServer, ServerConfig, _socket_path
from flux_system.sandbox import Sandbox, SandboxSettings
from tests.flux_system.sandbox._support import require_bwrap

_CONNECT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.connect(sys.argv[1])\n"
    "print('connected', flush=True)\n"
)


@pytest.mark.parametrize("where", ["s.sock", "sub/dir/s.sock"])
def test_a_socket_inside_the_served_workspace_is_refused(tmp_path: Path, where: str) -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    with Workspace(tmp_path) as ws:
        server = PortServer(ServerConfig(ws), log=lambda line: None)
        try:
            with pytest.raises(PortError) as err:
                server.start_unix(str(path))
        finally:
            server.close()
    assert err.value.reason is PortReason.AUTH
    assert "inside the served workspace" in str(err.value)
    assert not path.exists()  # nothing was bound


def test_a_socket_reached_through_a_symlink_into_the_workspace_is_refused(
    tmp_path: Path,
) -> None:
    ws_dir = tmp_path / "ws"
    (ws_dir / "d").mkdir(parents=True)
    link = Path(tempfile.mkdtemp(prefix="flux-port-")) / "link"
    link.symlink_to(ws_dir / "d")
    with Workspace(ws_dir) as ws:
        server = PortServer(ServerConfig(ws), log=lambda line: None)
        try:
            with pytest.raises(PortError) as err:
                server.start_unix(str(link / "s.sock"))
        finally:
            server.close()
    assert err.value.reason is PortReason.AUTH


def test_a_socket_outside_the_workspace_is_served(tmp_path: Path) -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="flux-port-"), "s.sock")
    with Workspace(tmp_path) as ws:
        server = PortServer(ServerConfig(ws), log=lambda line: None)
        try:
            server.start_unix(path)
            assert server.address == f"unix:{path}"
        finally:
            server.close()


def test_control_a_sandboxed_command_reaches_a_socket_in_its_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the refusal prevents, shown with the check switched off: a command in the
    default sandbox (no network) connects to a server socket in its workspace, and the
    server admits it as its own uid."""
    require_bwrap()
    monkeypatch.setattr(_socket_path, "_inside_roots", lambda path, ws: None)
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", profile="default"))
    log: list[str] = []
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        server = PortServer(ServerConfig(ws), log=log.append)
        try:
            server.start_unix(str(tmp_path / "s.sock"))
            got = system.run(["/usr/bin/python3", "-c", _CONNECT, str(tmp_path / "s.sock")])
        finally:
            server.close()
    assert got.exit_code == 0, got.stderr_text
    assert got.stdout_text == "connected\n"
    # Admitted past the peer check as the server's own uid (it then sent no hello).
    assert any(f"s.sock uid={os.getuid()}:" in line for line in log), log
    assert not any("peer uid" in line for line in log), log
