"""The worker hand-off both forking threads use (decision 0028, amended): ``Jobs``,
``hand_off`` and ``serve`` — every job served, errors handed back, nothing accepted
after close, the queue's fd closed by the worker and never before it stops reading."""

from __future__ import annotations

import errno
import os
import select
import signal
import threading
import time
from collections.abc import Callable

import pytest

from flux_system.process._resident import Jobs, hand_off, serve


def _fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def _worker(jobs: Jobs, error: BaseException | None = None) -> threading.Thread:
    thread = threading.Thread(target=serve, args=(jobs, error), daemon=True)
    thread.start()
    return thread


def test_jobs_run_on_the_worker_in_order_and_errors_come_back() -> None:
    jobs = Jobs()
    worker = _worker(jobs)
    seen: list[tuple[int, int]] = []
    for i in range(200):

        def job(i: int = i) -> None:
            seen.append((i, threading.get_native_id()))

        hand_off(jobs, job)
    assert [i for i, _ in seen] == list(range(200))
    assert {tid for _, tid in seen} == {worker.native_id}

    def fail() -> None:
        raise ZeroDivisionError("from the worker")

    with pytest.raises(ZeroDivisionError, match="from the worker"):
        hand_off(jobs, fail)
    hand_off(jobs, lambda: seen.append((-1, 0)))  # the worker survived the error
    assert seen[-1] == (-1, 0)
    jobs.close()
    worker.join(5)
    assert not worker.is_alive()


def test_after_close_no_job_is_accepted_and_the_fd_is_closed_by_the_worker() -> None:
    before = _fds()
    jobs = Jobs()
    assert len(_fds() - before) == 1  # the queue's eventfd
    worker = _worker(jobs)
    hand_off(jobs, lambda: None)
    jobs.close()
    jobs.close()  # idempotent
    worker.join(5)
    assert not worker.is_alive()
    with pytest.raises(OSError) as info:
        hand_off(jobs, lambda: None)
    assert info.value.errno == errno.ESHUTDOWN
    assert _fds() == before  # neither the queue's fd nor any per-job fd is left


def test_jobs_queued_before_close_are_still_served() -> None:
    jobs = Jobs()
    gate = threading.Event()
    ran: list[int] = []

    def job(i: int) -> Callable[[], None]:
        return lambda: ran.append(i)

    callers = [threading.Thread(target=hand_off, args=(jobs, job(i))) for i in range(5)]
    blocker = threading.Thread(target=hand_off, args=(jobs, gate.wait))
    blocker.start()
    for caller in callers:
        caller.start()
    deadline = time.monotonic() + 5
    while len(jobs._items) < 6 and time.monotonic() < deadline:  # all six queued
        time.sleep(0.001)
    assert len(jobs._items) == 6
    jobs.close()  # the worker has not started yet: everything is still queued
    worker = _worker(jobs)
    gate.set()
    for thread in [blocker, *callers]:
        thread.join(5)
    worker.join(5)
    assert sorted(ran) == [0, 1, 2, 3, 4]
    assert not worker.is_alive()


def test_a_worker_that_could_not_be_set_up_runs_no_job() -> None:
    jobs = Jobs()
    worker = _worker(jobs, OSError(errno.EPERM, "restriction failed"))
    ran: list[int] = []
    for _ in range(3):
        with pytest.raises(OSError) as info:
            hand_off(jobs, lambda: ran.append(1))
        assert info.value.errno == errno.EPERM
    assert ran == []
    jobs.close()
    worker.join(5)


def test_an_interrupt_waits_for_the_job_before_it_is_raised() -> None:
    jobs = Jobs()
    worker = _worker(jobs)
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.3)
        finished.set()

    def interrupt() -> None:
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        hand_off(jobs, slow)
    interrupter.join()
    assert finished.is_set()  # the job was over before the interrupt surfaced
    jobs.close()
    worker.join(5)


@pytest.mark.parametrize("jobs_raise", [False, True])
def test_an_interrupt_landing_just_after_the_wait_returned_does_not_wait_again(
    monkeypatch: pytest.MonkeyPatch, jobs_raise: bool
) -> None:
    """A signal handler's exception can surface right after the read of the job's end
    returned (the worker's signal consumed). Seen as ``flux exec`` hanging forever on a
    SIGINT that landed there: the hand-off read again a count already taken. Its
    positive control: the first read really consumed the end before the interrupt."""
    jobs = Jobs()
    worker = _worker(jobs)
    real_read = os.eventfd_read
    consumed: list[int] = []
    waited_again: list[int] = []

    caller = threading.get_ident()

    def read_then_interrupt(fd: int) -> int:
        if threading.get_ident() != caller:  # the worker's own wait for jobs
            return real_read(fd)
        if consumed:  # a second wait on an end already consumed would never return
            if not select.select([fd], [], [], 0)[0]:
                waited_again.append(fd)
                os.eventfd_write(fd, 1)  # so that the defect fails this test, not hangs it
            return real_read(fd)
        consumed.append(real_read(fd))
        raise KeyboardInterrupt  # as if SIGINT's handler ran as the read returned

    ran: list[int] = []

    def job() -> None:
        ran.append(1)
        if jobs_raise:
            raise OSError(errno.EAGAIN, "the job's own error")

    monkeypatch.setattr("flux_system.process._resident.os.eventfd_read", read_then_interrupt)
    expected = OSError if jobs_raise else KeyboardInterrupt
    before = _fds()
    with pytest.raises(expected):
        hand_off(jobs, job)
    monkeypatch.undo()
    assert consumed == [1] and ran == [1]
    assert waited_again == []
    assert _fds() <= before  # the job's eventfd closed
    hand_off(jobs, lambda: ran.append(2))  # the worker still serves
    assert ran == [1, 2]
    jobs.close()
    worker.join(5)
