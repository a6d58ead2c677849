"""Outside attack on the hand-off (``hand_off`` / ``_wait_over`` / ``serve``).

Stated guarantee: the caller waits for the job even through ``KeyboardInterrupt``
(re-raised afterwards) and the job's eventfd is never closed before the worker wrote
to it. Each test puts an interrupt at one point a SIGINT's handler can surface
(CPython runs it where the eval loop checks for pending signals: after a builtin call
returns, at a function's entry, on a loop's back edge) and records, while the job is
still held, whether the caller came back before the job was over.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from flux_system import System
from flux_system.process import _resident
from flux_system.process._cgroup import process_limit_available
from flux_system.process._resident import Job, Jobs, hand_off, serve
from tests._capabilities import require
from tests.flux_system.process._process_support import (
    PIDS_LIMIT,
    cgroup_dirs,
    descendants,
    make_ws,
)

_HOLD_S = 5.0  # bound on how long a held job waits for the test to release it


def _worker(jobs: Jobs, died: list[BaseException] | None = None) -> threading.Thread:
    def run() -> None:
        try:
            serve(jobs)
        except BaseException as exc:  # the worker itself failed (its end's write)
            if died is None:
                raise
            died.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return False
    return True


class _InterruptAfterQueued:
    """A job queue whose ``put`` is interrupted once the job is queued and signalled:
    a SIGINT whose handler runs as ``os.eventfd_write`` (or ``put``) returns."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self.queued: list[Job] = []

    def put(self, job: Job) -> None:
        self.jobs.put(job)
        self.queued.append(job)
        for _ in range(5000):  # once the worker took it: a job that must be waited for
            if job.taken:
                break
            threading.Event().wait(0.001)
        raise KeyboardInterrupt

    def cancel(self, job: Job) -> bool:
        return self.jobs.cancel(job)


def _until(cond: Callable[[], bool]) -> None:
    """Wait (bounded) until *cond* holds."""
    for _ in range(5000):
        if cond():
            return
        threading.Event().wait(0.001)


def _held_job() -> tuple[Callable[[], None], threading.Event, threading.Event, list[int]]:
    release = threading.Event()
    finished = threading.Event()
    ran: list[int] = []

    def job() -> None:
        ran.append(1)
        release.wait(_HOLD_S)
        finished.set()

    return job, release, finished, ran


def test_an_interrupt_as_the_job_is_queued_still_waits_for_the_job(tmp_path: Path) -> None:
    """The interrupt surfaces after the job is queued: ``hand_off`` closes the job's
    eventfd and returns while the job runs; the worker later writes its end to that
    fd number, which by then may be another file (here: one dup'ed onto it)."""
    jobs = Jobs()
    worker = _worker(jobs)
    job, release, finished, ran = _held_job()
    queue = _InterruptAfterQueued(jobs)
    with pytest.raises(KeyboardInterrupt):
        hand_off(queue, job)  # type: ignore[arg-type]
    over_when_raised = finished.is_set()
    queued = queue.queued[0]
    done = queued.done
    done_open_when_raised = _is_open(done)
    victim = b""
    path = os.path.join(str(tmp_path), "victim")
    if not done_open_when_raised:  # the number is free: another file takes it
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if fd != done:  # usually the lowest free number is that very one
            os.dup2(fd, done, inheritable=False)
            os.close(fd)
    release.set()
    finished.wait(_HOLD_S)
    worker_alive = True
    for _ in range(1000):
        if queued.over:
            break
        worker.join(0.005)
    if not done_open_when_raised:
        os.close(done)
        with open(path, "rb") as fh:
            victim = fh.read()
    jobs.close()
    worker.join(_HOLD_S)
    worker_alive = worker.is_alive()
    assert ran == [1] and len(queue.queued) == 1  # positive control: the job was queued, ran
    assert not worker_alive
    # The caller may close its own end once the job is over: the worker signals on
    # its own duplicate, so nothing is ever written to a number reused meanwhile.
    assert (over_when_raised, victim) == (True, b"")


def test_a_second_interrupt_at_the_entry_of_the_wait_for_the_end_still_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGINT storm: the first interrupt lands in the blocking read of the job's end,
    the next one as ``_wait_over`` is entered (before its ``try``). It propagates to
    ``hand_off``'s ``finally``, which closes the eventfd while the job runs."""
    jobs = Jobs()
    died: list[BaseException] = []
    worker = _worker(jobs, died)
    job, release, finished, ran = _held_job()
    caller = threading.get_ident()
    real_read = os.eventfd_read
    real_wait_over = _resident._wait_over
    interrupts: list[str] = []
    seen_done: list[int] = []

    def read(fd: int) -> int:
        if threading.get_ident() != caller:  # the worker's wait for jobs
            return real_read(fd)
        seen_done.append(fd)
        interrupts.append("read")
        _until(lambda: bool(ran))  # the worker runs it: it must be waited for
        raise KeyboardInterrupt  # as if SIGINT arrived while the read blocked

    def wait_over(job: Job) -> None:
        if len(interrupts) == 1:
            interrupts.append("wait_over entry")
            raise KeyboardInterrupt  # the second SIGINT, at the function's entry
        real_wait_over(job)

    monkeypatch.setattr(os, "eventfd_read", read)
    monkeypatch.setattr(_resident, "_wait_over", wait_over)
    with pytest.raises(KeyboardInterrupt):
        hand_off(jobs, job)
    monkeypatch.undo()
    over_when_raised = finished.is_set()
    done_open_when_raised = _is_open(seen_done[0]) if seen_done else None
    release.set()
    finished.wait(_HOLD_S)
    worker.join(0.2)  # a worker that died on its end's write is gone by now
    if worker.is_alive():  # (a dead one retired the queue's fd on its way out)
        jobs.close()
        worker.join(_HOLD_S)
    assert interrupts == ["read", "wait_over entry"] and ran == [1]  # positive control
    assert not worker.is_alive()
    worker_errors = [repr(e) for e in died]
    assert (over_when_raised, worker_errors) == (True, [])
    assert done_open_when_raised is not None  # positive control: the read was reached


def test_interrupts_in_the_wait_for_the_end_never_leave_it_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: interrupts landing inside ``_wait_over``'s own ``try`` (in the select)
    are absorbed until the job is over, and the first one is re-raised."""
    jobs = Jobs()
    worker = _worker(jobs)
    job, release, finished, ran = _held_job()
    caller = threading.get_ident()
    real_read = os.eventfd_read
    real_select = select.select
    calls: list[int] = []

    def read(fd: int) -> int:
        if threading.get_ident() != caller:
            return real_read(fd)
        _until(lambda: bool(ran))  # the worker runs it: it must be waited for
        raise KeyboardInterrupt("first")

    def fake_select(
        r: list[int], w: list[int], x: list[int], timeout: float | None = None
    ) -> tuple[list[int], list[int], list[int]]:
        calls.append(1)
        if len(calls) == 3:
            release.set()
        if len(calls) < 20:
            raise KeyboardInterrupt("later")
        return real_select(r, w, x, timeout)

    monkeypatch.setattr(os, "eventfd_read", read)
    monkeypatch.setattr(select, "select", fake_select)
    with pytest.raises(KeyboardInterrupt, match="first"):
        hand_off(jobs, job)
    monkeypatch.undo()
    assert finished.is_set() and ran == [1] and len(calls) >= 20
    jobs.close()
    worker.join(_HOLD_S)
    assert not worker.is_alive()


def test_an_interrupt_between_queueing_and_signalling_a_job_runs_no_stale_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The interrupt surfaces in ``put`` after the job was appended and before the
    eventfd was written (a builtin call returned: a signal check). ``hand_off`` gives
    up on the job, yet it stays queued: the next ``put``'s count wakes the worker for
    it and the abandoned job runs then. Its end goes to its closed eventfd's number —
    here reused by the next caller's own eventfd, so the next ``hand_off`` returns as
    if its job were over before that job ran (or, without the reuse, the worker dies
    on ``EBADF`` and the next caller waits forever)."""
    jobs = Jobs()
    queue_fd = jobs._fd
    died: list[BaseException] = []
    worker = _worker(jobs, died)
    caller = threading.get_ident()
    real_write = os.eventfd_write
    fired: list[int] = []

    def write(fd: int, value: int) -> None:
        if threading.get_ident() == caller and not fired:
            fired.append(fd)
            raise KeyboardInterrupt  # pending since the append returned
        real_write(fd, value)

    ran: list[str] = []
    monkeypatch.setattr(os, "eventfd_write", write)
    with pytest.raises(KeyboardInterrupt):
        hand_off(jobs, lambda: ran.append("abandoned"))
    monkeypatch.undo()
    ran_when_returned: list[list[str]] = []

    def next_caller() -> None:
        hand_off(jobs, lambda: ran.append("next"))
        ran_when_returned.append(list(ran))

    second = threading.Thread(target=next_caller)
    second.start()
    second.join(_HOLD_S)  # a bound on a hang, not a timing
    hung = second.is_alive()
    if hung:  # release it: its end will never come from the dead worker
        for item in list(jobs._items):
            if item is not None:
                real_write(item.done, 1)
        second.join(_HOLD_S)
    if worker.is_alive():
        jobs.close()
        worker.join(_HOLD_S)
    assert fired == [queue_fd]  # positive control: it landed in put, before its write
    worker_errors = [repr(e) for e in died]
    assert (ran_when_returned, hung, worker_errors) == ([["next"]], False, [])


# -- the same through System, as root on a v1 host (a resident thread forks) -----------


def _system_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _fresh_system(tmp_path: Path) -> System:
    system = System(make_ws(tmp_path), max_children=4)
    system.run(["/bin/true"])  # warm: the process-wide state, the first tree cgroup
    return system


def test_system_run_interrupted_as_its_fork_is_handed_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One interrupt, surfacing as the job is queued: ``run`` raises the worker's
    ``OSError(EBADF)`` (its end written to the closed eventfd killed the resident,
    whose queue fd the release then wrote to) instead of the interrupt, and a cgroup
    directory of this process is left after ``close()``."""
    require(process_limit_available(), PIDS_LIMIT)
    before_cgroups = cgroup_dirs()
    system = _fresh_system(tmp_path)
    before = _system_fds()
    caller = threading.get_ident()
    real_put = Jobs.put
    fired: list[int] = []

    def put(self: Jobs, job: Job) -> None:
        real_put(self, job)
        if threading.get_ident() == caller and not fired:
            fired.append(1)
            raise KeyboardInterrupt  # SIGINT's handler, as the job's write returned

    monkeypatch.setattr(Jobs, "put", put)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the resident's death
    raised: BaseException | None = None
    try:
        system.run(["/bin/sleep", "0.2"])
    except BaseException as exc:
        raised = exc
    monkeypatch.undo()
    works: list[object] = []
    for _ in range(3):
        try:
            works.append(system.run(["/bin/echo", "hi"]).stdout)
        except OSError as exc:
            works.append(repr(exc))
    system.close()
    left = sorted(descendants())
    stale = sorted(cgroup_dirs() - before_cgroups)
    leaked = sorted(_system_fds() - before)
    assert fired == [1]  # positive control: the fork went through the resident's queue
    assert (type(raised).__name__, works, left, leaked, stale) == (
        "KeyboardInterrupt",
        [b"hi\n"] * 3,
        [],
        [],
        [],
    )


def test_a_signal_with_a_python_handler_neither_kills_the_worker_nor_fails_the_caller() -> None:
    """``os.eventfd_read`` does not retry on ``EINTR`` (PEP 475 is not applied to it):
    a signal whose Python handler returns (as ``flux exec``'s ending handler does from
    its second signal on) fails the caller's wait with ``InterruptedError`` after its
    job succeeded, and one delivered to the idle worker kills it."""
    jobs = Jobs()
    died: list[BaseException] = []
    worker = _worker(jobs, died)
    handled: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    try:
        ran: list[int] = []

        def job() -> None:
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
            threading.Event().wait(0.05)  # the caller is in its read meanwhile
            ran.append(1)

        caller_error = ""
        try:
            hand_off(jobs, job)
        except OSError as exc:
            caller_error = repr(exc)
        signal.pthread_kill(worker.ident or 0, signal.SIGUSR1)  # the worker, idle
        worker.join(0.5)  # a worker killed by it is gone by now
        worker_alive = worker.is_alive()
    finally:
        signal.signal(signal.SIGUSR1, old)
    if worker_alive:
        jobs.close()
        worker.join(_HOLD_S)
    assert ran == [1] and len(handled) >= 1  # positive control: delivered, handled
    assert (caller_error, worker_alive, [repr(e) for e in died]) == ("", True, [])
