"""Per-tree cgroups (v1 ``pids`` or v2): a per-System pool, removal, the base.

Layout: ``<our cgroup>/flux-<pid>/t<N>``, one ``t<N>`` per live tree, in the hierarchy
:func:`flux_system.process._hierarchy.detect` chose. The ``flux-<pid>`` base exists
while some :class:`CgroupPool` is open or still has a lease out; it is removed with the
last one (and at interpreter exit, after every child was killed and reaped —
:mod:`flux_system.process._system` orders that). On v2 the base enables the ``pids``
controller for its trees when our cgroup offers it (docs/decisions/0025).

Guarantee: a lease is handed to a new tree only when it is verifiably empty — no task
charged to it (``pids.current == 0``: not even a zombie), not populated (v2), no nested
cgroup below it — so two trees never share a cgroup. A lease that is not provably empty
is removed instead, and its nested cgroups (which a root child, e.g. a nested flux
process, may have created) are removed bottom-up with it.
Not guaranteed: a root child can move itself out of its cgroup (``cgroup.procs`` of
any cgroup is writable by root); containment of root children needs the sandbox (§2.5).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
import typing

from flux_system.process._hierarchy import detect
from flux_system.process._lease import MAX_NESTED, Lease

__all__ = [
    "CgroupPool",
    "Lease",
    "POOL_MAX",
    "discard",
    "drop_base",
    "hierarchy_version",
    "new_lease",
    "pids_hierarchy_available",
    "process_limit_available",
    "remove_leftovers",
    "remove_tree",
    "take_base",
]

POOL_MAX = 4  # empty cgroups one System keeps for reuse (each holds three or four fds)
# Stale per-process cgroups looked at when this process creates its own.
_MAX_STALE = 4096
_WR = os.O_WRONLY | os.O_CLOEXEC

_lock = threading.Lock()
_counter = itertools.count()


def remove_tree(path: str) -> bool:
    """rmdir *path* and the cgroups nested below it, bottom-up; whether it is gone.

    Only empty cgroups can be removed (the kernel refuses a populated one), so this
    never disturbs a live process. At most :data:`MAX_NESTED` directories are visited.
    """
    order: list[str] = []
    stack = [path]
    while stack and len(order) < MAX_NESTED:
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
    """``flux-<pid>``: the parent of this process's tree cgroups, and (v1) the way home."""

    __slots__ = ("home_tasks", "path", "pids", "proc", "users", "version")

    def __init__(self, path: str, proc: str, version: int, home_tasks: int, pids: bool) -> None:
        self.path = path
        self.pids = pids  # whether the tree cgroups get pids.max
        self.proc = proc
        self.version = version
        self.home_tasks = home_tasks  # v1: our own cgroup's ``tasks``; a thread moves back
        self.users = 0


_base: _Base | None = None
_unavailable = False


def _v2_usable(path: str) -> bool:
    """Raise unless processes can live in v2 cgroups below *path*; enable ``pids``.

    A cgroup whose type is not ``domain`` (threaded, or ``domain invalid``) refuses
    whole processes. ``pids`` is enabled for the trees when *path* is offered it;
    returns whether the trees get ``pids.max``.
    """
    with open(os.path.join(path, "cgroup.type"), encoding="ascii") as fh:
        kind = fh.read().strip()
    if kind != "domain":
        raise PermissionError(f"cgroup type {kind}")
    with open(os.path.join(path, "cgroup.controllers"), encoding="ascii") as fh:
        offered = fh.read().split()
    if "pids" in offered:
        with (
            contextlib.suppress(OSError),
            open(os.path.join(path, "cgroup.subtree_control"), "w", encoding="ascii") as fh,
        ):
            fh.write("+pids")
    with open(os.path.join(path, "cgroup.subtree_control"), encoding="ascii") as fh:
        return "pids" in fh.read().split()


def take_base() -> _Base | None:
    """Reference the base (created on first use); ``None`` without a usable hierarchy."""
    global _base, _unavailable  # noqa: PLW0603 - one base per process
    with _lock:
        if _base is None and not _unavailable:
            made = False
            path = ""
            try:
                found = detect()
                if found is None:
                    raise FileNotFoundError("no cgroup hierarchy mounted")
                _remove_stale(found.own)
                name = f"flux-{os.getpid()}"
                path = os.path.join(found.own, name)
                try:
                    os.mkdir(path, 0o700)
                    made = True
                except FileExistsError:
                    pass
                home = -1
                if found.version == 1:
                    home = os.open(os.path.join(found.own, "tasks"), _WR)
                    pids = True
                else:
                    pids = _v2_usable(path)
                proc = found.proc.rstrip("/") + "/" + name
                _base = _Base(path, proc, found.version, home, pids)
            except OSError:
                if made:
                    remove_tree(path)
                _unavailable = True
        if _base is not None:
            _base.users += 1
        return _base


def drop_base(base: _Base) -> None:
    global _base  # noqa: PLW0603
    with _lock:
        base.users -= 1
        if base.users > 0 or _base is not base:
            return
        _base = None
        # Under the lock: a pool taking a new base meanwhile makes the same directory,
        # and this removal must not take that pool's fresh (empty) tree cgroups too.
        remove_tree(base.path)
    if base.home_tasks >= 0:
        os.close(base.home_tasks)


def pids_hierarchy_available() -> bool:
    """Whether trees can get their own cgroup on this host (v1 ``pids`` or v2)."""
    return hierarchy_version() is not None


def process_limit_available() -> bool:
    """Whether tree cgroups get ``pids.max`` (a process limit that holds for root)."""
    base = take_base()
    if base is None:
        return False
    pids = base.pids
    drop_base(base)
    return pids


def hierarchy_version() -> int | None:
    """1 or 2: the hierarchy trees get their own cgroup in; ``None`` when unavailable."""
    base = take_base()
    if base is None:
        return None
    version = base.version
    drop_base(base)
    return version


def discard(base: _Base | None, lease: Lease | None) -> None:
    """Remove *lease* (ending its resident thread) and drop the reference to *base*."""
    if lease is not None:
        lease.close_fds()
        remove_tree(lease.path)
    if base is not None:
        drop_base(base)


def new_lease(base: _Base) -> Lease | None:
    """A new tree cgroup below *base* (v1: with its resident thread); ``None`` on error."""
    name = f"t{next(_counter)}"
    path = os.path.join(base.path, name)
    try:
        os.mkdir(path, 0o700)
        lease = Lease(path, f"{base.proc}/{name}", base.version)
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None
    # v1: a thread of ours lives in it and forks its children (decision 0028); if it
    # cannot enter, the spawning thread moves in around each fork instead.
    with contextlib.suppress(OSError):
        lease.settle_resident()
    return lease


@typing.final
class CgroupPool:
    """The cgroups of one ``System``'s trees: made on demand, reused when verifiably empty.

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
        from flux_system.process._warm import take_warm  # here: it imports this module

        taken = take_warm()
        if taken is not None:
            base: _Base | None = taken[0]
            with self._lock:
                closed = self._closed
                if not closed:
                    self._out += 1
                    if self._base is None:
                        self._base, base = base, None  # its reference becomes ours
            if closed:
                discard(base, taken[1])
                return None
            if base is not None:
                drop_base(base)  # already ours: one reference is enough
            return taken[1]
        with self._lock:
            if self._closed:
                return None
            if self._base is None:
                self._base = take_base()
                if self._base is None:
                    return None
            base = self._base
            self._out += 1
        lease = new_lease(base)
        if lease is None:
            self._returned()
        return lease

    def home(self) -> int:
        """v1: the fd of our own cgroup's ``tasks`` (valid while a lease is out)."""
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
            drop_base(base)

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
            drop_base(base)


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
