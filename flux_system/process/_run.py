"""Driving one started child to its end: output, stdin feeding, exit, tree kill.

One state machine (:class:`Session`) and two drivers over it: :func:`drive_sync`
(``poll(2)`` in the calling thread) and :func:`drive_async` (the running asyncio loop's
readers). Both watch the child's pidfd, so the exit of the leader is seen even when a
grandchild still holds the pipes; at that moment the whole tree is killed, so the
pipes reach EOF and nothing outlives the run.
"""

from __future__ import annotations

import array
import fcntl
import os
import select
import termios
import time
import typing
from collections.abc import Callable, ItemsView

from flux_system.process._spawn import Spawned

__all__ = ["Session", "Sink", "drive_async", "drive_sync"]

_STDIN_CHUNK = 1 << 16
# After a kill, and after the leader's exit (which kills the tree), wait at most this
# long for the pipes to reach EOF: a writer outside a contained tree (an uncontained
# daemon, a root child that left its cgroup) could hold them open forever.
_DRAIN_AFTER_KILL_S = 0.5
# Longest single poll(2) wait: a huge timeout is waited for in slices (poll takes an
# int of milliseconds; 1e300 s would overflow it).
_MAX_WAIT_MS = 1 << 30


class Sink(typing.Protocol):
    def read_from(self, fd: int) -> bool: ...


def _pipe_pending(fd: int) -> int:
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    except OSError:
        return 0
    return buf[0]


@typing.final
class Session:
    """The state of one child while it runs (single-threaded use)."""

    def __init__(
        self, sp: Spawned, stdin: bytes | None, out: Sink, err: Sink, *, keep_stdin: bool = False
    ) -> None:
        self.sp = sp
        self._stdin = memoryview(stdin) if stdin else memoryview(b"")
        self._sinks: dict[int, Sink] = {sp.stdout_fd: out, sp.stderr_fd: err}
        self.exited = False
        self._killed_after_exit = False
        self.stdin_left = 0
        self.forget: Callable[[int], None] = lambda fd: None
        if sp.stdin_fd is not None and not self._stdin and not keep_stdin:
            self._close_stdin()

    @property
    def open_outputs(self) -> tuple[int, ...]:
        return tuple(self._sinks)

    def sinks(self) -> ItemsView[int, Sink]:
        """The output fds still open and their sinks (a live view: copy to mutate)."""
        return self._sinks.items()

    @property
    def done(self) -> bool:
        return self.exited and not self._sinks

    def close_stdin(self) -> None:
        """Close our end of the child's stdin (EOF for the child). Idempotent."""
        self._close_stdin()

    def _close_stdin(self) -> None:
        fd = self.sp.stdin_fd
        if fd is not None:
            self.forget(fd)
            os.close(fd)
            self.sp.stdin_fd = None

    def on_readable(self, fd: int) -> None:
        sink = self._sinks.get(fd)
        if sink is not None and not sink.read_from(fd):
            del self._sinks[fd]
            self.forget(fd)
            os.close(fd)
            if fd == self.sp.stdout_fd:
                self.sp.stdout_fd = -1
            else:
                self.sp.stderr_fd = -1

    def on_writable(self) -> None:
        fd = self.sp.stdin_fd
        if fd is None:
            return
        try:
            n = os.write(fd, self._stdin[:_STDIN_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # EPIPE cannot happen while the probe holds a read end
            self._close_stdin()
            return
        self._stdin = self._stdin[n:]
        if not self._stdin:
            self._close_stdin()

    def on_exit(self) -> None:
        """The leader exited: account for unread stdin, then kill the rest of the tree."""
        if self.exited:
            return
        self.exited = True
        if self.sp.stdin_probe is not None:
            self.stdin_left = len(self._stdin) + _pipe_pending(self.sp.stdin_probe)
        if self.sp.stdin_fd is not None:
            self._close_stdin()
        self.forget(self.sp.pidfd)
        launch = self.sp.launch
        if launch is not None and launch.exited is not None:
            launch.exited()
        self.sp.tree.kill(leader_exited=True)
        self._killed_after_exit = True

    def kill(self) -> None:
        """Kill the whole tree now (timeout, cancellation, ``kill()``)."""
        self._killed_after_exit = False  # finish() kills again before the reap
        self.sp.tree.kill()
        if self.sp.stdin_fd is not None:
            self._close_stdin()

    def drain_after_kill(self) -> None:
        """Collect what the killed tree left in the pipes (bounded wait).

        ``poll``, not ``select``: the pipe fds may be above ``FD_SETSIZE`` (1024).
        """
        end = time.monotonic() + _DRAIN_AFTER_KILL_S
        while self._sinks:
            left = end - time.monotonic()
            if left <= 0:
                break
            poller = select.poll()
            for fd in self._sinks:
                poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll(int(left * 1000) + 1):
                self.on_readable(fd)

    def finish(self) -> int:
        """Kill the tree, reap the leader, give back its cgroup, close every fd.

        Returns the leader's status. The leader is reaped only once the tree is dead
        (so its pgid is never reused while a kill could still target it).
        """
        tree = self.sp.tree
        if not self._killed_after_exit:
            tree.kill()
        code = tree.reap(self.sp.child.wait, exited=self.exited)
        tree.release()
        for fd in list(self._sinks):
            self.forget(fd)
        self._sinks.clear()
        self.sp.close_fds()
        self.sp.settle(code)  # the sandbox's post-run part: after the tree is gone
        return code


def drive_sync(sess: Session, deadline: float | None) -> bool:
    """Run *sess* to its end in this thread; ``False`` when *deadline* passed first."""
    sp = sess.sp
    poller = select.poll()
    for fd in sess.open_outputs:
        poller.register(fd, select.POLLIN)
    if sp.stdin_fd is not None:
        poller.register(sp.stdin_fd, select.POLLOUT)
    poller.register(sp.pidfd, select.POLLIN)

    def forget(fd: int) -> None:
        try:  # noqa: SIM105 - not contextlib.suppress: every run's hot path
            poller.unregister(fd)
        except KeyError:
            pass

    sess.forget = forget
    grace_end: float | None = None  # set at the leader's exit
    while not sess.done:
        now = time.monotonic()
        if grace_end is not None:  # the leader exited: the deadline no longer applies
            if now >= grace_end:
                return True  # a survivor outside the tree holds a pipe: stop reading
            end: float | None = grace_end
        elif deadline is not None and now >= deadline:
            return False
        else:
            end = deadline
        # (end - now) * 1000 is inf for a finite timeout near the float maximum: compare
        # before converting (a huge timeout is waited in _MAX_WAIT_MS steps).
        left_ms = _MAX_WAIT_MS if end is None else (end - now) * 1000
        wait_ms = None if end is None else int(min(_MAX_WAIT_MS, left_ms)) + 1
        for fd, _ in poller.poll(wait_ms):
            if fd == sp.pidfd:
                sess.on_exit()
                grace_end = time.monotonic() + _DRAIN_AFTER_KILL_S
            elif fd == sp.stdin_fd:
                sess.on_writable()
            else:
                sess.on_readable(fd)
    return True


async def drive_async(sess: Session, timeout: float | None) -> bool:
    """Run *sess* to its end on the running loop; ``False`` when *timeout* expired."""
    import asyncio  # here: a synchronous caller (the CLI) never pays for its import

    loop = asyncio.get_running_loop()
    sp = sess.sp
    fut: asyncio.Future[None] = loop.create_future()
    readers: set[int] = set()
    writers: set[int] = set()
    grace: list[asyncio.TimerHandle] = []

    def settle() -> None:
        if not fut.done():
            fut.set_result(None)

    def step(action: Callable[[], None]) -> None:
        try:
            action()
        except BaseException as exc:  # an observer raised: surface it in the awaiter
            if not fut.done():
                fut.set_exception(exc)
            return
        if sess.done:
            settle()
        elif sess.exited and not grace:  # as drive_sync: bounded wait for EOF
            grace.append(loop.call_later(_DRAIN_AFTER_KILL_S, settle))

    def forget(fd: int) -> None:
        if fd in readers:
            readers.discard(fd)
            loop.remove_reader(fd)
        if fd in writers:
            writers.discard(fd)
            loop.remove_writer(fd)

    sess.forget = forget
    for fd in sess.open_outputs:
        readers.add(fd)
        loop.add_reader(fd, step, lambda fd=fd: sess.on_readable(fd))
    if sp.stdin_fd is not None:
        writers.add(sp.stdin_fd)
        loop.add_writer(sp.stdin_fd, step, sess.on_writable)
    readers.add(sp.pidfd)
    loop.add_reader(sp.pidfd, step, sess.on_exit)
    try:
        async with asyncio.timeout(timeout):
            await fut
    except TimeoutError:
        return sess.exited  # the leader's exit, seen in time, is a result
    finally:
        for handle in grace:
            handle.cancel()
        for fd in list(readers | writers):
            forget(fd)
        sess.forget = lambda fd: None
    return True
