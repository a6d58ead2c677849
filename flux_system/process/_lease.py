"""One tree's cgroup (v1 ``pids`` or v2), held by exactly one tree at a time.

Files are read the way the kernel keeps them current: ``cgroup.procs`` is opened
afresh for every listing — a kept-open ``cgroup.procs`` fd re-read with ``pread(0)``
returns the first listing again, forever (seen on Linux 6.18; the task iterator of a
seq_file is not restarted), which let a pooled cgroup look empty to the next tree.
``pids.current`` and ``cgroup.events`` are single-record files and are re-read
through kept fds.

Guarantee: :meth:`Lease.members` lists every process the cgroup (and every cgroup
nested below it, bounded) lists at the time of the read; nothing else is a member.
Not guaranteed: v1 has no atomic kill; see :mod:`flux_system.process._reap`.
"""

from __future__ import annotations

import contextlib
import os
import typing

from flux_system.process._resident import Resident

__all__ = ["MAX_NESTED", "Lease", "pread_all"]

# Cgroup directories walked below one tree's cgroup (a root child may create them).
MAX_NESTED = 256
_READ = 1 << 16
_RD = os.O_RDONLY | os.O_CLOEXEC
_WR = os.O_WRONLY | os.O_CLOEXEC


def pread_all(fd: int) -> bytes:
    """The whole content of a single-record cgroup file (re-generated at offset 0)."""
    chunks: list[bytes] = []
    offset = 0
    while True:
        data = os.pread(fd, _READ, offset)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        offset += len(data)


def _read_at(dir_fd: int, name: str) -> bytes:
    fd = os.open(name, _RD, dir_fd=dir_fd)
    try:
        return pread_all(fd)
    finally:
        os.close(fd)


def _write_at(dir_fd: int, name: str, text: bytes) -> None:
    fd = os.open(name, _WR, dir_fd=dir_fd)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)


@typing.final
class Lease:
    """One tree's cgroup: ``path`` on disk, ``proc`` as ``/proc/PID/cgroup`` names it.

    v1: a resident thread lives in it and forks its children (:meth:`settle_resident`,
    decision 0028), or else the spawning thread enters it (:meth:`enter`) for the fork.
    v2: the child moves itself in before exec through :attr:`entry_fd` (an fd of
    ``cgroup.procs`` opened here, so the write is checked against our credentials).
    """

    __slots__ = (
        "_current",
        "_dir",
        "_events",
        "_max",
        "_tasks",
        "entry_fd",
        "max_set",
        "path",
        "proc",
        "resident",
        "version",
    )

    def __init__(self, path: str, proc: str, version: int) -> None:
        self.path = path
        self.proc = proc
        self.version = version
        self.max_set = False
        self._max: int | None = None
        self.resident: Resident | None = None
        self._dir = self._tasks = self._current = self._events = self.entry_fd = -1
        try:
            self._dir = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            if version == 1:
                self._tasks = os.open("tasks", _WR, dir_fd=self._dir)
            else:
                self.entry_fd = os.open("cgroup.procs", _WR, dir_fd=self._dir)
                self._events = os.open("cgroup.events", _RD, dir_fd=self._dir)
            with contextlib.suppress(FileNotFoundError):  # v2 without the pids controller
                self._current = os.open("pids.current", _RD, dir_fd=self._dir)
        except OSError:
            self.close_fds()
            raise

    @property
    def has_pids(self) -> bool:
        """Whether ``pids.max`` limits this cgroup (v1 always; v2 when delegated)."""
        return self._current >= 0

    def settle_resident(self) -> None:
        """v1: start the thread that lives here and forks this cgroup's children.

        Raises: OSError (the thread could not enter: the cgroup was removed under us).
        """
        if self.version == 1 and self.resident is None:
            self.resident = Resident(self._tasks)

    @property
    def _residents(self) -> int:
        return 1 if self.resident is not None and self.resident.alive else 0

    def enter(self, tid: bytes) -> None:
        """Move the thread *tid* into this cgroup (v1 only: v1 moves single threads).

        Raises: OSError (``ENODEV``: the cgroup was removed under us).
        """
        os.write(self._tasks, tid)

    @property
    def frozen(self) -> bool:
        """Whether forks are refused (``pids.max`` 0, set by a v1 kill)."""
        return self._max == 0

    def set_max(self, value: int | None) -> None:
        """``pids.max`` for the tree: *value* tasks of its own (the resident thread,
        charged here too, is added); ``None``: no limit."""
        text = b"max" if value is None else b"%d" % (value + self._residents)
        _write_at(self._dir, "pids.max", text)
        self.max_set = value is not None
        self._max = value

    def current(self) -> int:
        """The tree's tasks charged here and below, zombies included (they uncharge
        when reaped); our resident thread, charged here too, is not counted."""
        return int(os.pread(self._current, 64, 0)) - self._residents

    def populated(self) -> bool:
        """v2: whether a live task is in this cgroup or below (zombies do not count)."""
        return b"populated 1" in pread_all(self._events)

    def frozen_v2(self) -> bool:
        """v2: whether every task here and below is frozen (``cgroup.events``)."""
        return b"frozen 1" in pread_all(self._events)

    def kill_all(self) -> bool:
        """v2: SIGKILL everything here and below atomically (``cgroup.kill``, 5.14+).

        Returns ``False`` when the kernel has no ``cgroup.kill``.
        """
        try:
            _write_at(self._dir, "cgroup.kill", b"1")
        except FileNotFoundError:
            return False
        return True

    def freeze(self, on: bool) -> None:
        """v2: freeze (or thaw) everything here and below (``cgroup.freeze``)."""
        _write_at(self._dir, "cgroup.freeze", b"1" if on else b"0")

    def members(self) -> list[int]:
        """Processes listed in this cgroup and every cgroup nested below it (bounded).

        Each ``cgroup.procs`` is opened afresh (see the module docstring).
        """
        pids = [int(x) for x in _read_at(self._dir, "cgroup.procs").split()]
        if os.fstat(self._dir).st_nlink <= 2:  # kernfs: 2 + number of subdirectories
            return pids
        stack: list[str] = []
        with contextlib.suppress(OSError), os.scandir(self.path) as it:
            stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        seen = 1
        while stack and seen < MAX_NESTED:
            here = stack.pop()
            seen += 1
            with contextlib.suppress(OSError):
                with open(os.path.join(here, "cgroup.procs"), "rb") as fh:
                    pids.extend(int(x) for x in fh.read().split())
                with os.scandir(here) as it:
                    stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        return pids

    def reusable(self, known_empty: bool) -> bool:
        """Verifiably empty and flat: nothing charged or populated, no nested cgroup.

        *known_empty*: the tree's kill read ``pids.current`` as only the leader, which
        was reaped since (v1 and v2 with pids only; v2 always reads ``populated``).
        """
        try:
            if os.fstat(self._dir).st_nlink != 2:
                return False
            if self.version == 2 and (self.populated() or self.frozen_v2()):
                return False
            # pids.current counts every task charged, zombies too: 0 is empty.
            return self._current < 0 or known_empty or self.current() == 0
        except (OSError, ValueError):
            return False

    def close_fds(self) -> None:
        """End the resident thread (so the cgroup can be removed) and close every fd."""
        if self.resident is not None:
            self.resident.close()
            self.resident = None
        for fd in (self._dir, self._tasks, self._current, self._events, self.entry_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._dir = self._tasks = self._current = self._events = self.entry_fd = -1
