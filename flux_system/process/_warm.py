"""The first tree cgroup of a process, made ahead in the background (decision 0029).

On cgroup v1 the first move of a thread into a cgroup after a quiet spell waits for an
RCU grace period (15-25 ms on an idle host, decision 0027). A program that spawns soon
after it starts (the ``flux exec`` command) calls :func:`warm_up` first: a thread makes
the cgroup (and, on v1, settles its resident thread, decision 0028) while the program
does its other start-up work, and the first :class:`~._cgroup.CgroupPool` lease that
finds no free cgroup takes it (:func:`take_warm`).

Guarantee: what is made is handed to exactly one pool, or removed at interpreter exit
(the exit hook waits for the warm-up, bounded); a forked child inherits nothing.
Not guaranteed: that it finishes first — the first acquire waits for it (bounded) or
makes its own cgroup.
"""

from __future__ import annotations

import atexit
import os
import threading
import typing

from flux_system.process._cgroup import Lease, discard, drop_base, new_lease, take_base

if typing.TYPE_CHECKING:
    from flux_system.process._cgroup import _Base

__all__ = ["take_warm", "warm_up"]

_WAIT_S = 5.0  # bound on waiting for the warm-up (one mkdir and one thread move)
_lock = threading.Lock()


@typing.final
class _Warm:
    """A tree cgroup being made ahead (or made), until a pool takes it."""

    __slots__ = ("base", "claimed", "done", "lease", "pid")

    def __init__(self) -> None:
        self.claimed = False  # a pool asked for it (it goes to that pool or nowhere)
        self.base: _Base | None = None
        self.lease: Lease | None = None
        self.done = threading.Event()
        self.pid = os.getpid()

    def make(self) -> None:
        try:
            base = take_base()
            if base is None:
                return
            lease = new_lease(base)
            if lease is None:
                drop_base(base)
                return
            self.base, self.lease = base, lease
        finally:
            self.done.set()

    def hand_over(self) -> tuple[_Base | None, Lease | None]:
        """What was made, once: later calls (and the exit hook) get nothing."""
        with _lock:
            base, lease, self.base, self.lease = self.base, self.lease, None, None
        return base, lease


_warm: _Warm | None = None


def warm_up() -> None:
    """Start making this process's first tree cgroup in the background. Idempotent;
    does nothing without a usable hierarchy (see the module docstring)."""
    global _warm  # noqa: PLW0603 - one warm-up per process
    with _lock:
        if _warm is not None and _warm.pid == os.getpid():
            return
        warm = _warm = _Warm()
    threading.Thread(target=warm.make, name="flux-cgroup-warm-up", daemon=True).start()


def take_warm() -> tuple[_Base, Lease] | None:
    """The warm-up's base reference and lease, handed over once (its wait bounded);
    ``None`` when there is none, it failed, or another pool took it."""
    with _lock:
        warm = _warm
        if warm is None or warm.pid != os.getpid() or warm.claimed:
            return None
        warm.claimed = True
    if not warm.done.wait(_WAIT_S):
        return None  # still running: the exit hook removes it
    base, lease = warm.hand_over()
    if base is None or lease is None:
        return None
    return base, lease


def _after_fork_in_child() -> None:
    global _lock, _warm  # noqa: PLW0603 - reset once per fork
    _lock = threading.Lock()
    _warm = None  # the parent's: never the child's


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register  # registered after _cgroup's hook, so it runs before it
def _discard_untaken() -> None:
    warm = _warm
    if warm is not None and warm.pid == os.getpid() and warm.done.wait(_WAIT_S):
        discard(*warm.hand_over())
