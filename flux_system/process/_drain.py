"""Capped draining of a child's output pipes.

Guarantee: a stream keeps being read until EOF whatever the cap, so a child never
blocks on a full pipe; at most ``cap`` bytes are kept in memory per stream (plus one
read chunk in flight). Past the cap, without an observer, bytes are moved to
``/dev/null`` by ``splice(2)`` and never copied into this process.
Not guaranteed: a line observer sees lines longer than :data:`MAX_LINE` in pieces.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import typing
from collections.abc import Callable

__all__ = [
    "CHUNK",
    "MAX_LINE",
    "SPLICE_BURST",
    "Capture",
    "LineObserver",
    "Ring",
    "decode_capped",
    "devnull",
    "grow_pipe",
]

LineObserver = Callable[[str, bytes], None]
"""Called with ``("stdout" | "stderr", line)`` for each line, newline included."""

CHUNK = 1 << 20  # one read: the largest pipe buffer an unprivileged process may set
MAX_LINE = 1 << 16  # a line longer than this reaches the observer in pieces (memory bound)
SPLICE_BURST = 64  # splices per wake-up past the cap: <= 64 MiB before poll looks again
_F_SETPIPE_SZ = 1031
_PIPE_DEFAULT = 1 << 16  # a read this large means the pipe was full: grow it then
_devnull_fd: int | None = None


def devnull() -> int:
    """One shared ``/dev/null`` fd (read-write): the splice sink and children's stdin."""
    global _devnull_fd  # noqa: PLW0603 - opened once, never closed
    if _devnull_fd is None:
        _devnull_fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    return _devnull_fd


def grow_pipe(fd: int) -> None:
    """Ask for a 1 MiB pipe buffer (fewer wake-ups); best effort, the default works too.

    Called by a reader once a read found the pipe full, so a child with little output
    (the common case) never pays for it.
    """
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, CHUNK)


def decode_capped(data: bytes, *, truncated: bool, dropped: int) -> str:
    """Decode UTF-8 with replacement; append the truncation notice after decoding."""
    text = data.decode("utf-8", errors="replace")
    if truncated:
        text += f"\n[flux: output truncated at {len(data)} bytes; {dropped} bytes dropped]\n"
    return text


class _Lines:
    __slots__ = ("_name", "_observer", "_pending")

    def __init__(self, name: str, observer: LineObserver) -> None:
        self._name = name
        self._observer = observer
        self._pending = b""

    def feed(self, data: bytes) -> None:
        buf = self._pending + data
        start = 0
        end = len(buf)
        while True:  # each step emits a line or a MAX_LINE piece: bounded by len(buf)
            nl = buf.find(b"\n", start, start + MAX_LINE)
            if nl >= 0:
                self._observer(self._name, buf[start : nl + 1])
                start = nl + 1
            elif end - start >= MAX_LINE:  # a piece of a long line; lines after it stay whole
                self._observer(self._name, buf[start : start + MAX_LINE])
                start += MAX_LINE
            else:
                break
        self._pending = buf[start:]

    def flush(self) -> None:
        if self._pending:
            self._observer(self._name, self._pending)
            self._pending = b""


class _Stream:
    """What both buffers share: the cap, the drop count, the observer, one read."""

    __slots__ = ("_grown", "_lines", "cap", "dropped", "total")

    def __init__(self, name: str, cap: int, observer: LineObserver | None) -> None:
        self.cap = cap
        self._grown = False
        self.dropped = 0
        self.total = 0  # bytes read from the pipe
        self._lines = _Lines(name, observer) if observer is not None else None

    def _read(self, fd: int) -> bytes | None:
        """One read of *fd*: ``None`` when nothing is there now, ``b""`` at EOF."""
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return None
        if not data:
            if self._lines is not None:
                self._lines.flush()
            return data
        self.total += len(data)
        self._maybe_grow(fd, len(data))
        return data

    def _maybe_grow(self, fd: int, n: int) -> None:
        if n >= _PIPE_DEFAULT and not self._grown:
            self._grown = True
            grow_pipe(fd)


class Capture(_Stream):
    """One output stream of a run: the first ``cap`` bytes kept, the rest counted."""

    __slots__ = ("_buf",)

    def __init__(self, name: str, cap: int, observer: LineObserver | None) -> None:
        super().__init__(name, cap, observer)
        self._buf = bytearray()

    @property
    def data(self) -> bytes:
        return bytes(self._buf)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def accept(self, data: bytes) -> None:
        room = self.cap - len(self._buf)
        if room >= len(data):
            self._buf += data
        else:
            if room > 0:
                self._buf += data[:room]
            self.dropped += len(data) - max(room, 0)
        if self._lines is not None:
            self._lines.feed(data)

    def _discard(self, fd: int) -> bool:
        """Past the cap: move what is there to ``/dev/null`` by ``splice``, in one burst.

        Up to :data:`SPLICE_BURST` splices per wake-up, stopping as soon as the pipe is
        empty: a child writing in small pieces (``head -c`` writes 4 KiB) keeps the
        pipe busy, and one ``poll`` per piece would make this side the bottleneck. The
        burst is bounded, so the other stream, the exit and the deadline are looked at
        between bursts. Returns ``False`` at EOF.
        """
        if not self._grown:  # a child past the cap writes a lot: fewer wake-ups for both
            self._grown = True
            grow_pipe(fd)
        null = devnull()
        for _ in range(SPLICE_BURST):
            try:
                n = os.splice(fd, null, CHUNK)
            except BlockingIOError:
                return True
            if not n:
                return False
            self.dropped += n
            self.total += n
        return True

    def read_from(self, fd: int) -> bool:
        """Read what is available on *fd*; return ``False`` at EOF."""
        if len(self._buf) >= self.cap and self._lines is None:
            return self._discard(fd)
        data = self._read(fd)
        if data is None:
            return True
        if not data:
            return False
        self.accept(data)
        return True


@typing.final
class Ring(_Stream):
    """A background child's bounded buffer: keeps the newest ``cap`` bytes."""

    __slots__ = ("_chunks", "_size")

    def __init__(self, name: str, cap: int, observer: LineObserver | None) -> None:
        super().__init__(name, cap, observer)
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0

    def read_from(self, fd: int) -> bool:
        """Read what is available on *fd*; return ``False`` at EOF."""
        data = self._read(fd)
        if data is None:
            return True
        if not data:
            return False
        if self._lines is not None:
            self._lines.feed(data)
        self.accept(data)
        return True

    def accept(self, data: bytes) -> None:
        if len(data) > self.cap:
            self.dropped += len(data) - self.cap
            data = data[-self.cap :]
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self.cap:
            head = self._chunks[0]
            excess = self._size - self.cap
            if len(head) <= excess:
                self._chunks.popleft()
                self._size -= len(head)
                self.dropped += len(head)
            else:
                self._chunks[0] = head[excess:]
                self._size -= excess
                self.dropped += excess

    def take(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        return out
