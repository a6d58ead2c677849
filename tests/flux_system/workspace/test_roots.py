"""Named roots, read roots, absolute arguments and the unconfined hatch, on both resolvers."""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from flux_system import (
    ConfinementReason,
    NamedRoot,
    PathEscapeError,
    Workspace,
    WorkspaceError,
    WorkspaceReason,
)
from tests.flux_system.workspace._ws_support import outside, resolver, root  # noqa: F401


@pytest.fixture
def extra(tmp_path: Path) -> Path:
    d = tmp_path / "extra"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "f").write_bytes(b"extra")
    return d


def test_named_root_is_read_only_by_default(root: Path, extra: Path, resolver: str) -> None:
    with Workspace(root, named_roots={"lib": extra}, resolver=resolver) as ws:
        assert ws.read_bytes("@lib/sub/f") == b"extra"
        assert ws.list_dir("@lib") == ["sub"]
        assert ws.walk("@lib") == ["@lib/sub", "@lib/sub/f"]
        with pytest.raises(WorkspaceError) as info:
            ws.write_bytes("@lib/new", b"x")
        assert info.value.reason is WorkspaceReason.READ_ONLY
        calls: list[Callable[[], object]] = [
            lambda: ws.remove("@lib/sub", recursive=True),
            lambda: ws.append_bytes("@lib/sub/f", b"x"),
            lambda: ws.chmod("@lib/sub/f", 0o600),
            lambda: ws.mkdir("@lib/d"),
        ]
        for call in calls:
            with pytest.raises(WorkspaceError) as info:
                call()
            assert info.value.reason is WorkspaceReason.READ_ONLY
    assert sorted(p.name for p in extra.rglob("*")) == ["f", "sub"]


def test_named_root_writable_when_declared(root: Path, extra: Path, resolver: str) -> None:
    named = {"out": NamedRoot(extra, writable=True)}
    with Workspace(root, named_roots=named, resolver=resolver) as ws:
        ws.write_bytes("@out/new/file", b"n")
        ws.rename("@out/new/file", "@out/moved")
        assert (extra / "moved").read_bytes() == b"n"
        with pytest.raises(WorkspaceError) as info:
            ws.rename("@out/moved", "here")
        assert info.value.reason is WorkspaceReason.CROSS_ROOT
        ws.copy("@out/moved", "here")  # copy across roots is allowed
        assert (root / "here").read_bytes() == b"n"


def test_named_root_is_confined(root: Path, extra: Path, outside: Path, resolver: str) -> None:
    os.symlink("../outside/canary", extra / "up")
    with Workspace(root, named_roots={"lib": extra}, resolver=resolver) as ws:
        for path in ("@lib/../outside/canary", "@lib/up", "@lib//../x"):
            with pytest.raises(PathEscapeError) as info:
                ws.read_bytes(path)
            assert info.value.reason is ConfinementReason.ESCAPE


def test_unknown_named_root(root: Path, resolver: str) -> None:
    with Workspace(root, resolver=resolver) as ws:
        with pytest.raises(PathEscapeError) as info:
            ws.read_bytes("@nope/x")
        assert info.value.reason is ConfinementReason.UNKNOWN_ROOT
        (root / "@literal").write_bytes(b"at")
        assert ws.read_bytes("./@literal") == b"at"


def test_bad_named_root_names(root: Path, extra: Path) -> None:
    for name in ("", "a/b", "x\n"):
        with pytest.raises(ValueError):
            Workspace(root, named_roots={name: extra})


def test_read_roots_by_absolute_path(root: Path, extra: Path, resolver: str) -> None:
    with Workspace(root, read_roots=[extra], resolver=resolver) as ws:
        assert ws.read_bytes(str(extra / "sub" / "f")) == b"extra"
        assert ws.exists(extra / "sub")
        with pytest.raises(WorkspaceError) as info:
            ws.write_bytes(str(extra / "new"), b"x")
        assert info.value.reason is WorkspaceReason.READ_ONLY
        with pytest.raises(PathEscapeError) as escape:
            ws.read_bytes(str(extra / ".." / "root" / "x"))
        assert escape.value.reason is ConfinementReason.ESCAPE
    assert not (extra / "new").exists()


def test_absolute_paths(root: Path, outside: Path, resolver: str) -> None:
    (root / "f").write_bytes(b"in")
    with Workspace(root, resolver=resolver) as ws:
        assert ws.read_bytes(str(root / "f")) == b"in"
        assert ws.read_bytes(f"{root}//./f") == b"in"
        ws.write_bytes(str(root / "g"), b"g")
        assert (root / "g").read_bytes() == b"g"
        for path in (str(outside / "canary"), "/etc/passwd", str(root) + "-evil/x"):
            with pytest.raises(PathEscapeError) as info:
                ws.read_bytes(path)
            assert info.value.reason is ConfinementReason.ABSOLUTE_PATH
        with pytest.raises(PathEscapeError) as info:
            ws.read_bytes(f"{root}/../outside/canary")
        assert info.value.reason is ConfinementReason.ESCAPE


def test_absolute_path_through_symlinked_root(tmp_path: Path, resolver: str) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_bytes(b"r")
    os.symlink(real, tmp_path / "alias")
    with Workspace(tmp_path / "alias", resolver=resolver) as ws:
        assert ws.read_bytes(str(tmp_path / "alias" / "f")) == b"r"
        assert ws.read_bytes(str(real / "f")) == b"r"


def test_most_specific_root_wins(root: Path, resolver: str) -> None:
    inner = root / "vendor"
    inner.mkdir()
    with Workspace(root, read_roots=[inner], resolver=resolver) as ws:
        ws.write_bytes("vendor/a", b"relative paths use the main root")
        with pytest.raises(WorkspaceError) as info:
            ws.write_bytes(str(inner / "b"), b"x")
        assert info.value.reason is WorkspaceReason.READ_ONLY


def test_unconfined_hatch(root: Path, outside: Path, resolver: str) -> None:
    os.symlink(str(outside), root / "out")
    with Workspace(root, resolver=resolver) as ws:
        with pytest.raises(PathEscapeError):
            ws.read_bytes("out/canary")
    with Workspace(root, unconfined=True, resolver=resolver) as ws:
        assert ws.unconfined
        assert ws.read_bytes("out/canary") == b"CANARY"
        assert ws.read_bytes("../outside/canary") == b"CANARY"
        assert ws.read_bytes(str(outside / "canary")) == b"CANARY"
        ws.write_bytes(str(outside / "new"), b"n")  # no confinement: that is the point
    assert (outside / "new").read_bytes() == b"n"


def test_unconfined_still_validates(root: Path, resolver: str) -> None:
    with Workspace(root, unconfined=True, resolver=resolver) as ws:
        with pytest.raises(ValueError):
            ws.read_bytes("a\x00b")
        os.mkfifo(root / "fifo")
        with pytest.raises(WorkspaceError) as info:
            ws.read_bytes("fifo")
        assert info.value.reason is WorkspaceReason.SPECIAL_FILE


def test_walk_names_under_an_at_directory_address_the_same_file(
    root: Path, extra: Path, resolver: str
) -> None:
    """A directory literally named ``@data`` in the main root (planted by a child):
    ``walk(".")`` must spell it ``./@data/...``; fed back, ``@data/...`` would read —
    or remove — the named root ``data`` instead."""
    (extra / "important.txt").write_bytes(b"named root: keep")
    (root / "@data").mkdir()
    (root / "@data" / "important.txt").write_bytes(b"planted")
    (root / "@data" / "sub").mkdir()
    (root / "plain").write_bytes(b"p")
    named = {"data": NamedRoot(extra, writable=True)}
    with Workspace(root, named_roots=named, resolver=resolver) as ws:
        listed = ws.walk(".")
        assert listed == [
            "./@data",
            "./@data/important.txt",
            "./@data/sub",
            "plain",
        ]
        assert ws.walk("./") == listed
        assert ws.read_bytes(listed[1]) == b"planted"
        assert ws.list_dir(".") == ["@data", "plain"]  # names, joined by the caller
        assert ws.walk("./@data") == ["./@data/important.txt", "./@data/sub"]
        assert ws.walk("@data") == ["@data/important.txt", "@data/sub", "@data/sub/f"]
        for path in listed[::-1]:
            ws.remove(path)
        assert ws.list_dir(".") == []
    assert (extra / "important.txt").read_bytes() == b"named root: keep"
    assert (extra / "sub").is_dir()
