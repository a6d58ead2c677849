"""close() under concurrency: root fd numbers are retired, never reused (decision 0011)."""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

from flux_system import FluxSystemError, Workspace, WorkspaceError, WorkspaceReason
from tests.flux_system.workspace._ws_support import outside, resolver, root  # noqa: F401


def _fd_numbers_of(ws: Workspace) -> list[int]:
    return [handle.fd for handle in ws._roots]


def test_closed_root_fd_number_is_not_reused(root: Path, resolver: str) -> None:
    ws = Workspace(root, resolver=resolver)
    (number,) = _fd_numbers_of(ws)
    ws.close()
    opened = [os.open("/", os.O_PATH) for _ in range(64)]
    try:
        assert number not in opened  # still held by the retired (dead) fd
    finally:
        for fd in opened:
            os.close(fd)
    del ws
    gc.collect()
    assert not os.path.lexists(f"/proc/self/fd/{number}")  # released once unreachable


def test_close_while_threads_read(root: Path, outside: Path, resolver: str) -> None:
    (root / "f").write_bytes(b"inside")
    ws = Workspace(root, resolver=resolver)
    results: list[object] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                results.append(ws.read_bytes("f"))
            except WorkspaceError as exc:
                results.append(exc.reason)
            except BaseException as exc:  # an OSError here would be a bug
                results.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    while len(results) < 50:
        threading.Event().wait(0.001)
    ws.close()
    # descriptors opened right after close must never become the workspace's root
    decoys = [os.open(outside, os.O_PATH | os.O_DIRECTORY) for _ in range(16)]
    threading.Event().wait(0.05)
    stop.set()
    for t in threads:
        t.join()
    for fd in decoys:
        os.close(fd)
    allowed = {b"inside", WorkspaceReason.CLOSED, WorkspaceReason.NOT_A_DIRECTORY}
    assert all(r in allowed for r in results), {type(r) for r in results}
    assert results[-1] is WorkspaceReason.CLOSED or results[-1] == b"inside"
    assert WorkspaceReason.CLOSED in results


def test_failed_construction_leaves_no_fd(root: Path, tmp_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    try:
        Workspace(root, read_roots=[tmp_path / "missing"])
    except FluxSystemError as exc:
        assert exc.reason is WorkspaceReason.NOT_FOUND
    gc.collect()
    after = set(os.listdir("/proc/self/fd"))
    assert after <= before


def test_open_dir_fd_on_named_root(root: Path, tmp_path: Path, resolver: str) -> None:
    lib = tmp_path / "lib"
    (lib / "pkg").mkdir(parents=True)
    with Workspace(root, named_roots={"lib": lib}, resolver=resolver) as ws:
        fd = ws._open_dir_fd("@lib/pkg")
        try:
            assert os.readlink(f"/proc/self/fd/{fd}") == str(lib / "pkg")
        finally:
            os.close(fd)
