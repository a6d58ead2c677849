"""``flux serve`` as a user runs it: a real process, real sockets, real clients."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from flux_system import PortError, PortReason
from flux_system.remote import connect
from tests.flux_system.remote._harness import REPO

_MAIN = "from flux_runtime.cli import main; sys.exit(main())"
FLUX = [sys.executable, "-c", f"import sys; sys.path.insert(0, {REPO!r}); {_MAIN}"]


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*FLUX, "serve", *args],
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert b"listening on" in line, line + proc.stderr.read()
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> bytes:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    assert proc.stderr is not None
    rest = proc.stderr.read()
    proc.stderr.close()
    return rest


def test_serve_unix_socket_round_trip(tmp_path: Path) -> None:
    sock = os.path.join(tempfile.mkdtemp(prefix="flux-serve-"), "s.sock")
    (tmp_path / "a.txt").write_text("served\n")
    proc = _serve("--listen", f"unix:{sock}", "--workspace", str(tmp_path), "--sandbox", "off")
    try:
        assert oct(os.stat(sock).st_mode & 0o777) == "0o600"
        with connect(f"unix:{sock}") as sub:
            assert sub.files.read_text("a.txt") == "served\n"
            assert sub.processes.run(["echo", "hi"]).stdout == b"hi\n"
    finally:
        log = _stop(proc)
    assert proc.returncode == 0
    assert b"requests" in log  # one line per connection


def test_serve_token_from_env_is_required(tmp_path: Path) -> None:
    sock = os.path.join(tempfile.mkdtemp(prefix="flux-serve-"), "s.sock")
    token = "serve-token-0123456789abcdef"
    proc = _serve(
        "--listen", f"unix:{sock}", "--workspace", str(tmp_path), "--sandbox", "off",
        "--token-env", "FLUX_TEST_TOKEN", env={"FLUX_TEST_TOKEN": token},
    )  # fmt: skip
    try:
        with pytest.raises(PortError) as info:
            connect(f"unix:{sock}")
        assert info.value.reason is PortReason.AUTH
        with connect(f"unix:{sock}", token=token) as sub:
            assert sub.files.exists(".")
    finally:
        _stop(proc)
    assert token.encode() not in " ".join(proc.args).encode()  # type: ignore[arg-type]


def test_serve_refuses_tcp_off_loopback_without_tls(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *FLUX,
            "serve",
            "--listen",
            "tcp://0.0.0.0:0",
            "--workspace",
            str(tmp_path),
            "--sandbox",
            "off",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 125
    assert b"TLS and a token are required" in done.stderr


def test_serve_refuses_a_loose_token_file(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("token-file-value-0123456789\n")
    secret.chmod(0o644)
    done = subprocess.run(
        [
            *FLUX,
            "serve",
            "--listen",
            "unix:/tmp/x.sock",
            "--workspace",
            str(tmp_path),
            "--sandbox",
            "off",
            "--token-file",
            str(secret),
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 125
    assert b"group or others" in done.stderr
    assert b"token-file-value" not in done.stderr


def test_serve_over_stdio(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("over a pipe\n")
    argv = [*FLUX, "serve", "--stdio", "--workspace", str(tmp_path), "--sandbox", "off"]
    with connect(argv) as sub:
        assert sub.files.read_text("b.txt") == "over a pipe\n"
        assert sub.identity.identity().remotely_reported


def test_serve_confines_by_default(tmp_path: Path) -> None:
    # The default is --sandbox require --profile default: a served process sees the
    # sandbox's view (a fresh /tmp, no host home), and identity names the layers.
    sock = os.path.join(tempfile.mkdtemp(prefix="flux-serve-"), "s.sock")
    marker = Path(tempfile.mkdtemp(prefix="flux-host-")) / "host-only"
    marker.write_text("host\n")
    proc = _serve("--listen", f"unix:{sock}", "--workspace", str(tmp_path))
    try:
        with connect(f"unix:{sock}") as sub:
            layers = sub.identity.identity().sandbox
            assert "bwrap" in layers or "bubblewrap" in layers, layers
            seen = sub.processes.run(["cat", str(marker)])
            assert seen.exit_code != 0  # the host file is outside the sandbox's view
            assert sub.processes.run(["cat", "/dev/null"]).exit_code == 0  # positive control
    finally:
        _stop(proc)
