"""``flux exec`` is confined by default (--sandbox require --profile default)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from flux_runtime.cli import main
from flux_runtime.cli._exec import EXIT_FLUX_ERROR
from tests.flux_system.sandbox._support import require_bwrap, require_landlock

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require_bwrap()


def _exec(tmp_path: Path, *args: str) -> int:
    return main(["exec", "--workspace", str(tmp_path), *args])


def test_confined_by_default(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    code = _exec(
        tmp_path, "--", "sh", "-c", "grep NoNewPrivs /proc/self/status; cat /etc/passwd; echo x > f"
    )
    out = capfdbinary.readouterr()
    assert code == 0
    assert b"NoNewPrivs:\t1" in out.out
    assert b"root:" not in out.out
    assert (tmp_path / "f").read_text() == "x\n"


def test_sandbox_off_is_explicit(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert _exec(tmp_path, "--sandbox", "off", "--", "sh", "-c", "grep -c . /etc/passwd") == 0
    assert int(capfdbinary.readouterr().out) > 0


def test_missing_layer_exits_125_with_one_line(
    tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A real refusal: the Landlock-only backend cannot give the profile's bubblewrap."""
    require_landlock()
    code = _exec(tmp_path, "--backend", "landlock", "--", "true")
    err = capfdbinary.readouterr().err.decode()
    assert code == EXIT_FLUX_ERROR
    assert err.count("\n") == 1
    assert "bubblewrap" in err and "flux doctor" in err


def test_on_runs_with_what_there_is(
    tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    require_landlock()
    code = _exec(
        tmp_path, "--sandbox", "on", "--backend", "landlock", "--", "sh", "-c", "cat /etc/passwd"
    )
    assert code == 1  # Landlock denies the read
    assert b"Permission denied" in capfdbinary.readouterr().err


def test_bad_profile_file_names_file_and_key(
    tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text("[network]\nmode = 'everywhere'\n")
    assert _exec(tmp_path, "--profile", str(prof), "--", "true") == EXIT_FLUX_ERROR
    err = capfdbinary.readouterr().err.decode()
    assert str(prof) in err and "network.mode" in err


def test_ro_and_rw_paths(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    ws, ro, rw = tmp_path / "ws", tmp_path / "ro", tmp_path / "rw"
    for d in (ws, ro, rw):
        d.mkdir()
    (ro / "in.txt").write_text("ro data\n")
    script = f"cat {ro}/in.txt; echo no > {ro}/x; echo yes > {rw}/y"
    code = main(
        ["exec", "--workspace", str(ws), "--ro", str(ro), "--rw", str(rw), "--", "sh", "-c", script]
    )
    out = capfdbinary.readouterr()
    assert code == 0  # the script's last command
    assert out.out == b"ro data\n"
    assert b"Read-only file system" in out.err
    assert not (ro / "x").exists()
    assert (rw / "y").read_text() == "yes\n"


def test_workspace_that_is_home_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _exec(tmp_path, "--", "true") == EXIT_FLUX_ERROR
    assert b"home directory" in capfdbinary.readouterr().err
    assert _exec(tmp_path, "--allow-home-workspace", "--", "true") == 0


def test_signal_to_flux_kills_the_sandboxed_tree(tmp_path: Path) -> None:
    marker = str(700000 + os.getpid() % 100000)
    flux = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flux_runtime.cli",
            "exec",
            "--workspace",
            str(tmp_path),
            "--",
            "sh",
            "-c",
            f"setsid sleep {marker} & exec sleep {marker}",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )

    def sleepers() -> list[psutil.Process]:
        return [
            p
            for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and marker in p.info["cmdline"] and p.pid != flux.pid
        ]

    try:
        deadline = time.monotonic() + 30
        while len(sleepers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(sleepers()) == 2  # positive control: both sandboxed sleeps run
        flux.send_signal(signal.SIGTERM)
        flux.communicate(timeout=60)
        assert flux.returncode == 128 + signal.SIGTERM
        assert sleepers() == []
    finally:
        if flux.poll() is None:
            flux.kill()
            flux.wait()


def test_report_has_layers_and_denials(tmp_path: Path) -> None:
    require_landlock()
    import json

    report = tmp_path / "r.json"
    code = "import socket\ntry:\n socket.socket(17, 3)\nexcept OSError as e: print(e.errno)\n"
    rc = _exec(
        tmp_path,
        "--sandbox",
        "on",
        "--backend",
        "landlock",
        "--report",
        str(report),
        "--",
        "/usr/bin/python3",
        "-I",
        "-S",
        "-c",
        code,
    )
    assert rc == 0
    sandbox = json.loads(report.read_text())["sandbox"]
    assert sandbox["backend"] == "landlock"
    assert sandbox["active_layers"] == ["landlock", "seccomp"]
    assert sandbox["missing"] == ["bubblewrap"]
    assert sandbox["denials"]["observable"] is True
    assert sandbox["denials"]["records"] == [
        {"layer": "seccomp", "what": "socket", "errno": 97, "detail": "family=17"}
    ]
    names = {g["name"]: g["enforced"] for g in sandbox["guarantees"]}
    assert names["pid_namespace"] is False and names["seccomp"] is True


def test_a_bad_grant_is_named_as_the_sandbox_s_not_the_workspace_s(
    tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    code = _exec(tmp_path, "--net", "proxy", "--allow-private", "10.0.0.0/33", "--", "true")
    err = capfdbinary.readouterr().err.decode()
    assert code == EXIT_FLUX_ERROR
    assert err.startswith("flux exec: sandbox: ") and "allow_private" in err, err
    assert "workspace" not in err.split("(")[0]
