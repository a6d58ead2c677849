"""The adaptive receive polling of the port's socket channel (decision 0093).

Real socket pairs; the clock is injected so that the polling policy — when a receive
polls, for how long, and that an idle connection never does — is checked without
depending on how fast this host is.
"""

from __future__ import annotations

import socket
import struct
import threading
import typing

import pytest

from flux_system.remote._channel import SocketChannel
from flux_system.remote._spin import (
    CONTENDED_S,
    MAX_SPIN_S,
    REST_AFTER_CONTENTION,
    SPIN_AFTER_S,
    SpinBudget,
)


class _Clock:
    """A clock that advances by *step* every time it is read, and counts the reads."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    return a, b


def _sent_late(b: socket.socket, data: bytes, receive: typing.Callable[[], int]) -> int:
    """*receive*'s result while *data* is sent on *b* 50 ms later (far past any budget)."""
    timer = threading.Timer(0.05, b.sendall, args=(data,))
    timer.start()
    try:
        return receive()
    finally:
        timer.join()


def _armed(spin: SpinBudget, a: socket.socket, b: socket.socket) -> memoryview:
    """*spin* after one receive of data already there (so the next one polls)."""
    view = memoryview(bytearray(16))
    b.sendall(b"x")
    spin.recv_into(a, view)
    assert spin.budget_s == MAX_SPIN_S
    return view


def test_a_fresh_budget_blocks_at_once_and_receives() -> None:
    a, b = _pair()
    with a, b:
        clock = _Clock(step=0.0)
        spin = SpinBudget(clock)
        b.sendall(b"hello")
        view = memoryview(bytearray(16))
        assert spin.recv_into(a, view) == 5
        assert bytes(view[:5]) == b"hello"
        assert clock.reads == 2  # start and end: no poll loop ran


def test_a_quick_receive_arms_polling_and_a_slow_one_disarms_it() -> None:
    a, b = _pair()
    with a, b:
        clock = _Clock(step=0.0)
        spin = SpinBudget(clock)
        view = _armed(spin, a, b)
        clock.step = SPIN_AFTER_S  # every clock read now looks like a long wait
        b.sendall(b"y")
        spin.recv_into(a, view)
        assert spin.budget_s == 0.0


def test_polling_gives_up_after_its_budget_then_blocks_for_the_data() -> None:
    a, b = _pair()
    with a, b:
        spin = SpinBudget()
        view = _armed(spin, a, b)
        # Nothing is sent for far longer than the budget: the poll must fall back to
        # a blocking receive (a poll that never ended would hang here, not pass).
        got = _sent_late(b, b"late", lambda: spin.recv_into(a, view))
        assert bytes(view[:got]) == b"late"
        assert spin.budget_s == 0.0  # the wait was long: the next receive blocks


def test_the_poll_loop_is_bounded_by_the_budget() -> None:
    a, b = _pair()
    with a, b:
        clock = _Clock(step=0.0)
        spin = SpinBudget(clock)
        view = _armed(spin, a, b)
        clock.step = MAX_SPIN_S / 10
        _sent_late(b, b"z", lambda: spin.recv_into(a, view))
        # arming (2), start, five polls reading the clock twice (the budget, the
        # yield's length: 2 steps each), the sixth's budget check, the blocking end
        assert clock.reads <= 15


def test_the_kernel_timeout_still_applies_after_polling() -> None:
    a, b = _pair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 50_000))
        channel = SocketChannel(a)
        b.sendall(b"x")
        assert channel.recv(16) == b"x"  # armed: the next receive polls first
        with pytest.raises(TimeoutError):
            channel.recv(16)


def test_eof_is_seen_by_a_polling_receive() -> None:
    a, b = _pair()
    with a:
        spin = SpinBudget()
        view = _armed(spin, a, b)
        b.close()
        assert spin.recv_into(a, view) == 0


def _reads_while_waiting(spin: SpinBudget, a: socket.socket, b: socket.socket) -> int:
    """Arm *spin*, then receive data sent 50 ms later; how often the clock was read."""
    spin._clock = _Clock(step=0.0)
    view = _armed(spin, a, b)
    clock = _Clock(step=0.0)  # a poll never runs out of budget on this clock
    spin._clock = clock
    got = _sent_late(b, b"y", lambda: spin.recv_into(a, view))
    assert bytes(view[:got]) == b"y"
    return clock.reads


def test_only_one_thread_polls_at_a_time() -> None:
    from flux_system.remote import _spin

    a, b = _pair()
    with a, b:
        assert _reads_while_waiting(SpinBudget(), a, b) > 2  # control: it polled
        assert _spin._POLLING.acquire(blocking=False)  # as if another thread polled
        try:
            assert _reads_while_waiting(SpinBudget(), a, b) == 2  # it blocked at once
        finally:
            _spin._POLLING.release()


def test_a_contended_poll_blocks_and_the_next_receives_block_at_once() -> None:
    """A yield that kept the poller off its CPU (another task ran) ends the polling:
    under contention a blocked receive is woken sooner than a yielded poller runs."""
    a, b = _pair()
    with a, b:
        clock = _Clock(step=0.0)
        spin = SpinBudget(clock)
        view = _armed(spin, a, b)
        clock.step = CONTENDED_S * 1.01  # a yield is one step: contended
        got = _sent_late(b, b"c", lambda: spin.recv_into(a, view))
        assert bytes(view[:got]) == b"c"
        assert clock.reads - 2 == 4  # start, one poll (budget, yield), blocking end
        clock.step = 0.0  # every wait now looks quick: polling would be armed
        for _ in range(REST_AFTER_CONTENTION):
            clock.reads = 0
            b.sendall(b"r")
            assert spin.recv_into(a, view) == 1
            assert clock.reads == 2  # it blocked at once: no poll loop ran
        clock.reads = 0
        got = _sent_late(b, b"p", lambda: spin.recv_into(a, view))
        assert clock.reads > 2  # the rest is over: it polls again


def test_an_uncontended_poll_keeps_polling() -> None:  # the control of the test above
    a, b = _pair()
    with a, b:
        clock = _Clock(step=0.0)
        spin = SpinBudget(clock)
        view = _armed(spin, a, b)
        clock.step = CONTENDED_S * 0.99
        _sent_late(b, b"c", lambda: spin.recv_into(a, view))
        assert clock.reads - 2 > 4
