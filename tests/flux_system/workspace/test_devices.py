"""Reads refuse a device, FIFO or socket *before* opening it: a device's driver ``open``
never runs (``/dev/watchdog`` arms on open, a serial line resets the board behind it).

Observed with inotify: the kernel queues ``IN_OPEN`` for every open of the watched
inode, device nodes included, and none for ``stat`` or an ``O_PATH`` lookup. Each case
has its control: opening the same inode directly is seen.
"""

from __future__ import annotations

import ctypes
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux_system import Workspace, WorkspaceError, WorkspaceReason
from tests._capabilities import require

_libc = ctypes.CDLL(None, use_errno=True)
_IN_OPEN = 0x20
_EVENT_HEADER = 16  # struct inotify_event without its name: wd, mask, cookie, len
WORKSPACES = ["openat2", "walk", "unconfined"]


class OpenWatch:
    """Counts the opens of one inode (inotify ``IN_OPEN``)."""

    def __init__(self, path: Path) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, ctypes.get_errno()
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_OPEN)
        assert wd >= 0, ctypes.get_errno()

    def opens(self) -> int:
        count = 0
        while True:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return count
            offset = 0
            while offset < len(data):
                name_len = int.from_bytes(data[offset + 12 : offset + 16], "little")
                count += 1
                offset += _EVENT_HEADER + name_len

    def close(self) -> None:
        os.close(self.fd)


def _char_device(path: Path) -> None:
    """A node for the null device (1, 3): opening it is harmless, and visible."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        require(False, "CAP_MKNOD (creating a device node)")


@pytest.fixture(params=["char device", "fifo", "socket"])
def special(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "outside-of-workspace-ops" / "specials"
    home.mkdir(parents=True)
    node = home / "node"
    if request.param == "char device":
        _char_device(node)
    elif request.param == "fifo":
        os.mkfifo(node, 0o600)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(os.fspath(node))
        sock.close()
    yield node


def _workspace(kind: str, root: Path, **kwargs: object) -> Workspace:
    if kind == "unconfined":
        return Workspace(root, unconfined=True, **kwargs)  # type: ignore[arg-type]
    return Workspace(root, resolver=kind, **kwargs)  # type: ignore[arg-type]


def _refused_unopened(watch: OpenWatch, call: object) -> None:
    with pytest.raises(WorkspaceError) as info:
        call()  # type: ignore[operator]
    assert info.value.reason is WorkspaceReason.SPECIAL_FILE
    assert watch.opens() == 0  # nothing opened it


@pytest.mark.parametrize("kind", WORKSPACES)
def test_reads_refuse_special_files_before_opening_them(
    kind: str, special: Path, tmp_path: Path
) -> None:
    root = special.parent
    (root / "link").symlink_to("node")  # a relative link to it, inside the root
    (root / "sub").mkdir()
    watch = OpenWatch(special)
    try:
        with _workspace(kind, root) as ws:
            for name in ("node", "link", "sub/../node"):
                _refused_unopened(watch, lambda n=name: ws.read_bytes(n))
                _refused_unopened(watch, lambda n=name: ws.read_text(n))
                _refused_unopened(watch, lambda n=name: ws.open_read(n))
                _refused_unopened(watch, lambda n=name: ws.copy(n, "sub/copy"))
                _refused_unopened(watch, lambda n=name: ws.append_bytes(n, b"x"))
            assert not (root / "sub" / "copy").exists()
        if not stat.S_ISSOCK(special.stat().st_mode):  # a socket cannot be open()ed
            os.close(os.open(special, os.O_RDONLY | os.O_NONBLOCK))
            assert watch.opens() == 1  # control: the watch sees an open
    finally:
        watch.close()


@pytest.mark.parametrize("kind", ["openat2", "walk"])
def test_read_roots_and_named_roots_refuse_devices_unopened(
    kind: str, special: Path, tmp_path: Path
) -> None:
    main = tmp_path / "main"
    main.mkdir()
    watch = OpenWatch(special)
    try:
        with _workspace(
            kind, main, read_roots=[special.parent], named_roots={"dev": special.parent}
        ) as ws:
            _refused_unopened(watch, lambda: ws.read_bytes(os.fspath(special)))
            _refused_unopened(watch, lambda: ws.read_bytes("@dev/node"))
    finally:
        watch.close()


@pytest.mark.parametrize("kind", WORKSPACES)
def test_regular_reads_open_the_file_once(kind: str, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    target = tmp_path / "d" / "f.txt"
    target.write_bytes(b"content")
    (tmp_path / "via").symlink_to("d/f.txt")
    watch = OpenWatch(target)
    try:
        with _workspace(kind, tmp_path) as ws:
            assert ws.read_bytes("d/f.txt") == b"content"
            assert watch.opens() == 1
            assert ws.read_bytes("via") == b"content"  # through a symlink: careful path
            assert watch.opens() == 1
            with pytest.raises(WorkspaceError) as info:
                ws.read_bytes("d")
            assert info.value.reason is WorkspaceReason.IS_A_DIRECTORY
            assert watch.opens() == 0
    finally:
        watch.close()


@pytest.mark.parametrize("kind", WORKSPACES)
def test_a_file_replaced_while_read_is_read_whole_never_refused(kind: str, tmp_path: Path) -> None:
    """An editor's atomic save (rename over) during reads: each read returns one whole
    version; none fails because the inode changed between the check and the open."""
    versions = [b"A" * 4096, b"B" * 4096]
    (tmp_path / "f").write_bytes(versions[0])
    stop = threading.Event()

    def saver() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            tmp = tmp_path / f".f.{i % 2}"
            tmp.write_bytes(versions[i % 2])
            os.replace(tmp, tmp_path / "f")

    thread = threading.Thread(target=saver)
    thread.start()
    try:
        with _workspace(kind, tmp_path) as ws:
            for _ in range(2000):
                assert ws.read_bytes("f") in versions
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.parametrize("kind", WORKSPACES)
def test_writes_refuse_special_files_and_leave_them_in_place(
    kind: str, special: Path, tmp_path: Path
) -> None:
    """``write_bytes`` and ``copy`` onto a FIFO, socket or device (directly or through
    a link) refuse with ``SPECIAL_FILE`` instead of renaming a regular file over the
    node; the node stays the same inode and nothing opens it."""
    root = special.parent
    (root / "link").symlink_to("node")
    (root / "src").write_bytes(b"source")
    before = os.lstat(special)
    watch = OpenWatch(special)
    try:
        with _workspace(kind, root) as ws:
            for name in ("node", "link", "./node"):
                _refused_unopened(watch, lambda n=name: ws.write_bytes(n, b"x"))
                _refused_unopened(watch, lambda n=name: ws.copy("src", n))
    finally:
        watch.close()
    after = os.lstat(special)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert os.readlink(root / "link") == "node"
    assert sorted(os.listdir(root)) == ["link", "node", "src"]  # no temp file left
