"""The protected-path audit in real sandboxed runs (``SandboxSettings(audit=True)``).

Under bubblewrap, existing protected paths are read-only and their parents pinned, so
what remains for the audit is what did not exist; on the Landlock-only backend there
are no mounts and the audit is the whole cover — the rename attack succeeds inside
and is undone afterwards. Each attack prints what it did (the positive control).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux_system import ProcessTimeoutError, System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from tests.flux_system.sandbox._support import (
    require_bwrap,
    require_landlock,
    require_unprivileged,
    run_unprivileged,
    world_dir,
)

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
    assert (str(root / ".git"), "replaced, the original found at .git-old, restored") in found
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


UNPRIVILEGED_AUDIT = r"""
import json, os, tempfile
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings

base = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
out = {"uid": os.geteuid()}
attack = %r
for name, settings in [
    ("bwrap", SandboxSettings(mode="require", profile="default", audit=True)),
    ("landlock", SandboxSettings(mode="on", backend="landlock", audit=True)),
]:
    root = tempfile.mkdtemp(dir=base)
    os.makedirs(os.path.join(root, ".git", "hooks"))
    with open(os.path.join(root, ".git", "hooks", "pre-commit"), "wb") as fh:
        fh.write(b"#!/bin/sh\necho original\n")
    with Workspace(root) as ws, System(ws, sandbox=Sandbox.resolve(settings)) as system:
        r = system.run(["/bin/sh", "-c", attack], timeout=60)
    out[name] = {
        "stdout": r.stdout_text.split(),
        "records": sorted(
            [d.what[len(root) + 1:], d.detail]
            for d in r.denials.records if d.layer == "protected_paths"
        ),
        "left": sorted(os.listdir(root)),
        "hook": open(os.path.join(root, ".git", "hooks", "pre-commit")).read(),
    }
print(json.dumps(out))
"""


def test_audit_as_an_unprivileged_user() -> None:
    require_unprivileged()
    require_bwrap()
    require_landlock(6)
    attack = (
        "echo x > .envrc; chmod 000 .git/hooks 2>/dev/null; "
        "{ mv .git .git-old && mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit "
        "&& echo renamed || echo rename-refused; }; cat .envrc"
    )
    base = world_dir("flux-audit-unpriv-")
    try:
        got = run_unprivileged(UNPRIVILEGED_AUDIT % attack, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert got["uid"] == 65534
    bwrap, landlock = got["bwrap"], got["landlock"]
    assert isinstance(bwrap, dict) and isinstance(landlock, dict)
    assert bwrap["stdout"] == ["rename-refused", "x"]  # positive control: .envrc written
    assert bwrap["records"] == [[".envrc", "created, restored"]]
    assert landlock["stdout"] == ["renamed", "x"]  # no mount: the rename happened
    assert [".git", "replaced, the original found at .git-old, restored"] in landlock["records"]
    assert [".envrc", "created, restored"] in landlock["records"]
    for got_one in (bwrap, landlock):
        assert got_one["left"] == [".git"]
        assert got_one["hook"] == "#!/bin/sh\necho original\n"


UNPRIVILEGED_LATE = r"""
import json, os, tempfile, time
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings

base = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
root = tempfile.mkdtemp(dir=base)
hook = os.path.join(root, ".git", "hooks", "pre-commit")
os.makedirs(os.path.dirname(hook))
with open(hook, "w") as fh:
    fh.write("original\n")
sandbox = Sandbox.resolve(SandboxSettings(mode="on", backend="landlock", audit=True))
# The daemon says when it has its own session; the command waits for that (else the
# tree kill may catch it still in the command's process group), then ends.
late = "echo > detached; sleep 1; echo evil > .git/hooks/pre-commit; echo done > late-done"
command = (
    f"setsid /bin/sh -c '{late}' </dev/null >/dev/null 2>&1 & "
    "while [ ! -e detached ]; do sleep 0.05; done; rm detached; echo started"
)
with Workspace(root) as ws, System(ws, sandbox=sandbox) as system:
    r = system.run(["/bin/sh", "-c", command], timeout=60)
for _ in range(100):  # the survivor acts after the run (and its audit) returned
    if os.path.exists(os.path.join(root, "late-done")):
        break
    time.sleep(0.1)
report = {g.name: [g.enforced, g.reason] for g in sandbox.report().guarantees}
print(json.dumps({
    "stdout": r.stdout_text.split(),
    "records": [d.what for d in r.denials.records if d.layer == "protected_paths"],
    "hook": open(hook).read(),
    "process_tree": report["process_tree"],
    "protected_paths": report["protected_paths"],
}))
"""


def test_landlock_unprivileged_declares_changes_after_the_audit() -> None:
    """Landlock-only, unprivileged, no pids cgroup: a daemon outlives the run and
    rewrites a hook after the audit restored it. The report must say so (it cannot be
    stopped there: no pid namespace, no cgroup to find the daemon by)."""
    require_unprivileged()
    require_landlock(6)
    base = world_dir("flux-audit-late-")
    try:
        got = run_unprivileged(UNPRIVILEGED_LATE, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert got["stdout"] == ["started"]
    assert got["records"] == []  # nothing changed while the run lasted
    assert got["hook"] == "evil\n"  # positive control: the survivor changed it later
    tree, protected = got["process_tree"], got["protected_paths"]
    assert isinstance(tree, list) and isinstance(protected, list)
    assert tree[0] is False
    assert protected[0] is False
    assert "outlives the run changes after the audit" in str(protected[1])
