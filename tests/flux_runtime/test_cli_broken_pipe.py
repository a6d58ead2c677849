"""A reader that goes away (``flux ... | head``): exit 141 (128 + SIGPIPE), no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flux_evidence import EvidenceLog
from flux_runtime.cli import EXIT_BROKEN_PIPE

POLICY = """
version = 1

[[grant]]
id = "g"
subjects = ["user:a"]
actions = ["read"]
resources = ["ws/**"]
"""


@pytest.mark.parametrize("command", ["evidence", "policy", "exec"])
def test_closed_stdout_exits_141_without_traceback(tmp_path: Path, command: str) -> None:
    log = tmp_path / "log.jsonl"
    with EvidenceLog.open(log, fsync="never") as ev:
        for i in range(2000):  # well over a pipe's buffer
            ev.append("note", {"i": i})
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY)
    request = ["--subject", "user:a", "--action", "read", "--resource", "ws/x", "--explain"]
    args = {
        "evidence": ["evidence", "show", str(log)],
        "policy": ["policy", "eval", str(policy), *request],
        "exec": ["exec", "--workspace", str(tmp_path), "--", "cat", "log.jsonl"],
    }[command]
    flux = subprocess.Popen(
        [sys.executable, "-m", "flux_runtime.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert flux.stdout is not None
    flux.stdout.close()  # before flux can have written anything: every write fails
    _, err = flux.communicate(timeout=60)
    assert b"Traceback" not in err
    assert b"Exception ignored" not in err
    assert flux.returncode == EXIT_BROKEN_PIPE == 141
