"""The ``unconfined=True`` hatch means what it says: absolute paths act on the host path.

Regression for a parent split that turned a one-component absolute path (``/x``) into
``.`` (the root itself), and a parent creation that made ``/a/b`` into ``a/b`` beneath
the root: both acted on ``<root>/x`` instead of ``/x``. The "absolute" targets here are
temporary directories outside the root; the one-component case runs in a forked child
chrooted into a temporary directory, so no real system path is ever touched.
"""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from flux_system import Workspace, WorkspaceError, WorkspaceReason
from tests._capabilities import require
from tests.flux_system.workspace._ws_support import in_child, outside, resolver, root  # noqa: F401


def _tree(top: Path) -> list[str]:
    return sorted(str(p.relative_to(top)) for p in top.rglob("*"))


def test_multi_component_absolute_paths_act_on_the_host_path(
    root: Path, outside: Path, resolver: str
) -> None:
    with Workspace(root, unconfined=True, resolver=resolver) as ws:
        ws.mkdir(str(outside / "made" / "deep"))  # two missing levels: parents created
        ws.write_bytes(str(outside / "new" / "sub" / "file"), b"written")
        ws.write_bytes(str(outside / "top"), b"top")  # existing parent
        ws.append_bytes(str(outside / "top"), b"+")
        ws.copy(str(outside / "top"), str(outside / "copied" / "again"))
        ws.rename(str(outside / "top"), str(outside / "renamed"))
        ws.remove(str(outside / "made" / "deep"))
        assert ws.read_bytes(str(outside / "renamed")) == b"top+"
    assert (outside / "new" / "sub" / "file").read_bytes() == b"written"
    assert (outside / "copied" / "again").read_bytes() == b"top+"
    assert (outside / "made").is_dir() and not (outside / "made" / "deep").exists()
    assert _tree(root) == []  # nothing landed beneath the root


def test_one_component_absolute_paths_act_on_the_host_path(tmp_path: Path, resolver: str) -> None:
    """``/x`` under a chroot into *tmp_path*: it must be tmp_path/x, never <root>/x."""
    require(os.geteuid() == 0, "root (chroot(2) in a forked child)")
    host = tmp_path / "host"
    root = host / "ws"
    root.mkdir(parents=True)

    def child() -> object:
        with Workspace(root, unconfined=True, resolver=resolver) as ws:
            os.chroot(host)
            os.chdir("/")
            ws.mkdir("/made")
            ws.write_bytes("/file", b"one")
            ws.append_bytes("/file", b"+")
            ws.copy("/file", "/copy")
            ws.rename("/copy", "/moved")
            ws.write_bytes("/gone", b"x")
            ws.remove("/gone")
            ws.mkdir("/", exist_ok=True)  # the all-slash split: "/" itself exists
            outcomes: list[object] = []
            calls: list[Callable[[], object]] = [
                lambda: ws.remove("/"),
                lambda: ws.write_bytes("///", b"x"),
            ]
            for call in calls:
                try:
                    call()
                except WorkspaceError as exc:
                    outcomes.append(exc.reason)
            return outcomes, ws.read_bytes("/moved"), sorted(ws.list_dir("/"))

    result = in_child(child)
    assert not isinstance(result, BaseException), result
    assert isinstance(result, tuple)
    outcomes, moved, listing = result
    assert outcomes == [WorkspaceReason.BAD_NAME, WorkspaceReason.BAD_NAME]  # no final name
    assert moved == b"one+"
    assert listing == ["file", "made", "moved", "ws"]
    assert (host / "file").read_bytes() == b"one+"
    assert (host / "made").is_dir()
    assert _tree(root) == []  # nothing landed beneath the root


@pytest.mark.parametrize("spelling", ["{out}/x", "{out}//x", "{out}/./x"])
def test_absolute_spellings_outside_every_root_still_refused_when_confined(
    root: Path, outside: Path, resolver: str, spelling: str
) -> None:
    """Control: without the hatch the same calls are refused and create nothing."""
    from flux_system import ConfinementReason, PathEscapeError

    path = spelling.format(out=outside)
    with Workspace(root, resolver=resolver) as ws:
        calls: list[Callable[[], object]] = [
            lambda: ws.mkdir(path),
            lambda: ws.write_bytes(path, b"x"),
        ]
        for call in calls:
            with pytest.raises(PathEscapeError) as info:
                call()
            assert info.value.reason is ConfinementReason.ABSOLUTE_PATH
    assert sorted(os.listdir(outside)) == ["canary"]
    assert _tree(root) == []


def test_symlink_under_the_hatch_is_created_where_and_as_asked(
    root: Path, outside: Path, resolver: str
) -> None:
    """Confinement checks on a link's target are confinement: the hatch drops them
    (the target is still validated as text)."""
    from flux_system import ConfinementReason, InvalidPathError

    with Workspace(root, unconfined=True, resolver=resolver) as ws:
        ws.symlink("canary", str(outside / "rel"))  # a link outside the root
        ws.symlink(str(outside / "canary"), "abs")  # an absolute target
        ws.symlink("../outside/canary", "up")  # a target above the root
        assert ws.read_bytes("abs") == ws.read_bytes("up") == b"CANARY"
        with pytest.raises(InvalidPathError) as info:
            ws.symlink("evil\nname", "bad")
        assert info.value.reason is ConfinementReason.CONTROL_BYTE
    assert os.readlink(outside / "rel") == "canary"
    assert os.readlink(root / "abs") == str(outside / "canary")
    assert sorted(os.listdir(root)) == ["abs", "up"]
