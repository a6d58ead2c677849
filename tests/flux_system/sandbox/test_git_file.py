"""A ``.git`` *file* (a linked worktree's or submodule checkout's ``gitdir:`` pointer).

Rewritten by a run, it points the host's next ``git`` in that tree at a git directory
of the run's choosing, whose hooks run on the host. With the old code bubblewrap
bound nothing for it (``.git/hooks`` does not exist below a file), so without the
audit the rewrite stayed. Now bubblewrap binds it read-only like any existing
protected path (a mount point: it cannot be renamed or removed either), and the
audit, on both backends, restores it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from tests.flux_system.sandbox._support import require_backend, require_bwrap

POINTER = "gitdir: /srv/main/.git/worktrees/linked\n"
ATTACK = (
    'echo "gitdir: $PWD/evil" > .git; mv .git .git-old; '
    "echo planted > other.txt && echo other-ok; true"
)


def _run(tmp_path: Path, settings: SandboxSettings) -> tuple[str, list[str]]:
    ws_dir = tmp_path / "ws"
    ws_dir.mkdir()
    (ws_dir / ".git").write_text(POINTER)
    sandbox = Sandbox.resolve(settings)
    with Workspace(ws_dir) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run(["/bin/sh", "-c", ATTACK], timeout=60)
    assert r.denials is not None
    return r.stdout_text, [f"{d.what} {d.detail}" for d in r.denials.records]


def test_bwrap_binds_a_git_file_read_only(tmp_path: Path) -> None:
    require_bwrap()
    out, records = _run(tmp_path, SandboxSettings(mode="require"))
    assert "other-ok" in out  # positive control: the workspace is writable
    ws_dir = tmp_path / "ws"
    assert (ws_dir / ".git").read_text() == POINTER
    assert not (ws_dir / ".git-old").exists()
    assert records == []  # no audit here: the bind alone held


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_the_audit_restores_a_git_file(tmp_path: Path, backend: str) -> None:
    require_backend(backend)
    mode = "require" if backend == "bwrap" else "on"
    out, records = _run(tmp_path, SandboxSettings(mode=mode, backend=backend, audit=True))
    assert "other-ok" in out
    ws_dir = tmp_path / "ws"
    assert (ws_dir / ".git").read_text() == POINTER
    if backend == "landlock":  # no binds: the run changed it and the audit undid that
        assert any(r.startswith(f"{ws_dir}/.git ") for r in records), records
        # the renamed copy stays, as any file the run wrote: git reads no .git-old
    else:
        assert not (ws_dir / ".git-old").exists()
