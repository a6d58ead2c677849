"""A background child: bounded live output, status, kill, async wait."""

from __future__ import annotations

import contextlib
import threading
import time
import typing
from collections.abc import AsyncIterator, Callable, Iterator

from flux_system._values import record
from flux_system.process._confine import Denials
from flux_system.process._drain import LineObserver, Ring
from flux_system.process._flowdrive import drive_flow
from flux_system.process._run import Session, drive_sync
from flux_system.process._spawn import Spawned
from flux_system.process._stream import ChildStdin, Flow, OutputChunk, StreamSink

__all__ = ["ChildOutput", "ChildStatus", "ManagedChild", "OutputTotals"]


@typing.final
@record
class ChildOutput:
    """Output buffered since the previous :meth:`ManagedChild.read_output`.

    ``*_dropped`` count the bytes lost, in total so far, because the bounded buffer
    was full (the oldest bytes are dropped first).
    """

    stdout: bytes
    stderr: bytes
    stdout_dropped: int
    stderr_dropped: int


@typing.final
@record
class ChildStatus:
    """``running``, or the exit status (``exit_code == -N`` and ``signal == N`` if killed)."""

    running: bool
    exit_code: int | None
    signal: int | None
    timed_out: bool


@typing.final
@record
class OutputTotals:
    """Byte counts of a child's output so far, per stream.

    ``*_bytes`` is what the child wrote; ``*_dropped`` the part not kept or delivered
    (past the cap of a streamed child, or overwritten in a ring buffer).
    """

    stdout_bytes: int
    stderr_bytes: int
    stdout_dropped: int
    stderr_dropped: int


class _LockedRing:
    __slots__ = ("lock", "ring")

    def __init__(self, ring: Ring, lock: threading.Lock) -> None:
        self.ring = ring
        self.lock = lock

    def read_from(self, fd: int) -> bool:
        with self.lock:
            return self.ring.read_from(fd)


@typing.final
class ManagedChild:
    """A child running in the background, drained by a private thread.

    Guarantee: its output is drained continuously into a bounded buffer (the child
    never blocks on a full pipe); when it exits, is killed, times out, or its
    :class:`System` closes, its whole tree is killed and reaped.
    Not guaranteed: output beyond the buffer between two :meth:`read_output` calls is
    dropped (counted, not kept). Created by :meth:`System.spawn`, not directly.

    A child spawned with ``stream_output=True`` keeps no ring buffer: its output is
    taken, in order and without loss up to ``output_cap``, with :meth:`chunks` (or
    ``async for chunk in child.achunks()``), and its pace is the consumer's — while
    about 1 MiB of a stream waits untaken, that pipe is not read and the child blocks
    on it, as it would writing into a plain pipe (timeout and kill still apply).
    With ``stream_stdin=True``, :attr:`stdin` is its :class:`ChildStdin`.
    """

    def __init__(
        self,
        sp: Spawned,
        *,
        stdin: bytes | None,
        buffer_cap: int,
        observer: LineObserver | None,
        timeout: float | None,
        on_done: Callable[[ManagedChild], None],
        flow: Flow | None = None,
        stream_output: bool = False,
    ) -> None:
        self._lock = threading.Lock()
        self._out = Ring("stdout", buffer_cap, observer)
        self._err = Ring("stderr", buffer_cap, observer)
        self._flow = flow
        self._streaming = flow is not None and stream_output
        keep = flow is not None and flow.stdin is not None
        if flow is not None and stream_output:
            self._sout = StreamSink("stdout", flow, observer)
            self._serr = StreamSink("stderr", flow, observer)
            self._sess = Session(sp, stdin, self._sout, self._serr, keep_stdin=keep)
        else:
            out, err = _LockedRing(self._out, self._lock), _LockedRing(self._err, self._lock)
            self._sess = Session(sp, stdin, out, err, keep_stdin=keep)
        self._sp = sp
        self._code: int | None = None
        self._timed_out = False
        self._done = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._on_done = on_done
        self._claimed = False  # whether the drain thread or abandon() finishes the child
        self.error: BaseException | None = None
        deadline = None if timeout is None else time.monotonic() + timeout
        self._thread = threading.Thread(
            target=self._drive, args=(deadline,), name=f"flux-child-{sp.pid}", daemon=True
        )

    @property
    def pid(self) -> int:
        return self._sp.pid

    def _start(self) -> None:
        """Start the drain thread (once); if that fails, kill and reap the tree, re-raise."""
        try:
            self._thread.start()
        except BaseException:  # no thread (thread limit), or a signal while it started
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Kill the tree; finish it here unless the drain thread already owns it.

        For a child whose :meth:`_start` failed or was never called. Idempotent; either
        way ``on_done`` runs exactly once (here or in the drain thread).
        """
        self._sp.tree.kill()
        if self._claim():
            self._end()

    def _claim(self) -> bool:
        with self._lock:
            claimed, self._claimed = self._claimed, True
        return not claimed

    def _drive(self, deadline: float | None) -> None:
        if not self._claim():  # abandoned before this thread ran: finished there
            return
        try:
            if self._flow is not None:
                finished = drive_flow(self._sess, deadline, self._flow)
            else:
                finished = drive_sync(self._sess, deadline)
            if not finished:
                self._timed_out = True
                self._sess.kill()
                self._sess.drain_after_kill()
        except BaseException as exc:  # an observer raised: keep the error, kill the tree
            self.error = exc
            self._sess.kill()
        finally:
            self._end()

    def _end(self) -> None:
        try:
            self._code = self._sess.finish()
        finally:
            if self._flow is not None:
                self._flow.end()
        self._done.set()
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()
        self._on_done(self)

    def read_output(self) -> ChildOutput:
        """Take the output buffered since the previous call (never blocks).

        Raises:
            ValueError: the output is streamed (use :meth:`chunks`).
        """
        if self._streaming:
            raise ValueError("this child's output is streamed: use chunks()")
        with self._lock:
            return ChildOutput(
                self._out.take(), self._err.take(), self._out.dropped, self._err.dropped
            )

    @property
    def stdin(self) -> ChildStdin | None:
        """The streamed stdin writer (``spawn(..., stream_stdin=True)``), else ``None``."""
        return None if self._flow is None else self._flow.stdin

    def chunks(self) -> Iterator[OutputChunk]:
        """Yield the output of a streamed child as it is produced, until it is reaped.

        Guarantee: every byte up to each stream's cap is yielded once, in the order
        read; the iterator ends once the tree is reaped and everything was taken.
        Blocks between chunks (a signal handler that raises interrupts the wait).
        Several consumers share one queue: each chunk goes to one of them.
        Not guaranteed after :meth:`kill` (or ``System.close()``): what the killed tree
        left in its pipes is delivered only as far as the bounded post-kill read got.

        Raises:
            ValueError: the child was not spawned with ``stream_output=True``.
        """
        flow = self._streamed()
        while (chunk := flow.get()) is not None:
            yield chunk

    async def achunks(self) -> AsyncIterator[OutputChunk]:
        """As :meth:`chunks`, awaiting on the running asyncio loop (never blocking it).

        Cancelling the iteration does not kill the child; call :meth:`kill` for that.
        """
        import asyncio

        flow = self._streamed()
        loop = asyncio.get_running_loop()
        while True:
            ready = asyncio.Event()

            def wake(ready: asyncio.Event = ready) -> None:
                with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile
                    loop.call_soon_threadsafe(ready.set)

            got, chunk = flow.poll_chunk(wake)
            if not got:
                try:
                    await ready.wait()
                finally:
                    flow.discard_waiter(wake)
                continue
            if chunk is None:
                return
            yield chunk

    def _streamed(self) -> Flow:
        if self._flow is None or not self._streaming:
            raise ValueError("this child's output is not streamed (spawn stream_output=True)")
        return self._flow

    def output_totals(self) -> OutputTotals:
        """Bytes written and dropped per stream so far (final once the child is reaped)."""
        if self._streaming:
            o, e = self._sout, self._serr
            return OutputTotals(o.total, e.total, o.dropped, e.dropped)
        with self._lock:
            o_, e_ = self._out, self._err
            return OutputTotals(o_.total, e_.total, o_.dropped, e_.dropped)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call *callback* once the child is reaped (now, if it already is).

        It runs in the drain thread (or the caller's, if already done) and must not
        block; an exception it raises is not caught.
        """
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def status(self) -> ChildStatus:
        """Whether it is running, else how it ended."""
        code = self._code if self._done.is_set() else None
        if code is None:
            return ChildStatus(True, None, None, timed_out=False)
        return ChildStatus(False, code, -code if code < 0 else None, timed_out=self._timed_out)

    @property
    def denials(self) -> Denials | None:
        """What the sandbox refused (``None``: unsandboxed, or not ended yet)."""
        return self._sess.sp.denials if self._done.is_set() else None

    def kill(self) -> None:
        """SIGKILL the whole tree; the drain thread then reaps it (idempotent).

        Guarantee: never signals a recycled pid or process group, by construction —
        the leader is signalled through its pidfd, and it is reaped only after the
        tree is marked closed under the lock this kill holds, so while the kill runs
        the leader is at worst an unreaped zombie that still pins its pid and pgid;
        a kill that comes after the reap does nothing. The output of a streamed child
        still queued stays available to :meth:`chunks`; what the killed tree left in
        its pipes is read only within the bounded post-kill wait (never at a slow
        consumer's pace).
        """
        if self._flow is not None:
            self._flow.killed = True
        self._sp.tree.kill()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the child is reaped; ``False`` if *timeout* passed first."""
        return self._done.wait(timeout)

    async def wait(self) -> int:
        """Wait (asynchronously) until the child is reaped; return its exit code.

        Cancelling the wait does not kill the child; call :meth:`kill` for that.
        """
        if not self._done.is_set():
            import asyncio  # here: a synchronous caller never pays for its import

            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()

            def settle() -> None:
                if not fut.done():
                    fut.set_result(None)

            def wake() -> None:
                loop.call_soon_threadsafe(settle)

            with self._lock:
                registered = not self._done.is_set()
                if registered:
                    self._callbacks.append(wake)
            if registered:
                await fut
        assert self._code is not None
        return self._code
