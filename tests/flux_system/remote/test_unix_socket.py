"""The Unix socket's place and its peers: planted and swapped paths, directories others
can rearrange, other users (through ``setpriv``) on either side.

Real servers on real Unix sockets; the attacker acts through the file system or
speaks raw bytes as another uid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from flux_system import PortError, Workspace
from flux_system.remote import PortServer, ServerConfig, connect
from tests._capabilities import require
from tests.flux_system.remote._harness import HELLO

NOBODY = 65534


# -- the socket's path ---------------------------------------------------------------


def _server(root: Path) -> PortServer:
    """A server of a workspace beneath *root* (its sockets go beside it, not inside)."""
    ws = root / "served"
    ws.mkdir(exist_ok=True)
    return PortServer(ServerConfig(Workspace(ws)), log=lambda line: None)


def test_a_planted_symlink_at_the_socket_path_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    victim.chmod(0o644)
    link = tmp_path / "port.sock"
    link.symlink_to(victim)
    server = _server(tmp_path)
    try:
        with pytest.raises(PortError, match="not a socket"):
            server.start_unix(str(link))
    finally:
        server.close()
    assert link.is_symlink() and victim.read_text() == "keep"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_a_symlink_swapped_in_while_the_socket_is_made_changes_nothing(
    tmp_path: Path,
) -> None:
    """An attacker who can write the socket's directory replaces the new socket with a
    symlink as fast as it can. The server chmod-ed the path after bind(), following
    that symlink: a root server made any file 0600. Now nothing is changed by path."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    victim.chmod(0o644)
    where = tmp_path / "d"
    where.mkdir()
    path = str(where / "port.sock")
    stop = threading.Event()
    swaps = [0]

    def attacker() -> None:
        spare = str(where / "spare")
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.symlink(victim, spare)
            with contextlib.suppress(OSError):
                os.rename(spare, path)  # over the socket, when there is one
                swaps[0] += 1

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    outcomes: set[str] = set()
    try:
        for _ in range(300):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            server = _server(tmp_path)
            try:
                server.start_unix(path)
                outcomes.add("listening")
            except PortError as exc:
                outcomes.add(exc.message.split(" ", 1)[1])
            finally:
                server.close()
            assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    finally:
        stop.set()
        thread.join(30)
    assert swaps[0] > 0  # positive control: the attacker really swapped the path
    assert victim.read_text() == "keep"


# -- other users -------------------------------------------------------------------

_RAW_CLIENT = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(sys.argv[1])
try:
    s.sendall(struct.pack(">I", len(sys.argv[2])) + sys.argv[2].encode())
except BrokenPipeError:
    pass  # refused on accept: the goodbye is already waiting
head = s.recv(4, socket.MSG_WAITALL)
(n,) = struct.unpack(">I", head)
print(s.recv(n, socket.MSG_WAITALL).decode())
"""


def _as(uid: int, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def world_dir() -> object:
    require(os.geteuid() == 0, "root (to act as another user with setpriv)")
    require(shutil.which("setpriv") is not None, "setpriv")
    where = tempfile.mkdtemp(prefix="flux-port-users-")
    os.chmod(where, 0o755)
    yield Path(where)
    shutil.rmtree(where, ignore_errors=True)


def test_a_peer_of_another_uid_is_refused_even_through_an_open_socket(
    world_dir: Path, tmp_path: Path
) -> None:
    """The 0600 mode keeps uid 65534 out; the test opens the mode so that the
    SO_PEERCRED check, not the file mode, is what refuses it."""
    script = world_dir / "client.py"
    script.write_text(_RAW_CLIENT)
    script.chmod(0o644)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
    log: list[str] = []
    server = PortServer(ServerConfig(Workspace(tmp_path)), log=log.append)
    path = str(world_dir / "port.sock")
    server.start_unix(path)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        shut = _as(NOBODY, python, str(script), path, HELLO.decode())
        assert "Permission denied" in shut.stderr, shut  # the mode alone refuses
        os.chmod(path, 0o666)
        other = _as(NOBODY, python, str(script), path, HELLO.decode())
        root = _as(0, python, str(script), path, HELLO.decode())
    finally:
        server.close()
    assert json.loads(root.stdout)["type"] == "welcome", root  # positive control: root
    assert other.stdout, other
    answer = json.loads(other.stdout)
    assert answer["type"] == "goodbye" and answer["reason"] == "auth", other
    assert any(f"peer uid {NOBODY} refused" in line for line in log), log


_NOBODY_SERVER = r"""
import os, sys
from flux_system import System, Workspace
from flux_system.remote import PortServer, ServerConfig
ws = Workspace(sys.argv[1]); system = System(ws)
server = PortServer(ServerConfig(ws, system=system))
server.start_unix(sys.argv[2])
print("ready", os.geteuid(), flush=True)
sys.stdin.read()  # until the test closes our stdin
server.close()
"""
_THIRD_PARTY = ("pydantic", "pydantic_core", "typing_extensions", "annotated_types")


def _world_lib(base: Path) -> Path:
    """flux_system and the modules the server imports, where uid 65534 can read them."""
    import importlib.util

    from tests.flux_system.sandbox._support import copy_package

    lib = copy_package(base)
    for name in (*_THIRD_PARTY, "typing_inspection"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, lib / name, ignore=shutil.ignore_patterns("*.pyc"))
        else:
            shutil.copy(origin, lib / origin.name)
    for root, dirs, files in os.walk(lib):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return lib


def test_a_server_of_uid_65534_serves_root_and_refuses_a_third_uid(world_dir: Path) -> None:
    """The server as 65534, a client as root (allowed: root), a raw peer as 65533."""
    require(os.path.exists("/usr/bin/python3"), "the system interpreter /usr/bin/python3")
    lib = _world_lib(world_dir)
    ws = world_dir / "ws"
    ws.mkdir()
    os.chown(ws, NOBODY, NOBODY)
    run = world_dir / "run"  # the server's own directory, as /run/user/UID
    run.mkdir(mode=0o700)
    os.chown(run, NOBODY, NOBODY)
    path = str(run / "port.sock")
    script = world_dir / "server.py"
    script.write_text(_NOBODY_SERVER)
    client = world_dir / "client.py"
    client.write_text(_RAW_CLIENT)
    for f in (script, client):
        f.chmod(0o644)
    env = ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/nonexistent", f"PYTHONPATH={lib}"]
    priv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    proc = subprocess.Popen(
        [*priv, *env, "/usr/bin/python3", "-B", str(script), str(ws), path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert line == f"ready {NOBODY}\n".encode(), line + proc.stderr.read()
        st = os.lstat(path)
        assert st.st_uid == NOBODY and stat.S_IMODE(st.st_mode) == 0o600
        with connect(f"unix:{path}") as sub:  # root: allowed
            me = sub.identity.identity()
            assert me.uid == NOBODY and me.remotely_reported
            sub.files.write_bytes("made-by-root.txt", b"x")
            ran = sub.processes.run(["/usr/bin/id", "-u"])
        # The server acts as itself, whoever asked: the file and the run are 65534's.
        assert (ws / "made-by-root.txt").stat().st_uid == NOBODY
        assert ran.stdout.strip() == str(NOBODY).encode()
        os.chmod(run, 0o755)  # let the third uid reach the SO_PEERCRED check
        os.chmod(path, 0o666)
        third = _as(65533, "/usr/bin/python3", str(client), path, HELLO.decode())
        assert third.stdout, third
        answer = json.loads(third.stdout)
        assert answer["type"] == "goodbye" and answer["reason"] == "auth", third
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        said = proc.stderr.read()
        proc.stderr.close()
    assert b"unix peer uid 65533 refused" in said


def test_making_the_socket_leaves_the_modes_of_other_files_alone(tmp_path: Path) -> None:
    """The socket was made 0600 by setting the process's umask around bind(): a file
    another thread created meanwhile (a served write) came out 0600 as well."""
    made = tmp_path / "made"
    made.mkdir()
    stop = threading.Event()
    count = [0]

    def creator() -> None:
        while not stop.is_set():
            name = str(made / f"f{count[0]}")
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o666))
            count[0] += 1

    old = os.umask(0o022)
    thread = threading.Thread(target=creator, daemon=True)
    thread.start()
    try:
        for i in range(300):
            server = _server(tmp_path)
            try:
                server.start_unix(str(tmp_path / f"s{i}.sock"))
                assert stat.S_IMODE(os.lstat(tmp_path / f"s{i}.sock").st_mode) == 0o600
            finally:
                server.close()
    finally:
        stop.set()
        thread.join(30)
        os.umask(old)
    assert count[0] > 300  # positive control: files were made throughout
    modes = {stat.S_IMODE(os.lstat(made / f"f{i}").st_mode) for i in range(count[0])}
    assert modes == {0o644}, sorted(oct(m) for m in modes)


def _listens(root: Path, path: Path) -> str:
    server = _server(root)
    try:
        server.start_unix(str(path))
        return "listening"
    except PortError as exc:
        return exc.message
    finally:
        server.close()


def test_a_socket_in_a_directory_others_can_rearrange_is_refused(tmp_path: Path) -> None:
    """Whoever can write the socket's directory (or one above it) can replace the
    socket with their own after it is made, and take the clients' tokens and files."""
    base = tmp_path / "base"
    (base / "run").mkdir(parents=True)
    sock = base / "run" / "port.sock"
    assert _listens(tmp_path, sock) == "listening"  # positive control: 0755 dirs
    (base / "run").chmod(0o777)
    assert "writable by group or others" in _listens(tmp_path, sock)
    (base / "run").chmod(0o1777)  # sticky, as /tmp: nobody can remove our entry
    assert _listens(tmp_path, sock) == "listening"
    (base / "run").chmod(0o755)
    base.chmod(0o777)  # one level up: the run directory itself can be swapped
    assert f"{base} is writable" in _listens(tmp_path, sock)
    base.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(base / "run", NOBODY, NOBODY)  # its owner may do as it likes there
        assert f"owned by uid {NOBODY}" in _listens(tmp_path, sock)
