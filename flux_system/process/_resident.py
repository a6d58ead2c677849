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


@typing.final
class Job:
    """One callable for a worker thread, with what it hands back.

    The worker signals the job's end on ``worker_done``, its own duplicate of the
    caller's eventfd ``done``, and closes it itself: whatever the caller does with
    ``done`` (an interrupt may make it close it early), the worker never writes to a
    number that may by then name another file.
    """

    __slots__ = ("_token", "done", "errors", "fn", "over", "worker_done")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.errors: list[BaseException] = []
        self._token = [True]  # popped once: by the worker (runs it) or a cancel (never runs)
        self.over = False  # the worker has signalled its end
        self.done = os.eventfd(0, os.EFD_CLOEXEC)
        try:
            self.worker_done = os.dup(self.done)  # O_CLOEXEC by default
        except BaseException:
            os.close(self.done)
            raise

    def claim(self) -> bool:
        """Whether this call took the job (worker: to run it; cancel: so it never runs).
        ``list.pop`` is atomic: exactly one of them gets it, with no lock taken."""
        try:
            self._token.pop()
        except IndexError:
            return False
        return True

    @property
    def taken(self) -> bool:
        """The worker (or a cancel) has claimed it."""
        return not self._token


def _read(fd: int) -> int:
    """``eventfd_read``, retried on ``EINTR`` (a signal whose handler returned): this
    interpreter's ``os.eventfd_read`` does not retry it (PEP 475 notwithstanding)."""
    while True:
        try:
            return os.eventfd_read(fd)
        except InterruptedError:
            continue


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
    A job :meth:`cancel` took back never runs; a count without its job (an interrupt
    between the two, or a cancelled job) only wakes the worker to look again.
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

    def cancel(self, job: Job) -> bool:
        """Take *job* back if the worker has not claimed it; whether it will never run.
        A cancelled job still queued is skipped by the worker, which touches nothing
        of it: its fds are the canceller's to close."""
        return job.claim()

    def close(self) -> None:
        """Accept no more jobs; the worker ends after those already queued. Idempotent."""
        with self._lock:
            if not self._open:
                return
            self._open = False
            self._items.append(None)
            os.eventfd_write(self._fd, 1)

    def get(self) -> Job | None:
        """The next job, waiting for one (the worker only); ``None``: closed.

        A count is a wake-up, not a job: the worker sleeps only while nothing is
        queued, so an item whose count an interrupt kept from being written is still
        served by the next wake-up, and a spare count only wakes it to look again.
        """
        items = self._items
        while True:
            while not items:
                _read(self._fd)  # EFD_SEMAPHORE: one count per put
            job = items.popleft()
            if job is None or job.claim():  # else cancelled: skipped, untouched
                return job

    def retire(self) -> None:
        """Close the fd: called once, by the worker ending, or for a worker never run."""
        os.close(self._fd)


def hand_off(jobs: Jobs, fn: Callable[[], None]) -> None:
    """Queue *fn* for the thread serving *jobs*, wait for it, re-raise what it raised.

    Waits for the job even through ``KeyboardInterrupt`` (re-raised afterwards), landing
    anywhere from the queueing on, once or many times: the caller must never clean up
    a fork that is still in progress. A job an interrupt stopped before the worker took
    it is taken back and never runs. Shared by the resident thread and the sandbox's
    confined spawner thread.

    Not guaranteed under a storm of interrupts microseconds apart (another process
    signalling this one in a loop): CPython can raise one at a loop's back edge, outside
    any ``try``, so one may still surface while the job runs (measured: 1-3 of 300
    hand-offs with a SIGINT every ~50 us), and an interrupt landing just as
    ``os.eventfd``/``os.dup`` returns loses that fd. The worker survives either way and
    never writes to a number reused meanwhile (it signals on its own duplicate).
    """
    job = Job(fn)
    interrupted: BaseException | None = None
    queued = consumed = cancelled = False
    while True:  # every interrupt comes back here until the job is settled
        try:
            if not queued:
                queued = True  # before put: an interrupt in it is settled by cancel
                jobs.put(job)
            if not consumed:
                consumed = True  # before the read: after an interrupt, never read again
                _read(job.done)
            else:
                _wait_over(job)
            break
        except BaseException as exc:  # re-raised once the job is settled
            if interrupted is None:
                interrupted = exc
            if jobs.cancel(job):  # it never ran and never will
                cancelled = True
                break
    os.close(job.done)
    if cancelled:  # the worker never had it: its end is ours to close
        os.close(job.worker_done)
    if job.errors:
        raise job.errors[0]
    if interrupted is not None:
        raise interrupted


def _wait_over(job: Job) -> None:
    """Wait until the worker is past *job*, never reading its end (the read that was
    interrupted may have consumed it): *done* readable or *over* marked."""
    while not job.over and not select.select([job.done], [], [], _OVER_POLL_S)[0]:
        pass


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
            try:
                if error is not None:
                    raise error
                job.fn()
            except BaseException as exc:  # handed back to the caller
                job.errors.append(exc)
            finally:
                try:
                    os.eventfd_write(job.worker_done, 1)
                finally:
                    job.over = True  # the caller may close its own end now
                    os.close(job.worker_done)
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
