"""Adaptive busy-polling of a socket receive (decision 0093).

On a virtual machine an idle CPU halts, and waking a thread that blocked in ``recv``
costs tens of microseconds more than the answer took to arrive — the more so the
longer the thread slept. A request/response exchange pays it on both sides of every
round trip. Polling the socket without blocking for a short while before blocking
keeps the answer's CPU awake when the answer is about to arrive.

:class:`SpinBudget` decides how long to poll from what the last receive waited: a
receive whose data arrived within :data:`SPIN_AFTER_S` lets the next one poll for up
to :data:`MAX_SPIN_S`; one that waited longer makes the next one block at once — so a
connection that is idle, or whose messages are far apart, never polls, and a busy one
polls at most :data:`MAX_SPIN_S` per received message. One thread of a process polls at
a time (the others block at once), and it yields the CPU between two polls
(``sched_yield``): a poller that kept its CPU from a runnable peer — on a busy host,
often the very process whose answer it awaits — made a round trip three times slower
(measured at load 5: 600 us without the yield, 200-275 us with it, 175-235 us not
polling at all). (The threshold is above the
budget because a woken thread's slow start is what the polling removes: without it the
answers of a quick exchange arrive later than the budget, and polling never begins.)
A yield that kept the poller off its CPU for more than :data:`CONTENDED_S` means
another task wanted that CPU: the receive then blocks at once, and so do the next
:data:`REST_AFTER_CONTENTION` ones (decision 0130) — under contention a blocked thread
is woken (and preempts the task running) sooner than a poller that yielded gets its
turn back.

Guarantees: the bound above (per receive, at most ``MAX_SPIN_S`` of CPU spent
polling), and nothing changes what is received — a poll that finds nothing falls
back to the ordinary blocking receive, with its kernel timeout. Not guaranteed: that
polling wins (on an idle host it does; under CPU contention the budget collapses to
zero because answers are slow).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import typing

__all__ = ["CONTENDED_S", "MAX_SPIN_S", "REST_AFTER_CONTENTION", "SPIN_AFTER_S", "SpinBudget"]

MAX_SPIN_S = 200e-6
"""The longest a receive polls before blocking."""

SPIN_AFTER_S = 1e-3
"""A receive polls only if the previous one waited less than this."""

CONTENDED_S = 50e-6
"""A yield that kept the poller off its CPU longer than this means another task needed
the CPU: the receive blocks at once (a wake-up then preempts that task, where a poller
that yielded waits for the end of its slice)."""

REST_AFTER_CONTENTION = 64
"""Receives that block at once after a contended poll, before polling is tried again."""

_DONTWAIT = socket.MSG_DONTWAIT
_yield = os.sched_yield
# One thread of a process polls at a time: pollers hold the interpreter lock between
# their non-blocking receives, so two of them slow each other and every other thread.
_POLLING = threading.Lock()


@typing.final
class SpinBudget:
    """The polling budget of one socket's receives (used by its one reading thread)."""

    __slots__ = ("_budget", "_clock", "_rest")

    def __init__(self, clock: typing.Callable[[], float] = time.perf_counter) -> None:
        self._budget = 0.0
        self._clock = clock
        self._rest = 0  # receives left that block at once (after a contended poll)

    @property
    def budget_s(self) -> float:
        """What the next receive will poll for, in seconds (0: it blocks at once)."""
        return self._budget

    def recv_into(self, sock: socket.socket, view: memoryview) -> int:
        """``sock.recv_into(view)``, polling for at most the current budget first.

        Raises what ``recv_into`` raises; ``BlockingIOError`` only from the final
        blocking receive (a kernel ``SO_RCVTIMEO``), never from a poll.
        """
        clock = self._clock
        start = clock()
        if self._rest:
            self._rest -= 1
        elif self._budget and _POLLING.acquire(blocking=False):
            try:
                end = start + self._budget
                while True:
                    try:
                        got = sock.recv_into(view, 0, _DONTWAIT)
                    except BlockingIOError:
                        now = clock()
                        if now >= end:
                            break
                        _yield()  # another runnable task on this CPU goes first
                        if clock() - now > CONTENDED_S:  # and one did: block, and rest
                            self._rest = REST_AFTER_CONTENTION
                            break
                        continue
                    self._learn(clock() - start)
                    return got
            finally:
                _POLLING.release()
        got = sock.recv_into(view)
        self._learn(clock() - start)
        return got

    def _learn(self, waited: float) -> None:
        self._budget = MAX_SPIN_S if waited < SPIN_AFTER_S else 0.0
