"""The JavaScript client in ports/clients/node against a real server (language neutrality)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests._capabilities import require
from tests.flux_system.remote._harness import REPO, served

CLIENT = Path(REPO) / "ports" / "clients" / "node" / "flux-port-client.mjs"


def _node(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    require(node is not None, "node (the JavaScript client's runtime)")
    assert node is not None
    return subprocess.run(
        [node, str(CLIENT), target, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_node_client_reads_a_file(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("from the far side\n")
    with served(tmp_path) as srv:
        done = _node(srv.target, "read", "hello.txt")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["text"] == "from the far side\n" and out["version"] == 1


def test_node_client_reads_a_chunked_file(tmp_path: Path) -> None:
    data = "x" * (5 * 1024 * 1024)  # more than one 4 MiB chunk
    (tmp_path / "big.txt").write_text(data)
    with served(tmp_path) as srv:
        done = _node(srv.target, "read", "big.txt")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["text"] == data


def test_node_client_runs_a_command(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        done = _node(srv.target, "run", "sh", "-c", "echo out; echo err >&2; exit 0")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"exit_code": 0, "stdout": "out\n", "stderr": "err\n"}


def test_node_client_sees_the_servers_refusal(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        done = _node(srv.target, "read", "../outside")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["error"] == "PathEscapeError"
