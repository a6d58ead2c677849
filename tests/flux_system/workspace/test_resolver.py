"""The two resolvers agree: symlink budget, magic links, `..` semantics, error reasons."""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux_system import ConfinementReason, PathEscapeError, Workspace, WorkspaceError
from flux_system.workspace._resolve import _MAX_SYMLINKS, openat2_available
from tests._capabilities import require
from tests.flux_system.workspace._ws_support import outside, resolver, root, ws  # noqa: F401


def _chain(root: Path, length: int) -> str:
    (root / "t").write_bytes(b"T")
    prev = "t"
    for i in range(length):
        os.symlink(prev, root / f"l{i}")
        prev = f"l{i}"
    return prev


def test_symlink_budget_matches_the_kernel(ws: Workspace, root: Path) -> None:
    last = _chain(root, _MAX_SYMLINKS + 1)
    assert ws.read_bytes(f"l{_MAX_SYMLINKS - 1}") == b"T"  # exactly 40 links: allowed
    with pytest.raises(PathEscapeError) as info:
        ws.read_bytes(last)  # 41 links
    assert info.value.reason is ConfinementReason.SYMLINK_LOOP


def test_symlink_loop(ws: Workspace, root: Path) -> None:
    os.symlink("b", root / "a")
    os.symlink("a", root / "b")
    os.symlink("self/x", root / "self")
    for path in ("a", "self/y"):
        with pytest.raises(PathEscapeError) as info:
            ws.read_bytes(path)
        assert info.value.reason is ConfinementReason.SYMLINK_LOOP


def test_dotdot_never_above_root_even_transiently(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"f")
    name = root.name
    with pytest.raises(PathEscapeError) as info:
        ws.read_bytes(f"../{name}/f")
    assert info.value.reason is ConfinementReason.ESCAPE
    (root / "a").mkdir()
    assert ws.read_bytes("a/../f") == b"f"
    with pytest.raises(PathEscapeError) as info:
        ws.read_bytes(f"a/../../{name}/f")
    assert info.value.reason is ConfinementReason.ESCAPE


def test_dotdot_is_physical_after_symlink(ws: Workspace, root: Path) -> None:
    (root / "b" / "c").mkdir(parents=True)
    (root / "b" / "target").write_bytes(b"physical")
    (root / "target").write_bytes(b"lexical")
    os.symlink("b/c", root / "a")
    assert ws.read_bytes("a/../target") == b"physical"


def test_absolute_symlink_refused_even_inside(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"f")
    os.symlink(str(root / "f"), root / "abs")
    with pytest.raises(PathEscapeError) as info:
        ws.read_bytes("abs")
    assert info.value.reason is ConfinementReason.ABSOLUTE_SYMLINK


def test_dangling_symlink_out_on_create(ws: Workspace, root: Path, outside: Path) -> None:
    os.symlink("../outside/new", root / "dangling")
    with pytest.raises(PathEscapeError):
        ws.append_bytes("dangling", b"x")
    assert not (outside / "new").exists()
    with pytest.raises(PathEscapeError):
        ws.write_bytes("dangling", b"x")  # followed beneath the root: refused (DESIGN §2.2)
    with pytest.raises(PathEscapeError):
        ws.copy("dangling", "dangling")
    assert not (outside / "new").exists()
    assert os.readlink(root / "dangling") == "../outside/new"  # the link is kept


@pytest.mark.parametrize("path", ["root/etc/passwd", "cwd/x", "fd/0", "exe"])
def test_magic_links_refused(resolver: str, path: str) -> None:
    with Workspace("/proc/self", resolver=resolver) as ws:
        with pytest.raises(PathEscapeError) as info:
            ws.read_bytes(path, limit=1 << 16)
        assert info.value.reason is ConfinementReason.MAGIC_LINK
        assert ws.read_bytes("status", limit=1 << 16).startswith(b"Name:")


def test_plain_proc_symlinks_are_followed(resolver: str) -> None:
    with Workspace("/proc", resolver=resolver) as ws:
        assert ws.read_bytes("self/status", limit=1 << 16).startswith(b"Name:")


def test_forcing_openat2(root: Path) -> None:
    require(openat2_available(), "openat2(2) (Linux >= 5.6)")
    with Workspace(root, resolver="openat2") as ws:
        assert ws.resolver == "openat2"


def test_operations_after_fd_exhaustion_fail_typed(root: Path, resolver: str) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ws = Workspace(root, resolver=resolver)
    (root / "f").write_bytes(b"")
    held: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        while True:
            try:
                held.append(os.open("/", os.O_PATH))
            except OSError:
                break
        with pytest.raises(WorkspaceError):
            ws.read_bytes("f")
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        ws.close()
