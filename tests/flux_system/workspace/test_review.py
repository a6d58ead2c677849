"""Regressions found by the second (adversarial) review of the Workspace (decision 0014).

Each test is named after what it reproduces; all run on both resolvers, on real files.
"""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import os
import stat
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from flux_system import (
    ConfinementReason,
    NamedRoot,
    NotFoundError,
    PathEscapeError,
    Workspace,
    WorkspaceError,
    WorkspaceReason,
)
from tests.flux_system.workspace._ws_support import in_child, outside, resolver, root, ws  # noqa: F401

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


# --- modes, umask, setuid, hard links --------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_copy_to_new_file_honours_umask(root: Path, resolver: str) -> None:
    (root / "src").write_bytes(b"s")
    os.chmod(root / "src", 0o666)
    (root / "link").symlink_to("t")  # dangling: t does not exist yet

    def child() -> tuple[int, int, int]:
        os.umask(0o077)
        with Workspace(root, resolver=resolver) as w:
            w.copy("src", "new")
            w.copy("src", "link")  # written through the link: t is a new file too
            w.write_bytes("written", b"w")
        return _mode(root / "new"), _mode(root / "t"), _mode(root / "written")

    assert in_child(child) == (0o600, 0o600, 0o600)
    assert os.readlink(root / "link") == "t"


def test_replace_keeps_mode_regardless_of_umask(root: Path, resolver: str) -> None:
    (root / "f").write_bytes(b"old")
    os.chmod(root / "f", 0o664)
    (root / "src").write_bytes(b"s")
    os.chmod(root / "src", 0o600)

    def child() -> tuple[int, int]:
        os.umask(0o077)
        with Workspace(root, resolver=resolver) as w:
            w.write_bytes("f", b"new")
            first = _mode(root / "f")
            w.copy("src", "f")
        return first, _mode(root / "f")

    assert in_child(child) == (0o664, 0o664)


def test_copy_drops_setuid_and_setgid(ws: Workspace, root: Path) -> None:
    (root / "src").write_bytes(b"#!/bin/true\n")
    os.chmod(root / "src", 0o6755)
    ws.copy("src", "dst")
    assert _mode(root / "dst") == 0o755


def test_copy_onto_hard_link_keeps_other_name(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "src").write_bytes(b"new")
    os.link(outside / "canary", root / "hl")
    ws.copy("src", "hl")
    assert (outside / "canary").read_bytes() == b"CANARY"
    assert (root / "hl").read_bytes() == b"new"
    assert os.stat(outside / "canary").st_nlink == 1


def test_rename_onto_hard_link_keeps_other_name(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "src").write_bytes(b"new")
    os.link(outside / "canary", root / "hl")
    ws.rename("src", "hl")
    assert (outside / "canary").read_bytes() == b"CANARY"
    ws.remove("hl")
    assert (outside / "canary").read_bytes() == b"CANARY"


# --- read_text --------------------------------------------------------------------------


def test_read_text_undecodable_bytes_is_typed(ws: Workspace, root: Path) -> None:
    (root / "bad").write_bytes(b"ok \xff\xfe")
    with pytest.raises(WorkspaceError) as info:
        ws.read_text("bad")
    assert (info.value.reason, info.value.path) == (WorkspaceReason.DECODE, "bad")
    assert ws.read_text("bad", errors="replace") == "ok \ufffd\ufffd"


def test_read_text_unknown_codec_refused_before_reading(ws: Workspace) -> None:
    with pytest.raises(LookupError):
        ws.read_text("missing", encoding="no-such-codec")
    with pytest.raises(LookupError):
        ws.read_text("missing", errors="no-such-handler")


def test_read_text_limit_inside_a_character(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes("aé".encode())  # 3 bytes
    assert ws.read_text("f", limit=3) == "aé"
    with pytest.raises(WorkspaceError) as info:
        ws.read_text("f", limit=2)
    assert info.value.reason is WorkspaceReason.TOO_LARGE


# --- parent creation --------------------------------------------------------------------


def test_create_parents_through_missing_dotdot_creates_nothing(ws: Workspace, root: Path) -> None:
    calls: list[Callable[[], None]] = [
        lambda: ws.mkdir("a/../b/c"),
        lambda: ws.write_bytes("x/y/../z/f", b"1"),
    ]
    for call in calls:
        with pytest.raises(NotFoundError):
            call()
    assert list(root.iterdir()) == []


def test_create_parents_under_existing_dotdot_and_dot(ws: Workspace, root: Path) -> None:
    (root / "a").mkdir()
    ws.mkdir("a/../b/./c")
    ws.write_bytes("a/./x//y/f", b"1")
    assert (root / "b" / "c").is_dir()
    assert (root / "a" / "x" / "y" / "f").read_bytes() == b"1"


def test_create_parents_below_deep_existing_prefix(ws: Workspace, root: Path) -> None:
    ws.mkdir("d/" * 1000)
    ws.write_bytes("d/" * 2000 + "f", b"deep")
    assert ws.read_bytes("d/" * 2000 + "f") == b"deep"
    ws.remove("d", recursive=True)  # as deep as it can create, it can remove
    assert list(root.iterdir()) == []


# --- spellings that look inside but are not ----------------------------------------------


def test_absolute_spellings_that_resolve_outside_are_escapes(
    root: Path, outside: Path, resolver: str, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    with Workspace(root, read_roots=[extra], named_roots={"x": extra}, resolver=resolver) as w:
        for path in (
            f"{root}/../outside/canary",
            f"{root}//../outside/canary",
            f"{root}/./../outside/canary",
            f"{extra}/../outside/canary",
            f"{extra}/../root/../outside/canary",
            "@x/../outside/canary",
        ):
            with pytest.raises(PathEscapeError) as info:
                w.read_bytes(path)
            assert info.value.reason is ConfinementReason.ESCAPE, path


def test_other_unicode_or_case_spelling_of_root_is_refused(tmp_path: Path, resolver: str) -> None:
    nfc = unicodedata.normalize("NFC", "rooté")
    real = tmp_path / nfc
    real.mkdir()
    (real / "f").write_bytes(b"F")
    with Workspace(real, resolver=resolver) as w:
        assert w.read_bytes(str(real / "f")) == b"F"
        for spelling in (unicodedata.normalize("NFD", nfc), nfc.upper()):
            with pytest.raises(PathEscapeError) as info:
                w.read_bytes(str(tmp_path / spelling / "f"))
            assert info.value.reason is ConfinementReason.ABSOLUTE_PATH


def test_named_root_itself_cannot_be_removed(tmp_path: Path, root: Path, resolver: str) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "keep").write_bytes(b"k")
    named = {"rw": NamedRoot(extra, writable=True)}
    with Workspace(root, named_roots=named, resolver=resolver) as w:
        for path in ("@rw", "@rw/", "@rw/.", f"{extra}", f"{extra}/"):
            with pytest.raises(WorkspaceError) as info:
                w.remove(path, recursive=True)
            assert info.value.reason is WorkspaceReason.BAD_NAME, path
        with pytest.raises(PathEscapeError):
            w.remove("@rw/..", recursive=True)
    assert (extra / "keep").read_bytes() == b"k"


def test_literal_at_name_dir_is_not_the_named_root(ws: Workspace, root: Path) -> None:
    (root / "@lib").mkdir()
    (root / "@lib" / "f").write_bytes(b"literal")
    assert ws.read_bytes("./@lib/f") == b"literal"
    assert ws.read_bytes(str(root / "@lib" / "f")) == b"literal"
    with pytest.raises(PathEscapeError) as info:
        ws.read_bytes("@lib/f")
    assert info.value.reason is ConfinementReason.UNKNOWN_ROOT


def test_max_length_names_replace_atomically(ws: Workspace, root: Path) -> None:
    name = "é" * 127 + "x"  # 255 bytes: the temp name must still fit NAME_MAX
    ws.write_bytes(name, b"1")
    ws.write_bytes(name, b"2")
    ws.copy(name, name[:-1] + "y")
    assert sorted(p.name for p in root.iterdir()) == [name, name[:-1] + "y"]
    assert (root / name).read_bytes() == b"2"


# --- trailing slashes -------------------------------------------------------------------


def _slash_ops(ws: Workspace) -> dict[str, Callable[[str], object]]:
    return {
        "read_bytes": ws.read_bytes,
        "append_bytes": lambda p: ws.append_bytes(p, b"+"),
        "write_bytes": lambda p: ws.write_bytes(p, b"w"),
        "mkdir": ws.mkdir,
        "remove": ws.remove,
        "remove_recursive": lambda p: ws.remove(p, recursive=True),
        "rename_from": lambda p: ws.rename(p, "moved"),
        "rename_to": lambda p: ws.rename("src", p),
        "stat": ws.stat,
        "copy_from": lambda p: ws.copy(p, "copied"),
        "copy_to": lambda p: ws.copy("src", p),
        "chmod": lambda p: ws.chmod(p, 0o644),
        "symlink": lambda p: ws.symlink("src", p),
        "list_dir": ws.list_dir,
        "walk": ws.walk,
    }


def test_trailing_slash_on_file_or_escaping_link_is_refused_by_every_op(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "f").write_bytes(b"F")
    (root / "src").write_bytes(b"S")
    (root / "lf").symlink_to("f")
    (root / "out").symlink_to("../outside")
    for name, call in _slash_ops(ws).items():
        for path in ("f/", "lf/"):
            with pytest.raises(WorkspaceError) as info:
                call(path)
            assert info.value.reason is WorkspaceReason.NOT_A_DIRECTORY, (name, path)
        with pytest.raises(PathEscapeError) as escape:
            call("out/")
        assert escape.value.reason is ConfinementReason.ESCAPE, name
    assert not ws.exists("f/")
    assert sorted(p.name for p in root.iterdir()) == ["f", "lf", "out", "src"]
    assert (root / "f").read_bytes() == b"F"
    assert sorted(p.name for p in outside.iterdir()) == ["canary"]
