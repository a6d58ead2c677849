"""The protected-path audit in real sandboxed runs (``SandboxSettings(audit=True)``).

Under bubblewrap, existing protected paths are read-only and their parents pinned, so
what remains for the audit is what did not exist; on the Landlock-only backend there
are no mounts and the audit is the whole cover — the rename attack succeeds inside
and is undone afterwards. Each attack prints what it did (the positive control).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flux_system import ProcessTimeoutError, System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from tests.flux_system.sandbox._support import require_bwrap, require_landlock

pytestmark = pytest.mark.slow

HOOK = b"#!/bin/sh\necho original\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "objects").mkdir()
    (ws / ".git" / "hooks" / "pre-commit").write_bytes(HOOK)
    (ws / ".git" / "config").write_bytes(b"[core]\n")
    (ws / ".git" / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    return ws


@pytest.fixture
def workspace(root: Path) -> Iterator[Workspace]:
    with Workspace(root) as ws:
        yield ws


ATTACK = (
    "echo evil >> .git/objects/blob; "  # git's own writes must keep working
    "mkdir -p .vscode && echo evil > .vscode/settings.json && "
    "echo 'export X=1' > .envrc && "
    "{ mv .git .git-old && mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit "
    "&& echo renamed || echo rename-refused; } ; "
    "cat .envrc"
)


def _settings(**kw: object) -> SandboxSettings:
    return SandboxSettings(network="none", audit=True, **kw)  # type: ignore[arg-type]


def test_bwrap_run_is_audited_and_restored(workspace: Workspace, root: Path) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(_settings(mode="require", profile="default"))
    with System(workspace, sandbox=sandbox) as system:
        result = system.run(["/bin/sh", "-c", ATTACK], timeout=60)
    assert "export X=1" in result.stdout_text  # positive control: the writes happened
    assert "rename-refused" in result.stdout_text  # the pinned parent cannot be renamed
    assert result.denials is not None
    found = {(d.what, d.detail) for d in result.denials.records if d.layer == "protected_paths"}
    assert found == {
        (str(root / ".vscode"), "created, restored"),
        (str(root / ".envrc"), "created, restored"),
    }
    assert not (root / ".vscode").exists()
    assert not (root / ".envrc").exists()
    assert (root / ".git" / "hooks" / "pre-commit").read_bytes() == HOOK
    assert (root / ".git" / "objects" / "blob").read_bytes() == b"evil\n"  # not protected


def test_landlock_run_rename_attack_is_undone(workspace: Workspace, root: Path) -> None:
    require_landlock()
    inode = (root / ".git").stat().st_ino
    sandbox = Sandbox.resolve(_settings(mode="on", profile="default", backend="landlock"))
    assert sandbox.backend == "landlock"
    with System(workspace, sandbox=sandbox) as system:
        result = system.run(["/bin/sh", "-c", ATTACK], timeout=60)
    assert "renamed" in result.stdout_text.split()  # positive control: no mount stops it
    assert result.denials is not None
    found = {(d.what, d.detail) for d in result.denials.records if d.layer == "protected_paths"}
    assert (str(root / ".git"), "replaced, restored") in found
    assert (str(root / ".envrc"), "created, restored") in found
    assert (root / ".git").stat().st_ino == inode  # the original, renamed back
    assert (root / ".git" / "hooks" / "pre-commit").read_bytes() == HOOK
    assert (root / ".git" / "objects" / "blob").read_bytes() == b"evil\n"
    assert sorted(p.name for p in root.iterdir()) == [".git"]


def test_timed_out_run_is_still_restored(workspace: Workspace, root: Path) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(_settings(mode="require", profile="default"))
    with System(workspace, sandbox=sandbox) as system:
        with pytest.raises(ProcessTimeoutError) as info:
            system.run(["/bin/sh", "-c", "echo x > .envrc; cat .envrc; sleep 120"], timeout=3)
    assert info.value.stdout == b"x\n"  # positive control: it was written
    assert not (root / ".envrc").exists()


def test_without_audit_nothing_is_checked(workspace: Workspace, root: Path) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", profile="default", network="none"))
    with System(workspace, sandbox=sandbox) as system:
        result = system.run(["/bin/sh", "-c", "echo x > .envrc"], timeout=60)
    assert result.exit_code == 0
    assert (root / ".envrc").read_bytes() == b"x\n"  # opt-in: a plain run does not pay
    assert result.denials is not None
    assert [d for d in result.denials.records if d.layer == "protected_paths"] == []
