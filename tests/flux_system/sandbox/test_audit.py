"""The protected-path audit: created, modified, replaced and renamed-away names are
detected, and with ``restore`` put back, beneath the root and nowhere else.

Each attack is real: a child process (``System.run`` of ``/bin/sh``) or direct file
operations change the workspace between the snapshot and the check; a positive
control shows the change was there before the audit undid it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux_system import SandboxUnavailableError, System, Workspace
from flux_system.sandbox._audit import (
    AuditChange,
    AuditRecord,
    ProtectedPathAudit,
    audit_protected_paths,
    run_audited,
)
from flux_system.workspace import FileKind

HOOK = b"#!/bin/sh\necho original hook\n"
CONFIG = b"[core]\n\trepositoryformatversion = 0\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "objects" / "ab").mkdir(parents=True)
    (root / ".git" / "refs" / "heads").mkdir(parents=True)
    (root / ".git" / "hooks" / "pre-commit").write_bytes(HOOK)
    (root / ".git" / "hooks" / "pre-commit").chmod(0o755)
    (root / ".git" / "config").write_bytes(CONFIG)
    (root / ".git" / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (root / ".vscode").mkdir()
    (root / ".vscode" / "settings.json").write_bytes(b"{}\n")
    (root / "src.py").write_bytes(b"print(1)\n")
    return root


def _tree(root: Path) -> dict[str, tuple[str, bytes | None, int]]:
    out: dict[str, tuple[str, bytes | None, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("link", os.fsencode(os.readlink(p)), 0)
            elif p.is_dir():
                out[rel] = ("dir", None, st.st_mode & 0o7777)
            else:
                out[rel] = ("file", p.read_bytes(), st.st_mode & 0o7777)
    return out


def _changes(records: tuple[AuditRecord, ...]) -> set[tuple[str, AuditChange]]:
    return {(r.path, r.change) for r in records}


def test_no_change_reports_nothing_and_leaves_nothing(ws: Path) -> None:
    before = _tree(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        pass
    assert audit.report.clean
    assert _tree(ws) == before


def test_created_names_are_reported_and_removed(ws: Path) -> None:
    before = _tree(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".envrc").write_bytes(b"export EVIL=1\n")
        (ws / ".git" / "hooks" / "post-checkout").write_bytes(b"#!/bin/sh\nevil\n")
        (ws / ".claude").mkdir()
        (ws / ".claude" / "settings.json").write_bytes(b"{}")
        (ws / ".bashrc").symlink_to("/etc/passwd")
        assert (ws / ".envrc").exists()  # positive control: the attack happened
    assert _changes(audit.report.records) == {
        (".envrc", AuditChange.CREATED),
        (".git/hooks/post-checkout", AuditChange.CREATED),
        (".claude", AuditChange.CREATED),
        (".bashrc", AuditChange.CREATED),
    }
    assert all(r.restored for r in audit.report.records)
    assert _tree(ws) == before


def test_modified_file_mode_and_symlink_are_restored(ws: Path, tmp_path: Path) -> None:
    (ws / ".mcp.json").symlink_to("src.py")
    before = _tree(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".git" / "config").write_bytes(b"[core]\n\thooksPath = /tmp/evil\n")
        (ws / ".git" / "hooks" / "pre-commit").chmod(0o777)
        (ws / ".vscode" / "settings.json").write_bytes(b'{"terminal": "evil"}\n')
        (ws / ".mcp.json").unlink()
        (ws / ".mcp.json").symlink_to(".git/HEAD")
    records = {(r.path, r.change): r for r in audit.report.records}
    assert set(records) == {
        (".git/config", AuditChange.MODIFIED),
        (".git/hooks/pre-commit", AuditChange.MODE),
        (".vscode/settings.json", AuditChange.MODIFIED),
        (".mcp.json", AuditChange.MODIFIED),
    }
    assert records[(".mcp.json", AuditChange.MODIFIED)].before is FileKind.SYMLINK
    assert _tree(ws) == before


def test_report_only_changes_nothing(ws: Path) -> None:
    with audit_protected_paths(ws) as audit:
        (ws / ".git" / "config").write_bytes(b"changed\n")
        (ws / ".envrc").write_bytes(b"x")
    assert _changes(audit.report.records) == {
        (".git/config", AuditChange.MODIFIED),
        (".envrc", AuditChange.CREATED),
    }
    assert audit.report.unrestored == audit.report.records
    assert (ws / ".git" / "config").read_bytes() == b"changed\n"
    assert (ws / ".envrc").exists()


def test_replaced_by_symlink_out_of_the_root_is_undone_without_touching_outside(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside stays\n")
    before = _tree(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".git" / "config").unlink()
        (ws / ".git" / "config").symlink_to(outside)
        (ws / ".vscode").rename(ws / "vscode-away")
        (ws / ".vscode").symlink_to(tmp_path)
    assert _changes(audit.report.records) == {
        (".git/config", AuditChange.REPLACED),
        (".vscode", AuditChange.REPLACED),
    }
    assert outside.read_bytes() == b"outside stays\n"
    vscode = next(r for r in audit.report.records if r.path == ".vscode")
    assert vscode.found_at == "vscode-away"  # the original, moved back: no copy left
    assert _tree(ws) == before


def test_rename_of_the_parent_is_detected_and_undone(ws: Path) -> None:
    """The outside review's bypass of plain binds: ``mv .git .git-old && mkdir -p .git/hooks``."""
    before = _tree(ws)
    inode = (ws / ".git").stat().st_ino
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".git").rename(ws / ".git-old")
        (ws / ".git" / "hooks").mkdir(parents=True)
        (ws / ".git" / "hooks" / "pre-commit").write_bytes(b"#!/bin/sh\nevil\n")
        (ws / ".git" / "config").write_bytes(b"[core]\n\thooksPath = .\n")
        assert (ws / ".git" / "hooks" / "pre-commit").read_bytes().endswith(b"evil\n")
    assert (".git", AuditChange.REPLACED) in _changes(audit.report.records)
    assert all(r.restored for r in audit.report.records)
    assert (ws / ".git").stat().st_ino == inode  # the original, renamed back
    assert _tree(ws) == before


def test_protected_directory_renamed_away_and_replaced_comes_back(ws: Path) -> None:
    """``mv .vscode .vscode-old && mkdir .vscode && write settings.json``, after a
    ``tasks.json`` was planted in the original: the original comes back under its
    name, the plant in it is removed, the replacement is gone, nothing is left beside."""
    before = _tree(ws)
    inode = (ws / ".vscode").stat().st_ino
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".vscode" / "settings.json").write_bytes(b'{"evil": 1}\n')
        (ws / ".vscode" / "tasks.json").write_bytes(b'{"tasks": ["evil"]}\n')
        (ws / ".vscode").rename(ws / ".vscode-old")
        (ws / ".vscode").mkdir()
        (ws / ".vscode" / "settings.json").write_bytes(b'{"evil": 2}\n')
        assert (ws / ".vscode-old" / "tasks.json").exists()  # positive control
    records = {(r.path, r.change): r for r in audit.report.records}
    assert set(records) == {
        (".vscode", AuditChange.REPLACED),
        (".vscode/settings.json", AuditChange.MODIFIED),
        (".vscode/tasks.json", AuditChange.CREATED),
    }
    assert records[(".vscode", AuditChange.REPLACED)].found_at == ".vscode-old"
    assert all(r.restored for r in audit.report.records)
    assert (ws / ".vscode").stat().st_ino == inode
    assert _tree(ws) == before


def test_protected_directory_renamed_away_report_only_names_where(ws: Path) -> None:
    with audit_protected_paths(ws) as audit:
        (ws / ".vscode").rename(ws / ".vscode-old")
    assert [(r.path, r.change, r.found_at, r.restored) for r in audit.report.records] == [
        (".vscode", AuditChange.DELETED, ".vscode-old", False)
    ]
    assert (ws / ".vscode-old").is_dir() and not (ws / ".vscode").exists()


def test_parent_renamed_onto_a_protected_name_is_not_removed_as_created(ws: Path) -> None:
    """``mv .git .envrc``: ``.envrc`` is a protected name created by the run, and holds
    the repository; the repository comes back as ``.git`` before ``.envrc`` is removed."""
    before = _tree(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".git").rename(ws / ".envrc")
        (ws / ".git" / "hooks").mkdir(parents=True)
        (ws / ".git" / "hooks" / "pre-commit").write_bytes(b"evil")
    assert (ws / ".git" / "objects" / "ab").is_dir()
    assert (".git", AuditChange.REPLACED) in _changes(audit.report.records)
    assert _tree(ws) == before


def test_two_protected_directories_swapped_are_both_put_back(ws: Path) -> None:
    (ws / ".idea").mkdir()
    (ws / ".idea" / "workspace.xml").write_bytes(b"<idea/>\n")
    before = _tree(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".vscode").rename(ws / "swap")
        (ws / ".idea").rename(ws / ".vscode")
        (ws / "swap").rename(ws / ".idea")
    assert {r.path for r in audit.report.records} == {".vscode", ".idea"}
    assert _tree(ws) == before


def test_rename_then_report_only_shows_the_new_tree(ws: Path) -> None:
    with audit_protected_paths(ws) as audit:
        (ws / ".git").rename(ws / ".git-old")
        (ws / ".git" / "hooks").mkdir(parents=True)
        (ws / ".git" / "hooks" / "pre-commit").write_bytes(b"evil")
    assert _changes(audit.report.records) == {
        (".git", AuditChange.REPLACED),
        (".git/hooks", AuditChange.REPLACED),  # another directory than the original
        (".git/hooks/pre-commit", AuditChange.MODIFIED),
        (".git/config", AuditChange.DELETED),
    }


def test_git_replaced_by_a_file_is_undone(ws: Path) -> None:
    before = _tree(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".git").rename(ws / "elsewhere")
        (ws / ".git").write_bytes(b"gitdir: elsewhere-evil\n")
    assert _changes(audit.report.records) == {(".git", AuditChange.REPLACED)}
    assert _tree(ws) == before  # `elsewhere` was the original: renamed back


def test_git_removed_is_rebuilt_from_the_snapshot(ws: Path) -> None:
    with audit_protected_paths(ws, restore=True) as audit:
        for p in sorted((ws / ".git").rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        (ws / ".git").rmdir()
        (ws / ".git").write_bytes(b"gitdir: /tmp/evil\n")
    assert (".git", AuditChange.REPLACED) in _changes(audit.report.records)
    assert (ws / ".git" / "config").read_bytes() == CONFIG
    assert (ws / ".git" / "hooks" / "pre-commit").read_bytes() == HOOK
    assert (ws / ".git" / "hooks" / "pre-commit").stat().st_mode & 0o777 == 0o755


def test_protected_names_under_a_parent_that_did_not_exist(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    with audit_protected_paths(root, restore=True) as audit:
        (root / ".git" / "hooks").mkdir(parents=True)
        (root / ".git" / "hooks" / "pre-commit").write_bytes(b"evil")
        (root / ".git" / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    assert _changes(audit.report.records) == {(".git/hooks", AuditChange.CREATED)}
    assert sorted(os.listdir(root / ".git")) == ["HEAD"]  # not protected: kept


def test_git_created_as_a_file_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    with audit_protected_paths(root, restore=True) as audit:
        (root / ".git").write_bytes(b"gitdir: evil\n")
    assert _changes(audit.report.records) == {(".git", AuditChange.CREATED)}
    assert os.listdir(root) == []


def test_git_objects_refs_and_index_are_not_audited(ws: Path) -> None:
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".git" / "objects" / "ab" / "cdef").write_bytes(b"blob")
        (ws / ".git" / "refs" / "heads" / "main").write_bytes(b"0" * 40 + b"\n")
        (ws / ".git" / "index").write_bytes(b"DIRC")
        (ws / ".git" / "HEAD").write_bytes(b"ref: refs/heads/other\n")
    assert audit.report.clean
    assert (ws / ".git" / "objects" / "ab" / "cdef").read_bytes() == b"blob"
    assert (ws / ".git" / "index").exists()


def test_hard_link_out_of_the_protected_area_is_broken(ws: Path) -> None:
    with audit_protected_paths(ws, restore=True) as audit:
        os.link(ws / ".git" / "config", ws / "leak")
    assert _changes(audit.report.records) == {(".git/config", AuditChange.MODIFIED)}
    assert (ws / ".git" / "config").stat().st_nlink == 1
    assert (ws / ".git" / "config").read_bytes() == CONFIG


def test_deleted_directory_is_recreated(ws: Path) -> None:
    before = _tree(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        (ws / ".vscode" / "settings.json").unlink()
        (ws / ".vscode").rmdir()
    assert _changes(audit.report.records) == {(".vscode", AuditChange.DELETED)}
    assert _tree(ws) == before


def test_read_only_directory_is_restored_inside(ws: Path) -> None:
    (ws / ".idea").mkdir()
    (ws / ".idea" / "workspace.xml").write_bytes(b"<x/>")
    (ws / ".idea").chmod(0o555)
    try:
        before = _tree(ws)
        with audit_protected_paths(ws, restore=True) as audit:
            (ws / ".idea").chmod(0o755)
            (ws / ".idea" / "workspace.xml").write_bytes(b"<evil/>")
            (ws / ".idea").chmod(0o555)
        assert _changes(audit.report.records) == {(".idea/workspace.xml", AuditChange.MODIFIED)}
        assert _tree(ws) == before
    finally:
        (ws / ".idea").chmod(0o755)


def test_real_child_process_rename_attack_through_run_audited(ws: Path) -> None:
    script = (
        "mv .git .git-old && mkdir -p .git/hooks && "
        "printf '#!/bin/sh\\nevil\\n' > .git/hooks/pre-commit && touch .envrc && "
        "cat .git/hooks/pre-commit"
    )
    before = _tree(ws)
    with Workspace(ws) as workspace, System(workspace) as system:
        run = run_audited(system, ["/bin/sh", "-c", script], roots=workspace, restore=True)
    assert run.result.exit_code == 0
    assert run.result.stdout.endswith(b"evil\n")  # positive control: the attack ran
    assert {(".git", AuditChange.REPLACED), (".envrc", AuditChange.CREATED)} <= _changes(
        run.audit.records
    )
    assert all(r.restored for r in run.audit.records)
    assert _tree(ws) == before


def test_no_restore_temporaries_are_left(ws: Path) -> None:
    with audit_protected_paths(ws, restore=True):
        (ws / ".git" / "config").write_bytes(b"x")
        (ws / ".vscode" / "settings.json").write_bytes(b"y")
    names = {p.name for p in ws.rglob("*")}
    assert not any("flux-restore" in n for n in names)


def test_several_roots_and_profile_paths(ws: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / ".github" / "workflows").mkdir(parents=True)
    (other / ".github" / "workflows" / "ci.yml").write_bytes(b"on: push\n")
    paths = (".git/hooks", ".github/workflows")
    with audit_protected_paths([ws, other], paths, restore=True) as audit:
        (other / ".github" / "workflows" / "ci.yml").write_bytes(b"on: evil\n")
        (ws / ".envrc").write_bytes(b"not protected by this list")
    [record] = audit.report.records
    assert (record.root, record.path) == (str(other), ".github/workflows/ci.yml")
    assert (other / ".github" / "workflows" / "ci.yml").read_bytes() == b"on: push\n"


def test_bounds_refuse_before_the_run(ws: Path) -> None:
    for i in range(20):
        (ws / ".vscode" / f"f{i}").write_bytes(b"x" * 100)
    with pytest.raises(SandboxUnavailableError) as info:
        ProtectedPathAudit(ws, max_entries=10)
    assert info.value.layer == "protected_paths"
    assert "entries" in str(info.value)
    with pytest.raises(SandboxUnavailableError, match="bytes"):
        ProtectedPathAudit(ws, max_bytes=500)
    with pytest.raises(ValueError, match="narrow"):
        ProtectedPathAudit(ws, max_entries=10**9)


def test_bad_paths_are_refused(ws: Path) -> None:
    for bad in ("../x", "/etc/passwd", "", "a/../../b"):
        with pytest.raises(ValueError, match="relative"):
            ProtectedPathAudit(ws, (bad,))
    with pytest.raises(TypeError):
        ProtectedPathAudit(ws, ".git")
    with pytest.raises(SandboxUnavailableError):
        ProtectedPathAudit(ws / "missing")
