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

import collections
import errno
import os
import select
import threading
import time
import typing
from collections.abc import Callable

__all__ = ["Job", "Jobs", "Resident", "hand_off", "serve"]

_EXIT_POLLS = 2000  # x 0.5 ms: a thread's exit after join takes microseconds
_OVER_POLL_S = 0.001  # after an interrupt: how often the job's end is looked for
Job = tuple[Callable[[], None], list[BaseException], int, list[bool]]
"""A callable for a worker thread, the list its exception lands in, the eventfd the
worker signals when the job is over, and the list it marks once it has signalled."""


@typing.final
class Jobs:
    """The job queue of one worker thread, which sleeps on an eventfd between jobs.

    Why an eventfd and not a ``queue.SimpleQueue`` and a ``threading.Event``: a spawn
    pays this hand-off twice (the job to the worker, its end back), and sleeping in
    ``read(2)`` on an eventfd costs about half of a sleep on a lock on this kind of
    host (17-20 us against 38-49 us for the round trip, decision 0028 amended); an
    ``Event`` costs more still, since its waiter wakes on a condition whose lock the
    setter still holds and sleeps a second time.

    Guarantee: after :meth:`close` no job is accepted (``OSError(ESHUTDOWN)``), the
    jobs queued before it are still served, and the fd is closed by the worker itself
    on its way out (:meth:`retire`), so it is never closed while the worker reads it.
    """

    __slots__ = ("_fd", "_items", "_lock", "_open")

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_SEMAPHORE)
        self._items: collections.deque[Job | None] = collections.deque()
        self._lock = threading.Lock()
        self._open = True

    def put(self, job: Job) -> None:
        """Queue *job*; ``OSError(ESHUTDOWN)`` once :meth:`close` ran."""
        with self._lock:
            if not self._open:
                raise OSError(errno.ESHUTDOWN, "the worker thread is closed")
            self._items.append(job)
            os.eventfd_write(self._fd, 1)

    def close(self) -> None:
        """Accept no more jobs; the worker ends after those already queued. Idempotent."""
        with self._lock:
            if not self._open:
                return
            self._open = False
            self._items.append(None)
            os.eventfd_write(self._fd, 1)

    def get(self) -> Job | None:
        """The next job, waiting for one (the worker only); ``None``: closed."""
        os.eventfd_read(self._fd)  # EFD_SEMAPHORE: one count per queued item
        return self._items.popleft()

    def retire(self) -> None:
        """Close the fd: called once, by the worker ending, or for a worker never run."""
        os.close(self._fd)


def hand_off(jobs: Jobs, fn: Callable[[], None]) -> None:
    """Queue *fn* for the thread serving *jobs*, wait for it, re-raise what it raised.

    Waits for the job even through ``KeyboardInterrupt`` (re-raised afterwards): the
    caller must never clean up a fork that is still in progress. Shared by the
    resident thread and the sandbox's confined spawner thread.
    """
    errors: list[BaseException] = []
    over: list[bool] = []
    done = os.eventfd(0, os.EFD_CLOEXEC)
    try:
        jobs.put((fn, errors, done, over))
    except BaseException:
        os.close(done)
        raise
    interrupted: BaseException | None = None
    try:
        os.eventfd_read(done)
    except BaseException as exc:  # re-raised once the job is over
        interrupted = exc
        _wait_over(done, over)
    finally:
        os.close(done)  # only now: the worker has written its last to it
    if errors:
        raise errors[0]
    if interrupted is not None:
        raise interrupted


def _wait_over(done: int, over: list[bool]) -> None:
    """Wait, through any further interrupt, until the worker is past its job.

    After an interrupt it is not known whether the read of *done* consumed the
    worker's signal (a signal handler's exception can land just after the read
    returned), so this never reads: it looks for *done* readable (not yet consumed)
    or *over* marked (the worker has signalled), whichever shows first.
    """
    while True:
        try:
            if over or select.select([done], [], [], _OVER_POLL_S)[0]:
                return
        except BaseException:  # noqa: S112 - the first interrupt is the one re-raised
            continue


def serve(jobs: Jobs, error: BaseException | None = None) -> None:
    """Run the jobs queued on *jobs* in this thread until it is closed, then retire it.

    Each job's exception is handed back to its caller; *error* (this worker could not
    be set up) is raised in place of every job, so no job runs unconfined.
    """
    try:
        while True:
            job = jobs.get()
            if job is None:
                return
            fn, errors, done, over = job
            try:
                if error is not None:
                    raise error
                fn()
            except BaseException as exc:  # handed back to the caller
                errors.append(exc)
            finally:
                os.eventfd_write(done, 1)
                over.append(True)  # after the write: the caller may close done now
    finally:
        jobs.retire()


@typing.final
class Resident:
    """One daemon thread inside a v1 cgroup (its ``tasks`` fd given), forking there."""

    __slots__ = ("_closed", "_jobs", "_thread", "error", "tid")

    def __init__(self, tasks_fd: int) -> None:
        """Start the thread and wait until it is inside (or failed to enter).

        Raises:
            OSError: the thread could not enter the cgroup (``ENODEV``: removed).
        """
        self._jobs = Jobs()
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
            self._jobs.retire()  # the thread never served it
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
        serve(self._jobs)

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
        self._jobs.close()
        if self._thread is threading.current_thread():
            return
        self._thread.join()
        task = f"/proc/self/task/{self.tid.decode()}"
        for _ in range(_EXIT_POLLS):
            if not os.path.exists(task):
                return
            time.sleep(0.0005)
