"""Per-tree pids cgroups (cgroup v1): a per-System pool, recursive membership, removal.

Layout: ``<our pids cgroup>/flux-<pid>/t<N>``, one ``t<N>`` per live tree. The
``flux-<pid>`` base exists while some :class:`CgroupPool` is open or still has a lease
out; it is removed with the last one (and at interpreter exit, after every child was
killed and reaped — :mod:`flux_system.process._system` orders that).

Guarantee: a lease is handed to a new tree only when it is empty — no task charged to
it (``pids.current == 0``: not even a zombie) and no nested cgroup below it — so two
trees never share a cgroup. A lease that is not provably empty is removed instead, and
its nested cgroups (which a root child, e.g. a nested flux process, may have created)
are removed bottom-up with it.
Not guaranteed: a root child can move itself out of its cgroup (``tasks`` of any
cgroup is writable by root); containment of root children needs the sandbox (§2.5).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import os
import threading
import typing

__all__ = [
    "POOL_MAX",
    "CgroupPool",
    "Lease",
    "pids_hierarchy_available",
    "remove_leftovers",
    "remove_tree",
]

_PIDS_ROOT = "/sys/fs/cgroup/pids"
POOL_MAX = 4  # empty cgroups one System keeps for reuse (each holds four fds)
# Cgroup directories walked below one tree's cgroup (a root child may create them).
_MAX_NESTED = 256
# Stale per-process cgroups looked at when this process creates its own.
_MAX_STALE = 4096
_READ = 1 << 16
_RD = os.O_RDONLY | os.O_CLOEXEC
_WR = os.O_WRONLY | os.O_CLOEXEC

_lock = threading.Lock()
_counter = itertools.count()


def _write(path: str, text: str) -> None:
    fd = os.open(path, _WR)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _pread_all(fd: int) -> bytes:
    """The whole content of a cgroup file (seq_file: re-generated at offset 0)."""
    chunks: list[bytes] = []
    offset = 0
    while True:
        data = os.pread(fd, _READ, offset)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        offset += len(data)


def remove_tree(path: str) -> bool:
    """rmdir *path* and the cgroups nested below it, bottom-up; whether it is gone.

    Only empty cgroups can be removed (the kernel refuses a populated one), so this
    never disturbs a live process. At most :data:`_MAX_NESTED` directories are visited.
    """
    order: list[str] = []
    stack = [path]
    while stack and len(order) < _MAX_NESTED:
        here = stack.pop()
        order.append(here)
        with contextlib.suppress(OSError), os.scandir(here) as it:
            stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
    for here in reversed(order):
        with contextlib.suppress(OSError):
            os.rmdir(here)
    return not os.path.lexists(path)


def _remove_stale(here: str) -> None:
    """Remove the (empty) cgroups left by flux processes that no longer exist."""
    with contextlib.suppress(OSError):
        for name in os.listdir(here)[:_MAX_STALE]:
            pid = name.removeprefix("flux-")
            if name.startswith("flux-") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                remove_tree(os.path.join(here, name))


@typing.final
class _Base:
    """``flux-<pid>``: the parent of this process's tree cgroups, and the way home."""

    __slots__ = ("home_tasks", "path", "users")

    def __init__(self, path: str, home_tasks: int) -> None:
        self.path = path
        self.home_tasks = home_tasks  # our own cgroup's ``tasks``: a thread moves back
        self.users = 0


_base: _Base | None = None
_unavailable = False


def _own_pids_cgroup() -> str | None:
    with open("/proc/self/cgroup", encoding="ascii") as fh:
        for line in fh:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3 and "pids" in parts[1].split(","):
                return os.path.join(_PIDS_ROOT, parts[2].lstrip("/"))
    return None


def _take_base() -> _Base | None:
    """Reference the base (created on first use); ``None`` without a usable hierarchy."""
    global _base, _unavailable  # noqa: PLW0603 - one base per process
    with _lock:
        if _base is None and not _unavailable:
            try:
                here = _own_pids_cgroup()
                if here is None:
                    raise FileNotFoundError(errno.ENOENT, "no pids hierarchy")
                _remove_stale(here)
                path = os.path.join(here, f"flux-{os.getpid()}")
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path, 0o700)
                _base = _Base(path, os.open(os.path.join(here, "tasks"), _WR))
            except OSError:
                _unavailable = True
        if _base is not None:
            _base.users += 1
        return _base


def _drop_base(base: _Base) -> None:
    global _base  # noqa: PLW0603
    with _lock:
        base.users -= 1
        if base.users > 0 or _base is not base:
            return
        _base = None
    remove_tree(base.path)
    os.close(base.home_tasks)


def pids_hierarchy_available() -> bool:
    """Whether trees can get their own pids cgroup on this host."""
    base = _take_base()
    if base is None:
        return False
    _drop_base(base)
    return True


@typing.final
class Lease:
    """One tree's cgroup, held by exactly one tree until released to its pool."""

    __slots__ = ("_current", "_dir", "_max", "_procs", "_tasks", "max_set", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.max_set = False
        self._max: int | None = None
        self._dir = self._tasks = self._procs = self._current = -1
        try:
            self._dir = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self._tasks = os.open(os.path.join(path, "tasks"), _WR)
            self._procs = os.open(os.path.join(path, "cgroup.procs"), _RD)
            self._current = os.open(os.path.join(path, "pids.current"), _RD)
        except OSError:
            self.close_fds()
            raise

    def enter(self, tid: bytes) -> None:
        """Move the thread *tid* into this cgroup (v1 moves single threads)."""
        os.write(self._tasks, tid)

    @property
    def frozen(self) -> bool:
        """Whether forks are refused (``pids.max`` 0, set by a kill)."""
        return self._max == 0

    def set_max(self, value: int | None) -> None:
        _write(os.path.join(self.path, "pids.max"), "max" if value is None else str(value))
        self.max_set = value is not None
        self._max = value

    def current(self) -> int:
        """Tasks charged here and below, zombies included (they uncharge when reaped)."""
        return int(os.pread(self._current, 64, 0))

    def members(self) -> list[int]:
        """Live processes in this cgroup and every cgroup nested below it (bounded)."""
        pids = [int(x) for x in _pread_all(self._procs).split()]
        if os.fstat(self._dir).st_nlink <= 2:  # kernfs: 2 + number of subdirectories
            return pids
        stack: list[str] = []
        with contextlib.suppress(OSError), os.scandir(self.path) as it:
            stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        seen = 1
        while stack and seen < _MAX_NESTED:
            here = stack.pop()
            seen += 1
            with contextlib.suppress(OSError):
                with open(os.path.join(here, "cgroup.procs"), "rb") as fh:
                    pids.extend(int(x) for x in fh.read().split())
                with os.scandir(here) as it:
                    stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        return pids

    def reusable(self, known_empty: bool) -> bool:
        """Empty and flat: nothing charged (known or read) and no nested cgroup."""
        try:
            if os.fstat(self._dir).st_nlink != 2:
                return False
            return known_empty or self.current() == 0
        except (OSError, ValueError):
            return False

    def close_fds(self) -> None:
        for fd in (self._dir, self._tasks, self._procs, self._current):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._dir = self._tasks = self._procs = self._current = -1


@typing.final
class CgroupPool:
    """The pids cgroups of one ``System``'s trees: made on demand, reused when empty.

    Guarantee: after :meth:`close` and the release of every lease handed out, none of
    this pool's cgroups remains (nor the base, once no other pool uses it).
    """

    __slots__ = ("_base", "_closed", "_free", "_lock", "_out", "_pid", "enabled")

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._pid = os.getpid()  # a forked child's copy is the parent's: it touches nothing
        self._lock = threading.Lock()
        self._free: list[Lease] = []
        self._out = 0
        self._closed = False
        self._base: _Base | None = None

    def acquire(self) -> Lease | None:
        """A fresh or reused empty cgroup for a new tree; ``None`` when unavailable."""
        if not self.enabled or os.getpid() != self._pid:
            return None
        with self._lock:
            if self._closed:
                return None
            if self._free:
                self._out += 1
                return self._free.pop()
            if self._base is None:
                self._base = _take_base()
                if self._base is None:
                    return None
            base = self._base
            self._out += 1
        path = os.path.join(base.path, f"t{next(_counter)}")
        try:
            os.mkdir(path, 0o700)
            return Lease(path)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            self._returned()
            return None

    def home(self) -> int:
        """The fd of our own cgroup's ``tasks`` (valid while a lease is out)."""
        assert self._base is not None
        return self._base.home_tasks

    def release(self, lease: Lease, *, known_empty: bool) -> None:
        """Take back *lease* after its tree was killed and reaped: reuse or remove it."""
        with self._lock:
            keep = not self._closed and len(self._free) < POOL_MAX
        if keep and lease.reusable(known_empty):
            try:
                if lease.max_set:
                    lease.set_max(None)
            except OSError:
                keep = False
            if keep:
                with self._lock:
                    if not self._closed:
                        self._free.append(lease)
                        self._out -= 1
                        return
        lease.close_fds()
        remove_tree(lease.path)
        self._returned()

    def _returned(self) -> None:
        with self._lock:
            self._out -= 1
            base = self._base if self._closed and self._out == 0 else None
            if base is not None:
                self._base = None
        if base is not None:
            _drop_base(base)

    def close(self) -> None:
        """Remove the free cgroups; the rest go when their trees release them. Idempotent.

        In a child forked from the pool's creator this does nothing: the cgroups are
        the parent's (removing a free one would break the parent's next spawn).
        """
        if os.getpid() != self._pid:
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            free, self._free = self._free, []
            base = self._base if self._out == 0 else None
            if base is not None:
                self._base = None
        for lease in free:
            lease.close_fds()
            remove_tree(lease.path)
        if base is not None:
            _drop_base(base)


def _after_fork_in_child() -> None:
    """The child starts afresh: the parent's base is not its own, a held lock is freed.

    Only the forking thread exists in the child, so nothing else runs here. A lock
    another thread held at the fork would stay held forever; the child's own trees
    get their own ``flux-<child pid>`` base, made on first use.
    """
    global _lock, _base  # noqa: PLW0603 - process-wide state, reset once per fork
    _lock = threading.Lock()
    _base = None


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def remove_leftovers() -> None:
    """At exit, after every System was closed: remove what is left of the base."""
    base = _base
    if base is not None:
        remove_tree(base.path)
