"""Extra writable paths (``read_write``, ``--rw``) are writable roots like the workspace.

With the old code they were bound read-write and nothing else: an existing
``.git/config`` or ``.bashrc`` in a ``--rw`` directory was writable under bubblewrap,
a new ``.git/hooks/pre-commit`` stayed after the run on both backends (the audit did
not look there), and ``--rw $HOME`` or ``--rw /`` passed the check that refuses a
workspace covering them. Decision 0119.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux_system import SandboxReason, SandboxUnavailableError, System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from tests.flux_system.sandbox._support import require_backend, require_bwrap

ATTACK = (
    'cd "$1" && echo planted > plain.txt && echo "plain: $(cat plain.txt)"; '
    'echo evil >> .bashrc; echo "[core] fsmonitor = evil" >> .git/config; '
    "printf '#!/bin/sh\\n' > .git/hooks/pre-commit; echo 'eval evil' > .envrc; true"
)


def _other(tmp_path: Path) -> Path:
    other = tmp_path / "other"
    (other / ".git" / "hooks").mkdir(parents=True)
    (other / ".git" / "config").write_text("[core]\n")
    (other / ".bashrc").write_text("# rc\n")
    return other


def _settings(backend: str, other: Path, **kw: object) -> SandboxSettings:
    mode = "require" if backend == "bwrap" else "on"
    return SandboxSettings(mode=mode, backend=backend, read_write=(str(other),), **kw)  # type: ignore[arg-type]


def _run(
    tmp_path: Path, backend: str, *, audit: bool, via_link: bool = False
) -> tuple[Path, str, list[str]]:
    other = _other(tmp_path)
    given = other
    if via_link:  # the user's own link, outside every writable tree: followed
        given = tmp_path / "link"
        given.symlink_to(other)
    ws_dir = tmp_path / "ws"
    ws_dir.mkdir()
    sandbox = Sandbox.resolve(_settings(backend, given, audit=audit))
    with Workspace(ws_dir) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run(["/bin/sh", "-c", ATTACK, "sh", str(given)], timeout=60)
    assert r.denials is not None
    records = [f"{d.what} {d.detail}" for d in r.denials.records if d.layer == "protected_paths"]
    return other, r.stdout_text, records


def _unchanged(other: Path) -> None:
    assert (other / ".bashrc").read_text() == "# rc\n"
    assert (other / ".git" / "config").read_text() == "[core]\n"
    assert not (other / ".git" / "hooks" / "pre-commit").exists()
    assert not (other / ".envrc").exists()


@pytest.mark.parametrize("via_link", [False, True])
def test_bwrap_binds_the_protected_paths_of_an_extra_root(tmp_path: Path, via_link: bool) -> None:
    require_bwrap()
    other, out, records = _run(tmp_path, "bwrap", audit=False, via_link=via_link)
    assert "plain: planted" in out  # positive control: the path is writable
    assert (other / "plain.txt").read_text() == "planted\n"
    # existing ones read-only even without the audit; only the new .envrc got through
    assert (other / ".bashrc").read_text() == "# rc\n"
    assert (other / ".git" / "config").read_text() == "[core]\n"
    assert not (other / ".git" / "hooks" / "pre-commit").exists()
    assert records == []


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_the_audit_covers_an_extra_root(tmp_path: Path, backend: str) -> None:
    require_backend(backend)
    other, out, records = _run(tmp_path, backend, audit=True)
    assert "plain: planted" in out
    _unchanged(other)
    assert f"{other}/.envrc created, restored" in records
    if backend == "landlock":  # no binds there: the audit undoes each
        assert f"{other}/.bashrc modified, restored" in records
        assert f"{other}/.git/hooks/pre-commit created, restored" in records


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
@pytest.mark.parametrize("where", ["home", "root"])
def test_extra_root_covering_home_is_refused(
    tmp_path: Path, backend: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_backend(backend)
    home = tmp_path / "h" / "me"
    (home / "sub").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    extra = home.parent if where == "home" else Path("/")
    ws_dir = tmp_path / "ws"
    ws_dir.mkdir()
    with Workspace(ws_dir) as ws:
        with pytest.raises(SandboxUnavailableError) as ei:
            System(ws, sandbox=Sandbox.resolve(_settings(backend, extra)))
        assert ei.value.reason is SandboxReason.WORKSPACE_COVERS_HOME
        assert ei.value.layer == str(extra)
        # control: below $HOME is fine, and the flag admits it
        System(ws, sandbox=Sandbox.resolve(_settings(backend, home / "sub"))).close()
        allowed = _settings(backend, extra, allow_home_workspace=True)
        System(ws, sandbox=Sandbox.resolve(allowed)).close()
