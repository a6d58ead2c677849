"""Workspace operations at resource limits: no free fd, file-size limit, a full disk.

Every limit is real: ``RLIMIT_NOFILE``/``RLIMIT_FSIZE`` set in a forked child, and a
64 KiB tmpfs mounted in a private mount namespace (``unshare -m``). Each operation must
fail with a typed error, leak no fd and leave nothing partial (decision 0014).
"""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flux_system import FluxSystemError, Workspace, WorkspaceError, WorkspaceReason
from flux_system.workspace import _atomic
from tests._capabilities import require
from tests.flux_system.workspace._ws_support import in_child, resolver, root  # noqa: F401

REPO = Path(__file__).resolve().parents[3]
FD_HEADROOM = 24  # soft RLIMIT_NOFILE above the fds a child already holds


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _exhaust() -> list[int]:
    """Take every free fd number (under a low soft limit) and return them."""
    taken: list[int] = []
    try:
        while True:
            taken.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        return taken


def _low_nofile() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(_fds()) + FD_HEADROOM, hard))


def _tree(root: Path) -> None:
    (root / "f").write_bytes(b"f")
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "e" / "g").write_bytes(b"g")


def _ops(ws: Workspace) -> dict[str, Callable[[], object]]:
    def stream() -> bytes:
        with ws.open_read("d/e/g") as fh:
            return fh.read()

    return {
        "read_bytes": lambda: ws.read_bytes("d/e/g"),
        "open_read": stream,
        "write_bytes": lambda: ws.write_bytes("d/e/new", b"x"),
        "append_bytes": lambda: ws.append_bytes("f", b"y"),
        "mkdir": lambda: ws.mkdir("m/n/o"),
        "list_dir": lambda: ws.list_dir("d"),
        "walk": ws.walk,
        "stat": lambda: ws.stat("d/e/g"),
        "exists": lambda: ws.exists("d/e"),
        "resolve": lambda: ws.resolve("d/e/new"),
        "copy": lambda: ws.copy("f", "d/c"),
        "symlink": lambda: ws.symlink("../f", "d/l"),
        "chmod": lambda: ws.chmod("f", 0o600),
        "rename": lambda: ws.rename("d/e/g", "d/g2"),
        "remove": lambda: ws.remove("d", recursive=True),
    }


def test_every_op_without_free_fds_is_typed_and_leaks_none(root: Path, resolver: str) -> None:
    _tree(root)

    def child() -> tuple[list[str], set[str]]:
        _low_nofile()
        untyped: list[str] = []
        with Workspace(root, resolver=resolver) as ws:
            before = _fds()
            taken = _exhaust()
            for free in range(4):  # 0 free fds, then 1, 2, 3
                for _ in range(free):
                    os.close(taken.pop())
                for name, call in _ops(ws).items():
                    try:
                        call()
                    except FluxSystemError:
                        pass
                    except BaseException as exc:
                        untyped.append(f"{name} with {free} free: {exc!r}")
            for fd in taken:
                os.close(fd)
            leaked = _fds() - before
        return untyped, leaked

    assert in_child(child) == ([], set())


def test_close_without_free_fds_retires_the_roots(root: Path, resolver: str) -> None:
    (root / "f").write_bytes(b"f")

    def child() -> tuple[str, object, object]:
        _low_nofile()
        ws = Workspace(root, resolver=resolver)
        (number,) = (handle.fd for handle in ws._roots)
        taken = _exhaust()
        try:
            ws.close()
            closed = "closed"
        except BaseException as exc:
            closed = repr(exc)
        finally:
            for fd in taken:
                os.close(fd)
        try:
            ws.read_bytes("f")
            after: object = "read"
        except WorkspaceError as exc:
            after = exc.reason
        # the root's fd number is held by a dead fd: a lookup relative to it fails
        try:
            os.close(os.open("f", os.O_PATH, dir_fd=number))
            lookup: object = "resolved"
        except OSError as exc:
            lookup = exc.errno
        return closed, after, lookup

    result = in_child(child)
    assert isinstance(result, tuple)
    assert result[:2] == ("closed", WorkspaceReason.CLOSED)
    assert result[2] != "resolved"


def _listing(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_write_past_file_size_limit_keeps_old_content(root: Path, resolver: str) -> None:
    (root / "f").write_bytes(b"old")
    (root / "big").write_bytes(b"b" * 5000)

    def child() -> list[object]:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
        out: list[object] = []
        with Workspace(root, resolver=resolver) as ws:
            calls: list[Callable[[], None]] = [
                lambda: ws.write_bytes("f", b"x" * 5000),
                lambda: ws.copy("big", "f"),
            ]
            for call in calls:
                try:
                    call()
                    out.append("written")
                except WorkspaceError as exc:
                    out.append(exc.reason)
        return out

    assert in_child(child) == [WorkspaceReason.TOO_LARGE] * 2
    assert (root / "f").read_bytes() == b"old"
    assert _listing(root) == ["big", "f"]


def test_append_past_file_size_limit_leaves_no_partial_tail(root: Path, resolver: str) -> None:
    (root / "f").write_bytes(b"old")

    def child() -> object:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
        with Workspace(root, resolver=resolver) as ws:
            try:
                ws.append_bytes("f", b"y" * 5000)
            except WorkspaceError as exc:
                return exc.reason
        return "appended"

    assert in_child(child) == WorkspaceReason.TOO_LARGE
    assert (root / "f").read_bytes() == b"old"


_FULL_DISK = """
import json, os, subprocess, sys
from pathlib import Path
from flux_system import Workspace, WorkspaceError
base, resolver = Path(sys.argv[1]), sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(base)], check=True)
root = base / "root"
root.mkdir()
(root / "f").write_bytes(b"old")
(root / "src").write_bytes(b"s" * 20000)
out = {}
with Workspace(root, resolver=resolver) as ws:
    calls = {
        "write_replace": lambda: ws.write_bytes("f", b"x" * 200000),
        "write_new": lambda: ws.write_bytes("new/n", b"x" * 200000),
        "copy": lambda: [ws.copy("src", f"c{i}") for i in range(8)],
        "append": lambda: ws.append_bytes("f", b"y" * 200000),
    }
    for name, call in calls.items():
        try:
            call()
            out[name] = "done"
        except WorkspaceError as exc:
            out[name] = exc.reason.value
        out[name + ":names"] = sorted(os.listdir(root))
        out[name + ":f"] = (root / "f").read_bytes().decode()
print(json.dumps(out))
"""


def test_full_filesystem_leaves_nothing_partial(tmp_path: Path, resolver: str) -> None:
    require(shutil.which("unshare") is not None and os.geteuid() == 0, "unshare -m as root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    argv = ["unshare", "-m", "--propagation", "private", sys.executable, "-c", _FULL_DISK]
    proc = subprocess.run(
        [*argv, str(mnt), resolver],
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    base = ["f", "src"]
    assert (out["write_replace"], out["write_replace:names"]) == ("no_space", base)
    assert (out["write_new"], out["write_new:f"]) == ("no_space", "old")
    assert out["write_new:names"] in (base, sorted([*base, "new"]))  # the parent may stay
    copies = [n for n in out["copy:names"] if n.startswith("c")]
    assert out["copy"] == "no_space" and 0 < len(copies) < 8  # whole copies only
    assert not [n for n in out["copy:names"] if n.startswith(".")]  # no temp file
    assert (out["append"], out["append:f"]) == ("no_space", "old")


def test_remove_recursive_deeper_than_the_fd_limit(root: Path, resolver: str) -> None:
    deep = "d/" * 600 + "f"

    def child() -> object:
        _low_nofile()  # far fewer free fds than levels
        with Workspace(root, resolver=resolver) as ws:
            ws.mkdir("keep")
            ws.write_bytes(deep, b"x")
            ws.write_bytes("d/d/side", b"y")
            ws.remove("d", recursive=True)
            return ws.list_dir()

    assert in_child(child) == ["keep"]


def test_writer_killed_mid_write_leaves_no_temp_file(root: Path, resolver: str) -> None:
    require(_atomic._TMPFILE != 0, "O_TMPFILE")
    (root / "f").write_bytes(b"old")
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: start an atomic replace whose fill never finishes; killed there
        try:
            os.close(reader)
            ws = Workspace(root, resolver=resolver)

            def fill(fd: int) -> None:
                os.write(fd, b"partial")
                os.write(writer, b"x")  # tell the parent: the temp file exists now
                while True:
                    select.select([], [], [])

            ws._replace(
                ws._main,
                b"f",
                display="f",
                op="write_bytes",
                fill=fill,
                mode=None,
                create_parents=False,
            )
        finally:
            os._exit(1)
    os.close(writer)
    try:
        assert os.read(reader, 1) == b"x"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(reader)
    assert _listing(root) == ["f"]
    assert (root / "f").read_bytes() == b"old"


def test_named_temp_fallback_keeps_the_write_rules(
    root: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the file system lacks O_TMPFILE, the named temp file keeps every rule."""
    monkeypatch.setattr(_atomic, "_TMPFILE", 0)
    (root / "f").write_bytes(b"old")
    os.chmod(root / "f", 0o640)

    def child() -> list[object]:
        os.umask(0o077)
        out: list[object] = []
        with Workspace(root, resolver=resolver) as ws:
            ws.write_bytes("f", b"new")
            ws.write_bytes("n", b"n")
            out += [_listing(root), (root / "f").read_bytes(), _mode(root / "f"), _mode(root / "n")]
            resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
            try:
                ws.write_bytes("f", b"x" * 5000)
            except WorkspaceError as exc:
                out.append(exc.reason)
        out += [_listing(root), (root / "f").read_bytes()]
        return out

    assert in_child(child) == [
        ["f", "n"],
        b"new",
        0o640,
        0o600,
        WorkspaceReason.TOO_LARGE,
        ["f", "n"],
        b"new",
    ]
