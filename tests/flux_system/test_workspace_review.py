"""Regressions found by the second (adversarial) review of the Workspace (decision 0014).

Each test is named after what it reproduces; all run on both resolvers, on real files.
"""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux_system import (
    ConfinementReason,
    NotFoundError,
    PathEscapeError,
    Workspace,
    WorkspaceError,
    WorkspaceReason,
)
from tests.flux_system._ws_support import outside, resolver, root, ws  # noqa: F401

# --- two-path operations name the side at fault ----------------------------------------


def test_rename_missing_dst_parent_names_dst(ws: Workspace, root: Path) -> None:
    (root / "src").write_bytes(b"s")
    with pytest.raises(NotFoundError) as info:
        ws.rename("src", "missing/dst")
    assert info.value.path == "missing/dst"
    assert (root / "src").read_bytes() == b"s"


def test_rename_missing_src_names_src(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    with pytest.raises(NotFoundError) as info:
        ws.rename("nope", "d/dst")
    assert info.value.path == "nope"
    with pytest.raises(NotFoundError) as info:
        ws.rename("gone/nope", "d/dst")
    assert info.value.path == "gone/nope"


def test_rename_dst_parent_is_a_file_names_dst(ws: Workspace, root: Path) -> None:
    (root / "src").write_bytes(b"s")
    (root / "f").write_bytes(b"")
    with pytest.raises(WorkspaceError) as info:
        ws.rename("src", "f/dst")
    assert info.value.reason is WorkspaceReason.NOT_A_DIRECTORY
    assert info.value.path == "f/dst"


def test_rename_onto_incompatible_dst_names_dst(ws: Workspace, root: Path) -> None:
    (root / "file").write_bytes(b"")
    (root / "emptydir").mkdir()
    (root / "full").mkdir()
    (root / "full" / "x").write_bytes(b"")
    (root / "dir").mkdir()
    cases = [
        ("file", "emptydir", WorkspaceReason.IS_A_DIRECTORY),
        ("dir", "file", WorkspaceReason.NOT_A_DIRECTORY),
        ("dir", "full", WorkspaceReason.NOT_EMPTY),
    ]
    for src, dst, reason in cases:
        with pytest.raises(WorkspaceError) as info:
            ws.rename(src, dst)
        assert (info.value.reason, info.value.path) == (reason, dst)
    assert sorted(p.name for p in root.iterdir()) == ["dir", "emptydir", "file", "full"]


def test_rename_dst_through_escaping_parent_names_dst(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "src").write_bytes(b"s")
    (root / "out").symlink_to("../outside")
    with pytest.raises(PathEscapeError) as info:
        ws.rename("src", "out/x")
    assert (info.value.reason, info.value.path) == (ConfinementReason.ESCAPE, "out/x")
    assert sorted(p.name for p in outside.iterdir()) == ["canary"]


def test_copy_missing_dst_parent_names_dst(ws: Workspace, root: Path) -> None:
    (root / "src").write_bytes(b"s")
    with pytest.raises(NotFoundError) as info:
        ws.copy("src", "missing/dst", create_parents=False)
    assert info.value.path == "missing/dst"
    with pytest.raises(NotFoundError) as info:
        ws.copy("nope", "dst")
    assert info.value.path == "nope"
    assert sorted(p.name for p in root.iterdir()) == ["src"]


def test_symlink_missing_parent_names_link(ws: Workspace, root: Path) -> None:
    (root / "t").write_bytes(b"")
    with pytest.raises(NotFoundError) as info:
        ws.symlink("t", "missing/l")
    assert info.value.path == "missing/l"


def test_symlink_escaping_target_names_target(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "d").mkdir()
    (root / "ln").symlink_to("../outside")
    for target, link in (("../../outside/canary", "d/up"), ("ln/canary", "new")):
        with pytest.raises(PathEscapeError) as info:
            ws.symlink(target, link)
        assert (info.value.reason, info.value.path) == (ConfinementReason.ESCAPE, target)
    with pytest.raises(PathEscapeError) as info:
        ws.symlink(str(outside / "canary"), "abs")
    assert info.value.path == str(outside / "canary")
    assert sorted(p.name for p in root.iterdir()) == ["d", "ln"]


def test_copy_unreadable_source_names_src_and_leaves_nothing(root: Path, resolver: str) -> None:
    proc = f"/proc/{os.getpid()}"  # "mem" is a regular file whose read at offset 0 fails EIO
    with Workspace(root, read_roots=[proc], resolver=resolver) as w:
        with pytest.raises(WorkspaceError) as info:
            w.copy(f"{proc}/mem", "dst")
    assert (info.value.reason, info.value.path) == (WorkspaceReason.IO, f"{proc}/mem")
    assert list(root.iterdir()) == []
