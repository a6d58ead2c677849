"""``flux exec`` itself signalled: the command's tree dies with it; one line, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# How long to wait for the confined command to write its pid (a slow, loaded host).
_START_WAIT_S = 20.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_to_flux_kills_the_command_and_exits_128_plus_n(
    tmp_path: Path, sig: signal.Signals
) -> None:
    command = ["sh", "-c", "echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 600"]
    flux = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flux_runtime.cli",
            "exec",
            "--workspace",
            str(tmp_path),
            "--sandbox",  # $$ is the host pid only outside the sandbox's pid namespace
            "off",
            "--",
            *command,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    pid_file = tmp_path / "pid"
    child = 0
    try:
        deadline = time.monotonic() + _START_WAIT_S
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        child = int(pid_file.read_text())
        flux.send_signal(sig)
        _, err = flux.communicate(timeout=60)
        assert flux.returncode == 128 + sig, err.decode(errors="replace")  # what flux said
        assert b"Traceback" not in err
        assert err.count(b"\n") == 1
        assert not _alive(child)
    finally:
        if flux.poll() is None:
            flux.kill()
            flux.wait()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
