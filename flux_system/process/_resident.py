"""A thread that lives in one v1 tree cgroup and forks that cgroup's children.

Why (decision 0028): a v1 child is born in its tree's cgroup because the forking thread
is in it. Moving a thread there and back takes the kernel's global
``cgroup_threadgroup_rwsem`` for writing, and the first such write after a quiet period
waits for an RCU grace period — about 20 ms on this kind of host (``HZ=100``), paid by
every spawn that does not follow another within that window. A resident thread enters
its cgroup once, when the cgroup is made, and stays: a spawn hands its fork to it, and
nothing migrates per spawn.

What it changes for membership: this process's own thread is in the cgroup, so the
process is listed in ``cgroup.procs`` (every kill already skips our own pid) and the
thread is charged to ``pids.current`` and against ``pids.max`` —
:class:`~flux_system.process._lease.Lease` subtracts it from the one and adds it to
the other, so a tree still sees exactly its own count and its own limit.

Guarantee: the resident runs only the callables it is handed (the spawn builder's
fork) and returns what they raised; :meth:`Resident.run` waits for the job to end
even through ``KeyboardInterrupt`` (re-raised afterwards), so a caller never cleans up
a fork still in progress. :meth:`Resident.close` waits until the
kernel has let the thread go before it returns, so the cgroup can be removed then.
Not guaranteed: anything on v2 (a v2 domain cgroup takes whole processes; the v2 child
moves itself, decision 0025).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import typing
from collections.abc import Callable

__all__ = ["Job", "Resident", "hand_off"]

_EXIT_POLLS = 2000  # x 0.5 ms: a thread's exit after join takes microseconds
Job = tuple[Callable[[], None], list[BaseException], threading.Event]
"""A callable for a worker thread, the list its exception lands in, and its done flag."""


def hand_off(jobs: queue.SimpleQueue[Job | None], fn: Callable[[], None]) -> None:
    """Queue *fn* for the thread serving *jobs*, wait for it, re-raise what it raised.

    Waits for the job even through ``KeyboardInterrupt`` (re-raised afterwards): the
    caller must never clean up a fork that is still in progress. Shared by the
    resident thread and the sandbox's confined spawner thread.
    """
    errors: list[BaseException] = []
    done = threading.Event()
    jobs.put((fn, errors, done))
    interrupted: BaseException | None = None
    while True:
        try:
            done.wait()
            break
        except BaseException as exc:  # re-raised once the fork is over
            interrupted = exc
    if errors:
        raise errors[0]
    if interrupted is not None:
        raise interrupted


@typing.final
class Resident:
    """One daemon thread inside a v1 cgroup (its ``tasks`` fd given), forking there."""

    __slots__ = ("_closed", "_jobs", "_thread", "error", "tid")

    def __init__(self, tasks_fd: int) -> None:
        """Start the thread and wait until it is inside (or failed to enter).

        Raises:
            OSError: the thread could not enter the cgroup (``ENODEV``: removed).
        """
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._closed = False
        self.error: OSError | None = None
        self.tid = b""
        entered = threading.Event()
        self._thread = threading.Thread(
            target=self._main, args=(tasks_fd, entered), name="flux-cgroup-resident", daemon=True
        )
        self._thread.start()
        entered.wait()
        if self.error is not None:
            self._thread.join()
            raise self.error

    def _main(self, tasks_fd: int, entered: threading.Event) -> None:
        self.tid = b"%d" % threading.get_native_id()
        try:
            os.write(tasks_fd, self.tid)
        except OSError as exc:
            self.error = exc
            return
        finally:
            entered.set()
        while True:
            job = self._jobs.get()
            if job is None:
                break
            fn, errors, done = job
            try:
                fn()
            except BaseException as exc:  # handed back to the caller
                errors.append(exc)
            finally:
                done.set()

    @property
    def alive(self) -> bool:
        """Whether the thread is in its cgroup (started, entered, not closed)."""
        return not self._closed and self.error is None

    def run(self, fn: Callable[[], None]) -> None:
        """Run *fn* on the resident thread; re-raise what it raised."""
        if self._closed:
            raise OSError(19, "the cgroup's resident thread is closed")  # ENODEV
        hand_off(self._jobs, fn)

    def close(self) -> None:
        """End the thread and wait until the kernel has let it go. Idempotent.

        An exiting thread leaves its cgroup without a migration; ``join`` returns just
        before the thread's exit, so this also waits (bounded) until the task is gone
        from ``/proc/self/task``, after which the cgroup can be removed.
        """
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        if self._thread is threading.current_thread():
            return
        self._thread.join()
        task = f"/proc/self/task/{self.tid.decode()}"
        for _ in range(_EXIT_POLLS):
            if not os.path.exists(task):
                return
            time.sleep(0.0005)
