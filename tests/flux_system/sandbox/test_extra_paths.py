"""Extra paths inside a writable root: a link planted by one run is not followed by the next.

``SandboxSettings(read_only=(ws/data,))`` (``flux exec --ro ws/data``): a first run
replaces ``data`` (or its parent) with a symlink to a host directory holding a secret;
the next ``System`` bound or granted the path by name, so it was shown the secret (and,
for ``read_write``, could write there). Found working on the Landlock-only backend:
the second run printed the secret. Now the confinement is refused, naming the path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux_system import SandboxUnavailableError, System, Workspace
from flux_system._exceptions import SandboxReason
from flux_system.sandbox import Sandbox, SandboxSettings
from tests.flux_system.sandbox._support import require_bwrap, require_landlock, sh

SECRET = "TOPSECRET-extra-path"


def _sandbox(backend: str, kind: str, extra: Path) -> Sandbox:
    if backend == "bwrap":
        require_bwrap()
    else:
        require_landlock()
    ro = (str(extra),) if kind == "ro" else ()
    rw = (str(extra),) if kind == "rw" else ()
    return Sandbox.resolve(
        SandboxSettings(
            mode="require" if backend == "bwrap" else "on",
            profile="default",
            backend="bwrap" if backend == "bwrap" else "landlock",
            read_only=ro,
            read_write=rw,
        )
    )


@pytest.mark.parametrize("kind", ["ro", "rw"])
@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
@pytest.mark.parametrize("swap", ["path", "parent"])
def test_planted_symlink_in_an_extra_path_is_refused(
    tmp_path: Path, backend: str, kind: str, swap: str
) -> None:
    secret = tmp_path / "secret" / "data"
    secret.mkdir(parents=True)
    (secret / "key").write_text(SECRET)
    ws = tmp_path / "ws"
    (ws / "sub" / "data").mkdir(parents=True)
    extra = ws / "sub" / "data"
    sandbox = _sandbox(backend, kind, extra)
    plant = (
        f"rm -rf sub/data && ln -s {secret} sub/data"
        if swap == "path"
        else f"mv sub sub-old && ln -s {secret.parent} sub"
    )
    with Workspace(ws) as workspace:
        with System(workspace, sandbox=sandbox) as system:
            code, _, err = sh(system, f"{plant} && echo planted")
        if swap == "path" and backend == "bwrap":
            assert code != 0, err  # a mount point inside: it cannot be replaced there
            return
        assert extra.is_symlink() or (ws / "sub").is_symlink()  # positive control
        assert (extra / "key").read_text() == SECRET  # the name now leads to the secret
        with pytest.raises(SandboxUnavailableError) as info:
            System(workspace, sandbox=sandbox)
    assert info.value.reason is SandboxReason.EXTRA_PATH_UNSAFE
    assert info.value.layer == str(extra)
    assert "symlink" in str(info.value)


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_extra_path_inside_the_workspace_without_links_works(tmp_path: Path, backend: str) -> None:
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "f").write_text("fine\n")
    sandbox = _sandbox(backend, "ro", ws / "data")
    with Workspace(ws) as workspace, System(workspace, sandbox=sandbox) as system:
        code, out, err = sh(system, "cat data/f")
    assert (code, out) == (0, "fine\n"), err


def test_a_link_above_the_writable_tree_is_the_users_own(tmp_path: Path) -> None:
    """A symlink in the part of the path the sandbox cannot write is followed as given."""
    require_landlock()
    real = tmp_path / "real"
    (real / "ws" / "data").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(real)
    sandbox = _sandbox("landlock", "ro", tmp_path / "alias" / "ws" / "data")
    with Workspace(real / "ws") as workspace, System(workspace, sandbox=sandbox) as system:
        code, _, err = sh(system, "ls data")
    assert code == 0, err
