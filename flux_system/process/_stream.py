"""Streamed IO of a background child: flow-controlled output chunks and a stdin writer.

A :class:`Flow` sits between the drain thread (which owns every pipe fd) and the
consumers (any threads, or an asyncio loop). Output is read from the child's pipes into
a queue of :class:`OutputChunk` bounded per stream; while a stream's queue is full the
drain thread stops reading that pipe, so a slow consumer slows the child exactly as a
plain pipe would. Stdin bytes handed to :class:`ChildStdin` wait in a bounded buffer
until the drain thread writes them into the child's stdin pipe. An ``eventfd`` wakes the
drain thread's ``poll(2)`` when a consumer makes room or brings stdin bytes.

Guarantee: memory held here is bounded (``_QUEUE_BYTES`` per output stream plus one read,
``_STDIN_BYTES`` of stdin plus one write); bytes of a stream past its cap are drained to
``/dev/null`` and counted, never delivered, so the cap never blocks the child; the tree
kill and reap of :class:`~flux_system.process.ManagedChild` are unchanged.
Not guaranteed: order between stdout and stderr chunks beyond the order of the reads.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import typing
from collections.abc import Callable

from flux_system._exceptions import ProcessError, ProcessReason
from flux_system._values import record
from flux_system.process._drain import CHUNK, LineObserver, _Lines, devnull, grow_pipe

__all__ = ["ChildStdin", "Flow", "OutputChunk", "StreamSink"]

# Bytes queued per output stream before its pipe is no longer read (back-pressure).
_QUEUE_BYTES = 1 << 20
# Bytes of stdin buffered here before ChildStdin.write blocks (back-pressure).
_STDIN_BYTES = 1 << 20
# One write into the child's stdin pipe (the pipe's default capacity).
_STDIN_WRITE = 1 << 16
_PIPE_DEFAULT = 1 << 16


@typing.final
@record
class OutputChunk:
    """Bytes one output stream produced, as read (not split at lines).

    ``truncated`` is ``True`` on the chunk at which the stream reached its cap with
    more bytes behind it: the bytes after it are counted, not delivered.
    """

    stream: str  # "stdout" | "stderr"
    data: bytes
    truncated: bool = False


class Flow:
    """The shared state of one streamed child (private; see the module docstring)."""

    def __init__(self, *, cap: int | None, stdin: bool, target: str | None = None) -> None:
        self.target = target
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[OutputChunk] = collections.deque()
        self._queued = {"stdout": 0, "stderr": 0}
        self._ended = False
        self.killed = False  # kill() was asked for: nothing more is owed to the consumer
        self._waiters: list[Callable[[], None]] = []
        self.cap = cap
        self.wake_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._stdin: collections.deque[memoryview] = collections.deque()
        self._stdin_size = 0
        self._stdin_eof = False
        self._stdin_closed = not stdin
        self.stdin_written = 0
        self.stdin = ChildStdin(self) if stdin else None

    # -- drain-thread side ---------------------------------------------------------

    def wake(self) -> None:
        """Make the drain thread's poll return (caller holds the lock)."""
        if self.wake_fd >= 0:
            with contextlib.suppress(BlockingIOError):  # the counter is already non-zero
                os.eventfd_write(self.wake_fd, 1)

    def clear_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.wake_fd)

    def full(self, stream: str) -> bool:
        return self._queued[stream] >= _QUEUE_BYTES

    def put(self, chunk: OutputChunk) -> None:
        with self._cond:
            self._queue.append(chunk)
            self._queued[chunk.stream] += len(chunk.data)
            self._cond.notify_all()
            waiters = list(self._waiters)
        for w in waiters:
            w()

    def stdin_pending(self) -> bool:
        return bool(self._stdin)

    def stdin_at_eof(self) -> bool:
        return self._stdin_eof and not self._stdin

    def write_stdin(self, fd: int) -> bool:
        """One non-blocking write of buffered stdin into *fd*; ``False``: the pipe broke."""
        with self._cond:
            if not self._stdin:
                return True
            head = self._stdin[0]
            try:
                n = os.write(fd, head[:_STDIN_WRITE])
            except BlockingIOError:
                return True
            except OSError:
                return False
            self.stdin_written += n
            if n == len(head):
                self._stdin.popleft()
            else:
                self._stdin[0] = head[n:]
            self._stdin_size -= n
            self._cond.notify_all()
        return True

    def stdin_gone(self) -> None:
        """The child's stdin was closed (EOF written, or the child exited)."""
        with self._cond:
            self._stdin_closed = True
            self._stdin.clear()
            self._stdin_size = 0
            self._cond.notify_all()

    def end(self) -> None:
        """The child was reaped: no more chunks; close the wake fd. Idempotent."""
        with self._cond:
            self._ended = True
            self._stdin_closed = True
            self._stdin.clear()
            if self.wake_fd >= 0:
                os.close(self.wake_fd)
                self.wake_fd = -1
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for w in waiters:
            w()

    # -- consumer side -------------------------------------------------------------

    def _pop(self) -> OutputChunk | None:
        """Take the oldest chunk, waking the drain thread if that unpauses a stream."""
        chunk = self._queue.popleft()
        was_full = self.full(chunk.stream)
        self._queued[chunk.stream] -= len(chunk.data)
        if was_full and not self.full(chunk.stream):
            self.wake()
        return chunk

    def get(self) -> OutputChunk | None:
        """The next chunk, blocking; ``None`` once the child is reaped and all is taken."""
        with self._cond:
            while not self._queue:
                if self._ended:
                    return None
                self._cond.wait()
            return self._pop()

    def poll_chunk(self, waiter: Callable[[], None]) -> tuple[bool, OutputChunk | None]:
        """Non-blocking get: ``(True, chunk_or_None_at_end)`` or ``(False, None)``.

        When nothing is ready, *waiter* is registered and called (from the drain
        thread) once something is: the asyncio iterator's wake-up.
        """
        with self._cond:
            if self._queue:
                return True, self._pop()
            if self._ended:
                return True, None
            self._waiters.append(waiter)
            return False, None

    def discard_waiter(self, waiter: Callable[[], None]) -> None:
        with self._cond:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def feed_stdin(self, data: bytes, timeout: float | None) -> bool:
        with self._cond:
            if self._stdin_eof:
                raise ValueError("write to a child stdin after close()")
            ok = self._cond.wait_for(
                lambda: self._stdin_closed or self._stdin_size < _STDIN_BYTES, timeout
            )
            if not ok:
                raise ProcessError(
                    f"the child's stdin stayed full for {timeout} s",
                    op="stdin.write",
                    target=self.target,
                    reason=ProcessReason.TIMEOUT,
                )
            if self._stdin_closed:
                return False
            if data:
                self._stdin.append(memoryview(data))
                self._stdin_size += len(data)
                self.wake()
            return True

    def close_stdin(self) -> None:
        with self._cond:
            if not self._stdin_eof:
                self._stdin_eof = True
                self.wake()

    def stdin_closed(self) -> bool:
        with self._cond:
            return self._stdin_closed


@typing.final
class ChildStdin:
    """The writable end of a streamed child's stdin (``spawn(..., stream_stdin=True)``).

    Guarantee: bytes are written to the child in order, as they are handed over; at most
    about 1 MiB is buffered here (:meth:`write` blocks while the buffer is full, so a
    child that reads slowly slows its producer); :meth:`close` gives the child EOF once
    the buffered bytes are written. A child that exits (or whose tree is killed) without
    reading everything is not an error: :meth:`write` then returns ``False`` and the rest
    is dropped.
    Not guaranteed: that the child read what was written (bytes still in the pipe when
    it exits are lost with it). Thread-safe; asyncio callers may use
    ``await asyncio.to_thread(stdin.write, data)`` (a kill wakes a blocked write).
    """

    __slots__ = ("_flow",)

    def __init__(self, flow: Flow) -> None:
        self._flow = flow

    def write(self, data: bytes, *, timeout: float | None = None) -> bool:
        """Hand *data* to the child; ``False`` once the child's stdin is closed.

        Raises:
            TypeError: *data* is not bytes-like.
            ValueError: called after :meth:`close`.
            ProcessError: ``TIMEOUT`` — the buffer stayed full for *timeout* seconds
                (nothing of *data* was taken).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data must be bytes")
        return self._flow.feed_stdin(bytes(data), timeout)

    def close(self) -> None:
        """Give the child EOF after what is buffered (idempotent)."""
        self._flow.close_stdin()

    @property
    def closed(self) -> bool:
        """Whether the child's stdin is closed (EOF delivered, or the child exited)."""
        return self._flow.stdin_closed()

    @property
    def written(self) -> int:
        """Bytes written into the child's stdin pipe so far."""
        return self._flow.stdin_written


class StreamSink:
    """One output stream of a streamed child, as the drain thread sees it."""

    __slots__ = (
        "_flow",
        "_grown",
        "_lines",
        "_told",
        "budget",
        "delivered",
        "dropped",
        "name",
        "total",
    )

    def __init__(self, name: str, flow: Flow, observer: LineObserver | None) -> None:
        self.name = name
        self._flow = flow
        self._lines = _Lines(name, observer) if observer is not None else None
        self._grown = False
        self._told = False  # a truncated chunk was delivered
        self.total = 0  # bytes the child wrote to this stream
        self.delivered = 0
        self.dropped = 0
        self.budget: int | None = None  # bytes still owed after the leader's exit

    @property
    def paused(self) -> bool:
        """The consumer is behind: leave the pipe unread (back-pressure)."""
        return self._flow.full(self.name) and not self._capped

    @property
    def held(self) -> bool:
        """Bytes the exited tree left in the pipe are still to deliver (``budget``), or
        the stream is paused before any budget was set.

        Owed whether or not the stream is paused at the moment: a consumer that makes
        room just as the post-exit wait ends must still get them (the wait is for a
        survivor holding the pipe, not for bytes already there). Never after a kill: a
        killed child's remaining output is not waited for.
        """
        if self._flow.killed:
            return False
        if self.budget is None:
            return self.paused
        return self.budget > 0

    @property
    def _capped(self) -> bool:
        cap = self._flow.cap
        return cap is not None and self.delivered >= cap

    def read_from(self, fd: int) -> bool:
        """Read what is available on *fd*; return ``False`` at EOF."""
        if self._capped and self._lines is None:
            try:
                n = os.splice(fd, devnull(), CHUNK)
            except BlockingIOError:
                return True
            self._drop(n)
            self.total += n
            self._account(fd, n)
            return n > 0
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return True
        if not data:
            if self._lines is not None:
                self._lines.flush()
            return False
        self.total += len(data)
        self._account(fd, len(data))
        if self._lines is not None:
            self._lines.feed(data)
        cap = self._flow.cap
        room = len(data) if cap is None else cap - self.delivered
        if room <= 0:
            self._drop(len(data))
        elif room < len(data):
            self._told = True
            self.dropped += len(data) - room
            self._deliver(data[:room], truncated=True)
        else:
            self._deliver(data, truncated=False)
        return True

    def _drop(self, n: int) -> None:
        self.dropped += n
        if n and not self._told:  # the cap was met exactly by earlier reads
            self._told = True
            self._flow.put(OutputChunk(self.name, b"", True))

    def _deliver(self, data: bytes, *, truncated: bool) -> None:
        self.delivered += len(data)
        self._flow.put(OutputChunk(self.name, data, truncated))

    def _account(self, fd: int, n: int) -> None:
        if self.budget is not None:
            self.budget -= n
        if n >= _PIPE_DEFAULT and not self._grown:
            self._grown = True
            grow_pipe(fd)
