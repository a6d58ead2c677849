"""``flux doctor``: plain words and --json; exit 0 when the default profile can run here.

The failing case is a real host without user namespaces: inside our own sandbox
(seccomp refuses namespaces, bwrap's --disable-userns closes them), bubblewrap cannot
run, and the diagnosis says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux_runtime.cli import main
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings, diagnose
from tests.flux_system.sandbox._support import SYSTEM_PYTHON, require_bwrap

REPO = Path(__file__).resolve().parents[2]


def test_doctor_json_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    require_bwrap()
    code = main(["doctor", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["default_ok"] is True
    names = [c["name"] for c in data["checks"]]
    assert names == [
        "bubblewrap",
        "user namespaces",
        "AppArmor userns restriction",
        "Landlock",
        "seccomp",
        "cgroups",
    ]
    assert data["profiles"]["default"] == "ok"


def test_doctor_plain_words(capsys: pytest.CaptureFixture[str]) -> None:
    require_bwrap()
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "ok   bubblewrap: /" in out
    assert "profile default: can run here" in out
    assert out.rstrip().endswith("flux exec is confined by default here.")


def test_doctor_fails_where_bwrap_cannot_run(tmp_path: Path) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", read_only=(str(REPO),)))
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from flux_system.sandbox import diagnose\n"
        "print(json.dumps(diagnose().as_dict()))\n"
    )
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run([SYSTEM_PYTHON, "-I", "-c", code], timeout=120)
    assert r.exit_code == 0, r.stderr_text
    data = json.loads(r.stdout_text)
    assert data["default_ok"] is False
    bw = {c["name"]: c for c in data["checks"]}["bubblewrap"]
    assert bw["ok"] is False
    assert "cannot create namespaces" in bw["found"]
    assert bw["advice"]
    assert "bubblewrap" in data["profiles"]["default"]
    assert "flux doctor" in data["profiles"]["default"]


def test_diagnose_never_raises() -> None:
    d = diagnose()
    assert isinstance(d.default_ok, bool)
    assert set(d.profiles) == {"default", "strict", "net-proxy"}
