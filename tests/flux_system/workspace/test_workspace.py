"""Behaviour of each Workspace operation, on both resolvers (real files, no mocks)."""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from flux_system import (
    ConfinementReason,
    FileKind,
    InvalidPathError,
    NotFoundError,
    PathEscapeError,
    Workspace,
    WorkspaceError,
    WorkspaceReason,
)
from tests.flux_system.workspace._ws_support import outside, resolver, root, ws  # noqa: F401

# --- construction ----------------------------------------------------------------------


def test_active_resolver_and_root(root: Path, resolver: str) -> None:
    with Workspace(root, resolver=resolver) as w:
        assert w.resolver == resolver
        assert w.root == root
        assert not w.unconfined


def test_auto_resolver_picks_a_real_one(root: Path) -> None:
    with Workspace(root) as w:
        assert w.resolver in ("openat2", "walk")


def test_bad_constructor_arguments(root: Path) -> None:
    with pytest.raises(ValueError):
        Workspace(root, resolver="fast")
    with pytest.raises(TypeError):
        Workspace(root, unconfined=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Workspace(b"/tmp")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Workspace(root, read_roots=str(root))
    with pytest.raises(NotFoundError):
        Workspace(root / "missing")


# --- reads -----------------------------------------------------------------------------


def test_read_bytes_and_text(ws: Workspace, root: Path) -> None:
    (root / "a").mkdir()
    (root / "a" / "f.txt").write_bytes("héllo\n".encode())
    assert ws.read_bytes("a/f.txt") == "héllo\n".encode()
    assert ws.read_text("a/f.txt") == "héllo\n"
    assert ws.read_bytes(root / "a" / "f.txt") == "héllo\n".encode()
    assert ws.read_bytes("./a/../a/f.txt") == "héllo\n".encode()


def test_read_empty_and_large_file(ws: Workspace, root: Path) -> None:
    (root / "empty").write_bytes(b"")
    big = os.urandom(300_000)
    (root / "big").write_bytes(big)
    assert ws.read_bytes("empty") == b""
    assert ws.read_bytes("big") == big


def test_read_limit(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"x" * 100)
    assert ws.read_bytes("f", limit=100) == b"x" * 100
    with pytest.raises(WorkspaceError) as info:
        ws.read_bytes("f", limit=99)
    assert info.value.reason is WorkspaceReason.TOO_LARGE
    with pytest.raises(ValueError):
        ws.read_bytes("f", limit=-1)
    with pytest.raises(TypeError):
        ws.read_bytes("f", limit="10")  # type: ignore[arg-type]


def test_read_through_symlink_beneath(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "f").write_bytes(b"data")
    os.symlink("d/f", root / "link")
    os.symlink("../d/f", root / "d" / "rel")
    assert ws.read_bytes("link") == b"data"
    assert ws.read_bytes("d/rel") == b"data"


def test_read_missing(ws: Workspace) -> None:
    with pytest.raises(NotFoundError) as info:
        ws.read_bytes("nope")
    assert info.value.reason is WorkspaceReason.NOT_FOUND
    assert info.value.path == "nope"


def test_read_directory_refused(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    with pytest.raises(WorkspaceError) as info:
        ws.read_bytes("d")
    assert info.value.reason is WorkspaceReason.IS_A_DIRECTORY


def test_read_fifo_refused_without_blocking(ws: Workspace, root: Path) -> None:
    os.mkfifo(root / "fifo")
    with pytest.raises(WorkspaceError) as info:
        ws.read_bytes("fifo")  # would block forever in a plain open()
    assert info.value.reason is WorkspaceReason.SPECIAL_FILE
    with pytest.raises(WorkspaceError) as info:
        ws.open_read("fifo")
    assert info.value.reason is WorkspaceReason.SPECIAL_FILE


def test_read_socket_and_device_refused(ws: Workspace, root: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "sock"))
        with pytest.raises(WorkspaceError) as info:
            ws.read_bytes("sock")
        assert info.value.reason in (WorkspaceReason.SPECIAL_FILE, WorkspaceReason.IO)
    os.mknod(root / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    with pytest.raises(WorkspaceError) as info:
        ws.read_bytes("null")
    assert info.value.reason is WorkspaceReason.SPECIAL_FILE


def test_open_read_streams(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"0123456789")
    with ws.open_read("f") as fh:
        assert fh.read(4) == b"0123"
        assert fh.read() == b"456789"


def test_open_read_keeps_inode_after_rename(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"first")
    with ws.open_read("f") as fh:
        (root / "f").rename(root / "g")
        (root / "f").write_bytes(b"second")
        assert fh.read() == b"first"


# --- writes ----------------------------------------------------------------------------


def test_write_creates_parents(ws: Workspace, root: Path) -> None:
    ws.write_bytes("x/y/z.txt", b"hi")
    assert (root / "x" / "y" / "z.txt").read_bytes() == b"hi"
    ws.write_bytes("x/y/z.txt", bytearray(b"again"))
    assert (root / "x" / "y" / "z.txt").read_bytes() == b"again"


def test_write_without_parents(ws: Workspace, root: Path) -> None:
    with pytest.raises(NotFoundError):
        ws.write_bytes("p/q", b"x", create_parents=False)
    assert not (root / "p").exists()


def test_write_rejects_non_bytes(ws: Workspace, root: Path) -> None:
    with pytest.raises(TypeError, match="data"):
        ws.write_bytes("f", "text")  # type: ignore[arg-type]
    assert list(root.iterdir()) == []


def test_write_leaves_no_temp_file(ws: Workspace, root: Path) -> None:
    ws.write_bytes("f", b"1")
    ws.write_bytes("f", b"2")
    assert sorted(p.name for p in root.iterdir()) == ["f"]


def test_write_keeps_mode(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"old")
    os.chmod(root / "f", 0o640)
    ws.write_bytes("f", b"new")
    assert stat.S_IMODE((root / "f").stat().st_mode) == 0o640


def test_write_drops_setuid(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"old")
    os.chmod(root / "f", 0o4755)
    ws.write_bytes("f", b"new")
    assert stat.S_IMODE((root / "f").stat().st_mode) == 0o755


def test_write_through_hard_link_replaces_name(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "f").write_bytes(b"shared")
    os.link(root / "f", outside / "other")
    ws.write_bytes("f", b"mine")
    assert (outside / "other").read_bytes() == b"shared"
    assert (root / "f").read_bytes() == b"mine"


def test_write_goes_through_a_final_symlink_and_keeps_it(ws: Workspace, root: Path) -> None:
    (root / "target").write_bytes(b"target")
    os.symlink("target", root / "link")
    ws.write_bytes("link", b"new")
    assert os.readlink(root / "link") == "target"
    assert (root / "target").read_bytes() == b"new"


def test_write_failure_leaves_nothing(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    with pytest.raises(WorkspaceError) as info:
        ws.write_bytes("d", b"x")
    assert info.value.reason is WorkspaceReason.IS_A_DIRECTORY
    assert sorted(p.name for p in root.iterdir()) == ["d"]
    assert list((root / "d").iterdir()) == []


def test_write_trailing_slash(ws: Workspace, root: Path) -> None:
    with pytest.raises(WorkspaceError) as info:
        ws.write_bytes("f/", b"x")
    assert info.value.reason is WorkspaceReason.IS_A_DIRECTORY
    assert list(root.iterdir()) == []


def test_write_bad_final_names(ws: Workspace) -> None:
    (ws.root / "a").mkdir()
    for name in (".", "a/..", "./."):
        with pytest.raises(WorkspaceError) as info:
            ws.write_bytes(name, b"x")
        assert info.value.reason is WorkspaceReason.BAD_NAME


def test_append(ws: Workspace, root: Path) -> None:
    ws.append_bytes("log", b"a")
    ws.append_bytes("log", memoryview(b"bc"))
    assert (root / "log").read_bytes() == b"abc"


def test_append_refuses_hard_link(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "f").write_bytes(b"shared")
    os.link(root / "f", outside / "other")
    with pytest.raises(WorkspaceError) as info:
        ws.append_bytes("f", b"!")
    assert info.value.reason is WorkspaceReason.HARD_LINK
    assert (outside / "other").read_bytes() == b"shared"


def test_append_refuses_fifo_without_blocking(ws: Workspace, root: Path) -> None:
    os.mkfifo(root / "fifo")
    with pytest.raises(WorkspaceError) as info:
        ws.append_bytes("fifo", b"x")
    assert info.value.reason is WorkspaceReason.SPECIAL_FILE


def test_append_follows_symlink_beneath(ws: Workspace, root: Path) -> None:
    (root / "t").write_bytes(b"1")
    os.symlink("t", root / "l")
    ws.append_bytes("l", b"2")
    assert (root / "t").read_bytes() == b"12"


# --- directories -----------------------------------------------------------------------


def test_mkdir(ws: Workspace, root: Path) -> None:
    ws.mkdir("a/b/c")
    assert (root / "a" / "b" / "c").is_dir()
    ws.mkdir("a/b/c")  # exist_ok by default
    with pytest.raises(WorkspaceError) as info:
        ws.mkdir("a/b/c", exist_ok=False)
    assert info.value.reason is WorkspaceReason.EXISTS
    with pytest.raises(NotFoundError):
        ws.mkdir("x/y", parents=False)
    (root / "file").write_bytes(b"")
    with pytest.raises(WorkspaceError) as info:
        ws.mkdir("file")
    assert info.value.reason is WorkspaceReason.EXISTS


def test_mkdir_root_itself(ws: Workspace) -> None:
    ws.mkdir(".")
    with pytest.raises(WorkspaceError) as info:
        ws.mkdir(".", exist_ok=False)
    assert info.value.reason is WorkspaceReason.EXISTS


def test_list_dir(ws: Workspace, root: Path) -> None:
    (root / "b").write_bytes(b"")
    (root / "a").mkdir()
    os.symlink("/etc", root / "c")
    assert ws.list_dir() == ["a", "b", "c"]
    assert ws.list_dir("a") == []
    with pytest.raises(WorkspaceError) as info:
        ws.list_dir("b")
    assert info.value.reason is WorkspaceReason.NOT_A_DIRECTORY


def test_walk_never_follows_symlinks(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "e" / "f").write_bytes(b"")
    (root / "top").write_bytes(b"")
    os.symlink(str(outside), root / "d" / "out")
    os.symlink("..", root / "d" / "up")
    assert ws.walk() == ["d", "d/e", "d/e/f", "d/out", "d/up", "top"]
    assert ws.walk("d/e") == ["d/e/f"]


def test_walk_max_entries(ws: Workspace, root: Path) -> None:
    for i in range(5):
        (root / f"f{i}").write_bytes(b"")
    assert len(ws.walk(max_entries=5)) == 5
    with pytest.raises(WorkspaceError) as info:
        ws.walk(max_entries=4)
    assert info.value.reason is WorkspaceReason.TOO_MANY_ENTRIES
    with pytest.raises(ValueError):
        ws.walk(max_entries=0)


# --- remove and rename -----------------------------------------------------------------


def test_remove_file_and_empty_dir(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"")
    (root / "d").mkdir()
    ws.remove("f")
    ws.remove("d")
    assert list(root.iterdir()) == []
    with pytest.raises(NotFoundError):
        ws.remove("f")


def test_remove_non_empty_needs_recursive(ws: Workspace, root: Path) -> None:
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "e" / "f").write_bytes(b"")
    with pytest.raises(WorkspaceError) as info:
        ws.remove("d")
    assert info.value.reason is WorkspaceReason.NOT_EMPTY
    ws.remove("d", recursive=True)
    assert list(root.iterdir()) == []


def test_remove_recursive_does_not_follow_symlinks(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "d").mkdir()
    os.symlink(str(outside), root / "d" / "abs")
    os.symlink("../../outside", root / "d" / "rel")
    ws.remove("d", recursive=True)
    assert not (root / "d").exists()
    assert (outside / "canary").read_bytes() == b"CANARY"


def test_remove_symlink_removes_link_only(ws: Workspace, root: Path, outside: Path) -> None:
    os.symlink(str(outside), root / "link")
    ws.remove("link")
    assert not os.path.lexists(root / "link")
    assert (outside / "canary").exists()
    os.symlink(str(outside), root / "link")
    ws.remove("link", recursive=True)
    assert (outside / "canary").exists()


def test_remove_root_refused(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    for name in (".", "./", "d/..", "d/../."):
        with pytest.raises(WorkspaceError) as info:
            ws.remove(name, recursive=True)
        assert info.value.reason is WorkspaceReason.BAD_NAME
    assert (root / "d").exists()
    (root / "f").write_bytes(b"")
    with pytest.raises(WorkspaceError) as info:
        ws.remove("f/..")
    assert info.value.reason is WorkspaceReason.NOT_A_DIRECTORY


def test_rename(ws: Workspace, root: Path) -> None:
    (root / "a").write_bytes(b"A")
    (root / "d").mkdir()
    ws.rename("a", "d/b")
    assert (root / "d" / "b").read_bytes() == b"A"
    (root / "c").write_bytes(b"C")
    ws.rename("c", "d/b")  # replaces
    assert (root / "d" / "b").read_bytes() == b"C"
    with pytest.raises(NotFoundError):
        ws.rename("missing", "x")


def test_rename_moves_symlink_not_target(ws: Workspace, root: Path, outside: Path) -> None:
    os.symlink(str(outside / "canary"), root / "link")
    ws.rename("link", "moved")
    assert os.readlink(root / "moved") == str(outside / "canary")
    assert (outside / "canary").read_bytes() == b"CANARY"


# --- stat, exists, is_dir, resolve ------------------------------------------------------


def test_stat(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"12345")
    os.chmod(root / "f", 0o604)
    os.symlink("f", root / "l")
    info = ws.stat("f")
    assert info.kind is FileKind.FILE and info.is_file
    assert info.size == 5
    assert info.mode == 0o604
    assert info.nlink == 1
    assert ws.stat("l").kind is FileKind.FILE
    assert ws.stat("l", follow_symlinks=False).kind is FileKind.SYMLINK
    assert ws.stat(".").is_dir


def test_exists_and_is_dir(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    (root / "f").write_bytes(b"")
    os.symlink("nowhere", root / "dangling")
    assert ws.exists("d") and ws.exists("f") and ws.exists(".")
    assert not ws.exists("nope")
    assert not ws.exists("dangling")
    assert not ws.exists("f/x")
    assert ws.is_dir("d") and not ws.is_dir("f") and not ws.is_dir("nope")


def test_exists_raises_on_escape(ws: Workspace, root: Path, outside: Path) -> None:
    os.symlink(str(outside), root / "out")
    with pytest.raises(PathEscapeError) as info:
        ws.exists("out/canary")
    assert info.value.reason is ConfinementReason.ABSOLUTE_SYMLINK
    with pytest.raises(PathEscapeError) as info:
        ws.is_dir("..")
    assert info.value.reason is ConfinementReason.ESCAPE


def test_resolve(ws: Workspace, root: Path) -> None:
    (root / "d" / "e").mkdir(parents=True)
    os.symlink("d/e", root / "l")
    real = Path(os.path.realpath(root))
    assert ws.resolve("l") == real / "d" / "e"
    assert ws.resolve("l/new") == real / "d" / "e" / "new"
    assert ws.resolve(".") == real
    with pytest.raises(NotFoundError):
        ws.resolve("missing/dir/x")


# --- copy, symlink, chmod ----------------------------------------------------------------


def test_copy(ws: Workspace, root: Path) -> None:
    data = os.urandom(3 << 20)
    (root / "src").write_bytes(data)
    os.chmod(root / "src", 0o640)
    ws.copy("src", "a/dst")
    assert (root / "a" / "dst").read_bytes() == data
    assert stat.S_IMODE((root / "a" / "dst").stat().st_mode) == 0o640
    (root / "a" / "dst").chmod(0o600)
    ws.copy("src", "a/dst")
    assert stat.S_IMODE((root / "a" / "dst").stat().st_mode) == 0o600


def test_copy_refuses_special_source(ws: Workspace, root: Path) -> None:
    os.mkfifo(root / "fifo")
    with pytest.raises(WorkspaceError) as info:
        ws.copy("fifo", "dst")
    assert info.value.reason is WorkspaceReason.SPECIAL_FILE
    assert not (root / "dst").exists()


def test_symlink(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    (root / "t").write_bytes(b"T")
    ws.symlink("../t", "d/l")
    assert os.readlink(root / "d" / "l") == "../t"
    assert ws.read_bytes("d/l") == b"T"
    ws.symlink("dangling-but-beneath", "dl")
    assert os.readlink(root / "dl") == "dangling-but-beneath"


def test_symlink_refused_outside(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "d").mkdir()
    with pytest.raises(PathEscapeError) as info:
        ws.symlink(str(outside / "canary"), "abs")
    assert info.value.reason is ConfinementReason.ABSOLUTE_SYMLINK
    with pytest.raises(PathEscapeError) as info:
        ws.symlink("../../outside/canary", "d/up")
    assert info.value.reason is ConfinementReason.ESCAPE
    with pytest.raises(PathEscapeError) as info:
        ws.symlink("a/../../x", "rel")
    assert info.value.reason is ConfinementReason.ESCAPE
    assert sorted(p.name for p in root.iterdir()) == ["d"]
    assert list((root / "d").iterdir()) == []


def test_symlink_depth_is_physical(ws: Workspace, root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    os.symlink("a/b", root / "deep")
    ws.symlink("../../x", "deep/l")  # physical parent a/b is two levels down
    with pytest.raises(PathEscapeError):
        ws.symlink("../../../x", "deep/m")


def test_chmod(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"")
    os.symlink("f", root / "l")
    ws.chmod("l", 0o600)
    assert stat.S_IMODE((root / "f").stat().st_mode) == 0o600
    with pytest.raises(ValueError):
        ws.chmod("f", 0o4755)
    with pytest.raises(TypeError):
        ws.chmod("f", "755")  # type: ignore[arg-type]


# --- lifetime ----------------------------------------------------------------------------


def test_close_is_idempotent_and_final(root: Path, resolver: str) -> None:
    (root / "f").write_bytes(b"x")
    w = Workspace(root, resolver=resolver)
    w.close()
    w.close()
    for call in (lambda: w.read_bytes("f"), lambda: w.write_bytes("g", b""), w.list_dir):
        with pytest.raises(WorkspaceError) as info:
            call()
        assert info.value.reason is WorkspaceReason.CLOSED
    assert not (root / "g").exists()


def test_open_dir_fd_hook(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "d").mkdir()
    fd = ws._open_dir_fd("d")
    try:
        assert os.readlink(f"/proc/self/fd/{fd}") == os.path.realpath(root / "d")
        flags = os.get_inheritable(fd)
        assert flags is False
    finally:
        os.close(fd)
    os.symlink(str(outside), root / "out")
    with pytest.raises(PathEscapeError):
        ws._open_dir_fd("out")
    with pytest.raises(WorkspaceError) as info:
        (root / "f").write_bytes(b"")
        ws._open_dir_fd("f")
    assert info.value.reason is WorkspaceReason.NOT_A_DIRECTORY


def test_threads_share_a_workspace(ws: Workspace, root: Path) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                ws.write_bytes(f"t{n}/f{i}", b"%d" % i)
                assert ws.read_bytes(f"t{n}/f{i}") == b"%d" % i
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(ws.walk()) == 4 + 4 * 50


def test_invalid_paths_refused_before_syscall(ws: Workspace, root: Path) -> None:
    cases = {
        "": ConfinementReason.EMPTY,
        "a\x00b": ConfinementReason.CONTROL_BYTE,
        "a\nb": ConfinementReason.CONTROL_BYTE,
        "a\x7f": ConfinementReason.CONTROL_BYTE,
        "x" * 256: ConfinementReason.TOO_LONG,
        "a/" * 2048: ConfinementReason.TOO_LONG,
        "\ud800": ConfinementReason.UNENCODABLE,
    }
    for path, reason in cases.items():
        with pytest.raises(InvalidPathError) as info:
            ws.write_bytes(path, b"x")
        assert info.value.reason is reason, path
    for bad in (b"bytes", None, 3):
        with pytest.raises(TypeError, match="path"):
            ws.read_bytes(bad)  # type: ignore[arg-type]
    assert list(root.iterdir()) == []


def test_forked_child_uses_its_copy(root: Path, resolver: str) -> None:
    (root / "f").write_bytes(b"parent")
    w = Workspace(root, resolver=resolver)
    try:
        pid = os.fork()
        if pid == 0:  # child: use, then close its copy; never return into pytest
            code = 1
            try:
                if w.read_bytes("f") == b"parent":
                    w.write_bytes("from_child", b"c")
                    w.close()
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert w.read_bytes("from_child") == b"c"  # the parent's copy is still open
    finally:
        w.close()


def test_symlink_refused_through_escaping_link(ws: Workspace, root: Path, outside: Path) -> None:
    os.symlink("../outside", root / "ln")
    with pytest.raises(PathEscapeError) as info:
        ws.symlink("ln/canary", "new")
    assert info.value.reason is ConfinementReason.ESCAPE
    assert not os.path.lexists(root / "new")


def test_chmod_refuses_hard_link(ws: Workspace, root: Path, outside: Path) -> None:
    os.chmod(outside / "canary", 0o644)
    os.link(outside / "canary", root / "hl")
    with pytest.raises(WorkspaceError) as info:
        ws.chmod("hl", 0o600)
    assert info.value.reason is WorkspaceReason.HARD_LINK
    assert stat.S_IMODE((outside / "canary").stat().st_mode) == 0o644
    (root / "d").mkdir()
    ws.chmod("d", 0o700)  # directories always have st_nlink >= 2
