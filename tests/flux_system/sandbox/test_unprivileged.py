"""The same backends as an unprivileged user (uid/gid 65534): what each reports and does.

The unprivileged side runs a copy of ``flux_system`` from a world-readable directory
with the system interpreter, so it does not depend on where the checkout or this
interpreter live.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.flux_system.sandbox._support import (
    require_bwrap,
    require_landlock,
    require_unprivileged,
    run_unprivileged,
    world_dir,
)

SCRIPT = r"""
import json, os, sys, tempfile
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings

out = {"uid": os.geteuid()}
base = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
secret = os.path.join(base, "secret.txt")
with open(secret, "w") as fh:
    fh.write("unprivileged host secret")
PROBE = (
    "grep -E '^(NoNewPrivs|CapEff|Seccomp):' /proc/self/status | tr '\\t' ' '; "
    "id -u; echo w > mine.txt && echo wrote; cat %s || echo secret-denied; "
    "echo t > /tmp/t && cat /tmp/t; ls /proc | grep -c '^[0-9]'"
) % secret
for name, settings in [
    ("default", SandboxSettings(mode="require", profile="default")),
    ("strict", SandboxSettings(mode="require", profile="strict")),
    ("landlock", SandboxSettings(mode="on", backend="landlock")),
]:
    sb = Sandbox.resolve(settings)
    ws_dir = tempfile.mkdtemp(dir=base)
    with Workspace(ws_dir) as ws, System(ws, sandbox=sb) as system:
        r = system.run(["/bin/sh", "-c", PROBE], timeout=60)
    rep = sb.report()
    out[name] = {
        "backend": rep.backend,
        "layers": list(rep.active_layers),
        "missing": list(rep.missing),
        "enforced": {g.name: g.enforced for g in rep.guarantees},
        "exit": r.exit_code,
        "stdout": r.stdout_text.splitlines(),
        "observable": r.denials.observable if r.denials else None,
        "wrote": os.path.exists(os.path.join(ws_dir, "mine.txt")),
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, object]]:
    require_unprivileged()
    require_bwrap()
    require_landlock(6)
    base = world_dir("flux-unpriv-")
    try:
        yield run_unprivileged(SCRIPT, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_runs_as_65534(results: dict[str, object]) -> None:
    assert results["uid"] == 65534


def test_default_as_unprivileged(results: dict[str, object]) -> None:
    got = results["default"]
    assert isinstance(got, dict)
    assert got["backend"] == "bwrap"
    assert got["layers"] == ["bubblewrap", "seccomp"]
    assert got["missing"] == []
    assert got["exit"] == 0
    assert got["stdout"][:3] == ["CapEff: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2"]
    assert got["stdout"][3:7] == ["65534", "wrote", "secret-denied", "t"]
    # /proc lists only the sandbox's own processes: bwrap's init, sh, ls (and grep, when
    # it started before ls read /proc); the host has hundreds
    assert int(got["stdout"][7]) <= 4
    assert got["wrote"] is True
    assert got["observable"] is False


def test_strict_as_unprivileged(results: dict[str, object]) -> None:
    got = results["strict"]
    assert isinstance(got, dict)
    assert got["layers"] == ["bubblewrap", "landlock", "seccomp"]
    assert got["exit"] == 0
    assert got["stdout"][3:7] == ["65534", "wrote", "secret-denied", "t"]
    assert int(got["stdout"][7]) <= 4


def test_landlock_only_as_unprivileged(results: dict[str, object]) -> None:
    got = results["landlock"]
    assert isinstance(got, dict)
    assert got["backend"] == "landlock"
    assert got["layers"] == ["landlock", "seccomp"]
    assert got["missing"] == ["bubblewrap"]
    assert got["enforced"]["pid_namespace"] is False
    assert got["enforced"]["private_tmp"] is False
    assert got["enforced"]["process_tree"] is False  # no pids cgroup for uid 65534
    # /tmp of the host is not writable; the host's processes show in /proc
    out = got["stdout"]
    assert isinstance(out, list)
    assert out[:3] == ["CapEff: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2"]
    assert out[3:6] == ["65534", "wrote", "secret-denied"]
    assert "t" not in out[6:7]
    assert got["observable"] is True
