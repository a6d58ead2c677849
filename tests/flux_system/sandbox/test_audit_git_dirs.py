"""Git directories below ``.git/modules`` and ``.git/worktrees`` are protected too.

A submodule's git directory (``.git/modules/<name>``, names with slashes and nested
submodules included) has hooks and a config of its own that the host's git runs or
reads (``git status`` in the superproject runs git in each submodule); a linked
worktree's (``.git/worktrees/<id>``) ``config.worktree`` and ``commondir`` say where
its hooks and config come from; ``.git/commondir`` does the same for the main one.
Each attack is shown to land (positive control) before the audit undoes it; under
bubblewrap the existing ones are bound read-only.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux_system import SandboxUnavailableError, System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from flux_system.sandbox._audit import AuditChange, audit_protected_paths
from flux_system.sandbox._protected import git_dir_paths
from tests.flux_system.sandbox._support import require_bwrap

HOOK = b"#!/bin/sh\necho original\n"
TREE = {
    ".git/HEAD": b"ref: refs/heads/main\n",
    ".git/config": b"[core]\n",
    ".git/hooks/pre-commit": HOOK,
    ".git/modules/libs/foo/HEAD": b"ref: refs/heads/main\n",
    ".git/modules/libs/foo/config": b"[core]\n\tworktree = ../../../../libs/foo\n",
    ".git/modules/libs/foo/hooks/pre-commit": HOOK,
    ".git/modules/libs/foo/objects/pack/p.pack": b"PACK",
    ".git/modules/libs/foo/refs/heads/main": b"0" * 40 + b"\n",
    ".git/modules/a/config": b"[core]\n",
    ".git/modules/a/modules/b/config": b"[core]\n",
    ".git/modules/a/modules/b/hooks/.keep": b"",
    ".git/worktrees/wt1/HEAD": b"ref: refs/heads/topic\n",
    ".git/worktrees/wt1/commondir": b"../..\n",
    ".git/worktrees/wt1/gitdir": b"/elsewhere/wt1/.git\n",
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for rel, data in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _files(root: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = None if p.is_dir() else p.read_bytes()
    return out


def test_git_dir_paths_finds_nested_submodules_and_worktrees(ws: Path) -> None:
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = git_dir_paths(fd)
    finally:
        os.close(fd)
    assert found.complete
    dirs = {p.rsplit("/", 1)[0] for p in found.paths}
    # libs is a directory a submodule name passes through: its names count (absent).
    assert {
        ".git/modules/libs",
        ".git/modules/libs/foo",
        ".git/modules/a",
        ".git/modules/a/modules",
        ".git/modules/a/modules/b",
        ".git/worktrees/wt1",
    } <= dirs
    assert not any("/objects" in d or "/refs" in d for d in dirs)  # a git dir's data


def test_changes_in_submodule_and_worktree_git_dirs_are_undone(ws: Path) -> None:
    before = _files(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".git/commondir").write_bytes(b"../evil\n")
        (ws / ".git/config.worktree").write_bytes(b"[core]\n\thooksPath = /tmp\n")
        (ws / ".git/modules/libs/foo/config").write_bytes(b"[core]\n\tfsmonitor = evil\n")
        (ws / ".git/modules/libs/foo/hooks/pre-commit").write_bytes(b"evil")
        (ws / ".git/modules/a/modules/b/hooks/post-checkout").write_bytes(b"evil")
        (ws / ".git/worktrees/wt1/config.worktree").write_bytes(b"[core]\n\thooksPath = .\n")
        (ws / ".git/worktrees/wt1/commondir").write_bytes(b"../../../evil\n")
        (ws / ".git/modules/libs/foo/objects/pack/new.pack").write_bytes(b"PACK")  # data
        assert (ws / ".git/modules/a/modules/b/hooks/post-checkout").exists()  # control
    assert {(r.path, r.change) for r in audit.report.records} == {
        (".git/commondir", AuditChange.CREATED),
        (".git/config.worktree", AuditChange.CREATED),
        (".git/modules/libs/foo/config", AuditChange.MODIFIED),
        (".git/modules/libs/foo/hooks/pre-commit", AuditChange.MODIFIED),
        (".git/modules/a/modules/b/hooks/post-checkout", AuditChange.CREATED),
        (".git/worktrees/wt1/config.worktree", AuditChange.CREATED),
        (".git/worktrees/wt1/commondir", AuditChange.MODIFIED),
    }
    assert all(r.restored for r in audit.report.records)
    after = _files(ws)
    assert after.pop(".git/modules/libs/foo/objects/pack/new.pack") == b"PACK"
    assert after == before


def test_git_dir_made_by_the_run_loses_its_hooks_and_config(ws: Path) -> None:
    before = _files(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        evil = ws / ".git/modules/evil"
        (evil / "hooks").mkdir(parents=True)
        (evil / "hooks/post-checkout").write_bytes(b"#!/bin/sh\nevil\n")
        (evil / "config").write_bytes(b"[core]\n\tfsmonitor = evil\n")
        (evil / "objects").mkdir()
        (ws / ".git/worktrees/wt2").mkdir()
        (ws / ".git/worktrees/wt2/commondir").write_bytes(b"../../../evil\n")
    assert {(r.path, r.change, r.restored) for r in audit.report.records} == {
        (".git/modules/evil/hooks", AuditChange.CREATED, True),
        (".git/modules/evil/config", AuditChange.CREATED, True),
        (".git/worktrees/wt2/commondir", AuditChange.CREATED, True),
    }
    after = _files(ws)
    # What is not a protected name stays: the run's own data, empty directories.
    assert {k for k in after if k not in before} == {
        ".git/modules/evil",
        ".git/modules/evil/objects",
        ".git/worktrees/wt2",
    }


def test_git_dirs_off_leaves_them_alone(ws: Path) -> None:
    with audit_protected_paths(ws, git_dirs=False) as audit:
        (ws / ".git/modules/libs/foo/config").write_bytes(b"x")
    assert audit.report.clean


def test_too_many_git_dirs_refuse_before_the_run(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flux_system.sandbox._protected.MAX_GIT_DIRS", 3)
    with pytest.raises(SandboxUnavailableError) as info:
        with audit_protected_paths(ws):
            pass
    assert info.value.layer == "protected_paths"
    assert ".git/modules" in str(info.value)


def test_bwrap_binds_submodule_and_worktree_git_dirs_read_only(ws: Path) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", profile="default"))
    attack = (
        "for f in .git/modules/libs/foo/hooks/pre-commit .git/modules/libs/foo/config "
        ".git/modules/a/modules/b/config .git/worktrees/wt1/commondir "
        ".git/modules/a/modules/b/hooks/post-checkout; do "
        "echo evil >> $f 2>/dev/null && echo wrote $f || echo refused $f; done; "
        "mv .git/modules/libs .git/modules/libs-old 2>/dev/null && echo moved || echo pinned; "
        "echo data > .git/modules/libs/foo/objects/pack/x && echo objects-writable"
    )
    with Workspace(ws) as workspace, System(workspace, sandbox=sandbox) as system:
        result = system.run(["/bin/sh", "-c", attack], timeout=60)
    lines = result.stdout_text.split("\n")
    assert [ln for ln in lines if ln.startswith("wrote")] == []
    assert len([ln for ln in lines if ln.startswith("refused")]) == 5
    assert "pinned" in lines and "objects-writable" in lines
    assert (ws / ".git/modules/libs/foo/config").read_bytes() == TREE[
        ".git/modules/libs/foo/config"
    ]


def test_submodule_config_is_writable_unsandboxed(ws: Path) -> None:
    """Positive control of the bind test: unsandboxed, the same writes land."""
    with Workspace(ws) as workspace, System(workspace) as system:
        result = system.run(
            ["/bin/sh", "-c", "echo evil >> .git/modules/libs/foo/config && echo wrote"],
            timeout=60,
        )
    assert result.stdout_text.strip() == "wrote"
