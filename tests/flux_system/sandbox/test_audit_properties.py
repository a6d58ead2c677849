"""Property: whatever a run does to protected names, ``restore`` puts back exactly the
snapshot's protected state, and changes nothing outside the root.

Generated sequences of writes, mode changes, removals, symlinks (inside and out of
the root), new directories and renames of protected parents are applied between the
snapshot and the check.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from flux_system.sandbox._audit import DEFAULT_PROTECTED_PATHS, audit_protected_paths

TARGETS = [
    ".git",
    ".git/config",
    ".git/hooks",
    ".git/hooks/pre-commit",
    ".git/hooks/new",
    ".envrc",
    ".vscode",
    ".vscode/settings.json",
    ".vscode/sub/x",
    ".claude",
    ".idea/a",
    ".bashrc",
]
LINKS = ["src.py", ".git/HEAD", "/etc/passwd", "../outside", "../outside/file"]

op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(TARGETS), st.binary(max_size=8)),
    st.tuples(st.just("chmod"), st.sampled_from(TARGETS), st.sampled_from([0o600, 0o755, 0])),
    st.tuples(st.just("remove"), st.sampled_from(TARGETS), st.none()),
    st.tuples(st.just("symlink"), st.sampled_from(TARGETS), st.sampled_from(LINKS)),
    st.tuples(st.just("mkdir"), st.sampled_from(TARGETS), st.none()),
    st.tuples(
        st.just("rename"), st.sampled_from([".git", ".vscode"]), st.sampled_from(["old", "mv"])
    ),
)


def _build(base: Path) -> tuple[Path, Path]:
    ws, outside = base / "ws", base / "outside"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "objects").mkdir()
    (ws / ".git" / "hooks" / "pre-commit").write_bytes(b"#!/bin/sh\n")
    (ws / ".git" / "config").write_bytes(b"[core]\n")
    (ws / ".git" / "HEAD").write_bytes(b"ref\n")
    (ws / ".vscode").mkdir()
    (ws / ".vscode" / "settings.json").write_bytes(b"{}")
    (ws / ".envrc").symlink_to("src.py")
    (ws / "src.py").write_bytes(b"x")
    outside.mkdir()
    (outside / "file").write_bytes(b"outside")
    return ws, outside


def _apply(ws: Path, action: str, target: str, arg: object) -> None:
    path = ws / target
    try:
        if action == "write":
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink() or path.is_dir():
                _remove(path)
            assert isinstance(arg, bytes)
            path.write_bytes(arg)
        elif action == "chmod" and not path.is_symlink():
            assert isinstance(arg, int)
            path.chmod(arg)
        elif action == "remove":
            _remove(path)
        elif action == "symlink":
            _remove(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(str(arg))
        elif action == "mkdir":
            path.mkdir(parents=True, exist_ok=True)
        elif action == "rename":
            path.rename(ws / f"{target}-{arg}")
    except OSError:
        pass  # e.g. a parent is a file now: the attack step simply fails


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _view(root: Path) -> dict[str, tuple[str, bytes | None, int]]:
    """The protected part of a tree: each protected path and everything below it."""
    out: dict[str, tuple[str, bytes | None, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if not any(rel == q or rel.startswith(q + "/") for q in DEFAULT_PROTECTED_PATHS):
                continue
            st_ = p.lstat()
            if p.is_symlink():
                out[rel] = ("link", os.fsencode(os.readlink(p)), 0)
            elif p.is_dir():
                out[rel] = ("dir", None, st_.st_mode & 0o7777)
            else:
                out[rel] = ("file", p.read_bytes(), st_.st_mode & 0o7777)
    return out


def _outside(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}


@given(ops=st.lists(op, max_size=8))
# Found by this property: the directory re-made for `.vscode` got the inode number of
# the deleted `.git`, and was taken for `.git` renamed away (inode numbers are reused).
@example(ops=[("remove", ".git", None), ("write", ".vscode", b"")])
def test_restore_puts_back_exactly_the_protected_state(
    tmp_path: Path, ops: list[tuple[str, str, object]]
) -> None:
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    ws, outside = _build(base)
    before = _view(ws)
    with audit_protected_paths(ws, restore=True) as audit:
        for action, target, arg in ops:
            _apply(ws, action, target, arg)
        outside_after_run = _outside(outside)
        changed = _view(ws) != before
    assert audit.report.clean is not changed  # reported exactly when something changed
    assert _view(ws) == before
    assert _outside(outside) == outside_after_run  # the audit touched nothing outside
    assert all(r.restored for r in audit.report.records)
    assert not any("flux-restore" in p.name for p in ws.rglob("*"))
