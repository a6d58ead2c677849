"""Third (adversarial) review of the Workspace: one regression test per hole found.

See docs/decisions/0014-workspace-review.md (section "Third review"). Nothing here is
mocked: gates on constructors or os functions only decide *when* something happens.
"""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import contextlib
import enum
import gc
import inspect
import os
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flux_system import (
    FluxSystemError,
    NamedRoot,
    Workspace,
    WorkspaceError,
    WorkspaceReason,
)
from flux_system.workspace import _atomic, _resolve
from flux_system.workspace._pathname import PATH_MAX
from tests._capabilities import require
from tests.flux_system.workspace._ws_support import outside, resolver, root, ws  # noqa: F401


class _GatedHow(_resolve._OpenHow):
    """An ``open_how`` whose construction waits until two threads construct at once."""

    gate = threading.Barrier(2, timeout=5)

    def __init__(self, *args: int) -> None:
        self.gate.wait()
        super().__init__(*args)


def test_openat2_how_handed_out_is_the_one_kept_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads building the ``open_how`` of one (flags, mode) for the first time.

    The address given to ``openat2`` must be that of a struct the table keeps alive:
    otherwise the kernel reads freed memory (flags and *resolve* bits included, so
    ``RESOLVE_BENEATH`` could be lost).
    """
    flags = os.O_PATH | os.O_CLOEXEC | os.O_NOATIME | os.O_DIRECTORY  # a key nothing else uses
    monkeypatch.setattr(_resolve, "_OpenHow", _GatedHow)
    monkeypatch.setattr(_resolve, "_hows", {})
    got: list[int] = []

    def build() -> None:
        got.append(_resolve._how(flags, 0))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(got) == 2
    kept = _resolve._hows[(flags, 0, _resolve._RESOLVE)]
    assert got == [kept[1], kept[1]]


def _chain(root: Path, names: list[str], leaf: str) -> None:
    """root/names[0]/names[1]/.../leaf, built by fds (the whole may exceed PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_walk_never_returns_a_path_the_api_refuses(ws: Workspace, root: Path) -> None:
    """A tree whose paths grow past PATH_MAX (built inside the root by someone else).

    Each returned path used to be the whole chain of names: 256 levels of 255-byte
    names make every entry ~64 KiB, so ``max_entries`` entries cost ~6 GiB, and none
    of them could be passed back (``TOO_LONG``). The walk now refuses with
    ``TOO_DEEP`` (no silent truncation); a tree just below the bound still walks and
    every path it returns is usable.
    """
    name = "n" * 250
    below = (PATH_MAX - 1) // (len(name) + 1)  # levels whose paths stay under PATH_MAX
    _chain(root, [name] * (below - 1), "f")
    got = ws.walk()
    assert len(got) == below
    for path in got:
        ws.stat(path)  # every returned path is accepted back
    _chain(root, ["m" * 250] * (below + 2), "f")
    with pytest.raises(WorkspaceError) as info:
        ws.walk()
    assert info.value.reason is WorkspaceReason.TOO_DEEP


def test_walk_depth_bound_is_exact(ws: Workspace, root: Path) -> None:
    """256 nested directories walk; the 257th level is ``TOO_DEEP`` (not truncated)."""
    _chain(root, ["d"] * 256, "f")  # 256 nested directories and a file
    assert len(ws.walk()) == 257
    _chain(root, ["e"] * 257, "f")
    with pytest.raises(WorkspaceError) as info:
        ws.walk()
    assert info.value.reason is WorkspaceReason.TOO_DEEP


@pytest.mark.parametrize("rel", ["file/.", "up/.", "sub/.", "sub/./", "file/./."])
def test_absolute_spelling_keeps_a_trailing_dot(
    ws: Workspace, root: Path, outside: Path, rel: str
) -> None:
    """``ROOT/x/.`` must act as ``x/.`` does, not on ``x`` itself.

    The absolute form used to drop the trailing ``.``: ``ROOT/up/.`` (``up`` ->
    outside) replaced or removed the link instead of being an escape, and
    ``remove("ROOT/sub/.", recursive=True)`` deleted ``sub``, which ``sub/.`` refuses.
    """
    (root / "file").write_bytes(b"F")
    (root / "sub").mkdir()
    (root / "sub" / "keep").write_bytes(b"K")
    os.symlink("../outside", root / "up")
    calls: dict[str, Callable[[str], object]] = {
        "read": ws.read_bytes,
        "write": lambda p: ws.write_bytes(p, b"x"),
        "remove": lambda p: ws.remove(p, recursive=True),
        "mkdir": lambda p: ws.mkdir(p, exist_ok=False),
    }
    for name, call in calls.items():
        outcomes: list[enum.Enum | None] = []
        for path in (rel, f"{root}/{rel}"):
            try:
                call(path)
            except FluxSystemError as exc:
                outcomes.append(exc.reason)
            else:
                outcomes.append(None)
        assert outcomes[0] is not None, name
        assert outcomes[1] is outcomes[0], name
    assert (root / "file").read_bytes() == b"F"
    assert (root / "sub" / "keep").read_bytes() == b"K"
    assert os.readlink(root / "up") == "../outside"
    assert sorted(p.name for p in outside.iterdir()) == ["canary"]


def _interrupt_after(
    monkeypatch: pytest.MonkeyPatch, name: str, when: Callable[..., bool] = lambda *a, **k: True
) -> list[int]:
    """Make ``os.<name>`` run for real, then raise KeyboardInterrupt once (``when``).

    This is what a SIGINT does when it arrives while the syscall runs: the call
    completes, and the handler raises at the next bytecode, before its result is used.
    Returns a list that records the syscall's result when the interrupt fired.
    """
    real = getattr(os, name)
    fired: list[int] = []

    def spy(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)
        if not fired and when(*args, **kwargs):
            fired.append(result if isinstance(result, int) else 0)
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(os, name, spy)
    return fired


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize(
    ("tmpfile", "where"),
    [
        (True, "link"),
        (True, "rename"),
        (True, "fsync"),
        (False, "create"),
        (False, "rename"),
        (False, "fsync"),
    ],
)
def test_interrupted_atomic_write_leaves_no_temp_file(
    ws: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch, tmpfile: bool, where: str
) -> None:
    """KeyboardInterrupt right after each step of an atomic write leaves only the
    old or the new file: never a temporary name, never an open fd.

    ``link`` (O_TMPFILE) and ``create`` (the named fallback) used to leave the
    temporary name: the interrupt hit after the name existed but before the code
    that unlinks it on failure knew it.
    """
    if tmpfile:
        require(_atomic._TMPFILE != 0, "O_TMPFILE")
    else:
        monkeypatch.setattr(_atomic, "_TMPFILE", 0)
    (root / "f").write_bytes(b"old")
    before = _fds()
    if where == "link":
        fired = _interrupt_after(monkeypatch, "link")
    elif where == "create":
        fired = _interrupt_after(
            monkeypatch, "open", lambda path, flags, *a, **k: flags == _atomic._CREATE
        )
    else:
        fired = _interrupt_after(monkeypatch, where)
    with pytest.raises(KeyboardInterrupt):
        ws.write_bytes("f", b"new")
    monkeypatch.undo()
    assert fired
    assert sorted(p.name for p in root.iterdir()) == ["f"]
    assert (root / "f").read_bytes() in (b"old", b"new")
    if where in ("link", "create", "fsync"):
        assert (root / "f").read_bytes() == b"old"
    if where == "create":  # the fd the interrupted open returned is lost by
        os.close(fired[0])  # construction (Python drops the result); nothing else may leak
    assert _fds() - before == set()


def test_concurrent_close_retires_each_root_fd_once(
    root: Path, tmp_path: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads call ``close()`` at once (documented as safe from any thread).

    Both used to read the same root fd before either marked it closed, so the fd was
    retired twice and ``__del__`` closed that number twice: the second ``close`` hit
    ``EBADF`` (leaking the roots after it) or, had the number been reused meanwhile,
    closed somebody else's file. A line gate holds each thread just after it read the
    fd, so the interleaving is forced, not hoped for.
    """
    extra = tmp_path / "extra"
    extra.mkdir()
    ws = Workspace(root, read_roots=[extra], resolver=resolver)
    numbers = [handle.fd for handle in ws._roots]
    code = type(ws).close.__code__
    source, first = inspect.getsourcelines(code)
    mark = first + next(i for i, line in enumerate(source) if "handle.fd = -1" in line)
    gate = threading.Barrier(2, timeout=0.3)

    def local(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == mark and frame.f_locals.get("fd") == numbers[0]:
            with contextlib.suppress(threading.BrokenBarrierError):
                gate.wait()  # both threads hold the same fd here (unless close is locked)
        return local

    def tracer(frame: types.FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    closed: list[int] = []
    real_close = os.close

    def spy_close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    threads = [threading.Thread(target=ws.close) for _ in range(2)]
    threading.settrace(tracer)
    try:
        for thread in threads:
            thread.start()
    finally:
        threading.settrace(None)
    for thread in threads:
        thread.join(10)
    monkeypatch.setattr(os, "close", spy_close)
    del ws
    gc.collect()
    monkeypatch.undo()
    assert sorted(n for n in closed if n in numbers) == sorted(numbers)  # each exactly once
    assert not [n for n in numbers if os.path.lexists(f"/proc/self/fd/{n}")]


@pytest.mark.parametrize("flag", ["false", "0", 0, 1, None])
def test_named_root_writable_must_be_a_bool(root: Path, tmp_path: Path, flag: object) -> None:
    """``writable`` is the grant to write through ``@name``: like ``unconfined``, it is
    never implied. A truthy non-bool (``"false"`` read from a config file) used to make
    the root writable."""
    extra = tmp_path / "extra"
    extra.mkdir()
    try:
        named = NamedRoot(extra, writable=flag)  # type: ignore[arg-type]
    except TypeError:
        return
    with Workspace(root, named_roots={"x": named}) as ws:  # what the value granted
        with contextlib.suppress(FluxSystemError):
            ws.write_bytes("@x/new", b"n")
    assert list(extra.iterdir()) == [], "a non-bool writable granted writes"
    pytest.fail("a non-bool writable was accepted")
