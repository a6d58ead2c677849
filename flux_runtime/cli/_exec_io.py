"""``flux exec``'s live IO: the child's output relayed to flux's own fds, stdin pumped in.

Both run in daemon threads over the streamed-child API of ``System.spawn``
(``child.chunks()``, ``child.stdin``), so the main thread stays free to wait for the
child and to take signals: a write to flux's stdout that blocks (a paused ``less``)
holds back only the relay thread — the child then blocks on its full pipe (back-
pressure) while ``--timeout``, signals and ``kill`` still fire.

Guarantee: the child never gets flux's own stdout, stderr or terminal, only pipes; each
chunk is written as soon as it is read (bytes, not lines); when the reader of flux's
stdout goes away the whole tree is killed; a full ``--output-cap`` is said once per
stream. Not guaranteed: interleaving of stdout and stderr beyond the order of reads.
"""

from __future__ import annotations

import os
import select
import threading
import typing

from flux_system import ManagedChild
from flux_system.process import ChildStdin

__all__ = ["Relay", "StdinPump"]

_STDIN_READ = 1 << 16  # one read of flux's stdin (a pipe's default capacity)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of *data* to *fd* (blocking; waits out a non-blocking fd's EAGAIN)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:  # someone set O_NONBLOCK on our shared stdout
            select.select([], [fd], [])
            continue
        view = view[n:]


@typing.final
class Relay:
    """Writes a streamed child's chunks to flux's fds 1 and 2 (run in its own thread)."""

    def __init__(self, child: ManagedChild, *, notice_prefix: str) -> None:
        self._child = child
        self._prefix = notice_prefix
        self.broken_pipe = False  # stdout's reader went away (the tree was killed)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="flux-exec-relay", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        stderr_open = True
        told: set[str] = set()
        try:
            for chunk in self._child.chunks():
                if self.broken_pipe:
                    continue  # keep taking chunks: the killed tree's pipes drain to EOF
                if chunk.stream == "stdout":
                    try:
                        _write_all(1, chunk.data)
                    except OSError:  # EPIPE (| head) or any other end of the reader
                        self.broken_pipe = True
                        self._child.kill()
                        continue
                elif stderr_open:
                    try:
                        _write_all(2, chunk.data)
                    except OSError:
                        stderr_open = False  # nobody reads stderr: drop it, go on
                if chunk.truncated and chunk.stream not in told and stderr_open:
                    told.add(chunk.stream)
                    note = (
                        f"{self._prefix}: {chunk.stream} reached --output-cap;"
                        " the rest is discarded\n"
                    )
                    try:
                        _write_all(2, note.encode())
                    except OSError:
                        stderr_open = False
        finally:
            self.done.set()


@typing.final
class StdinPump:
    """Forwards flux's fd 0 to a child's streamed stdin until EOF (run in its own thread).

    Memory is bounded: one read of ``_STDIN_READ`` bytes plus what ``ChildStdin`` buffers.
    A child that exits before reading everything ends the pump quietly.
    """

    def __init__(self, stdin: ChildStdin) -> None:
        self._stdin = stdin
        self.thread = threading.Thread(target=self._run, name="flux-exec-stdin", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    data = os.read(0, _STDIN_READ)
                except BlockingIOError:  # a non-blocking stdin shared with someone else
                    select.select([0], [], [])
                    continue
                if not data or not self._stdin.write(data):
                    return
        except OSError:  # EIO (a background job's terminal), EBADF: treat as EOF
            return
        finally:
            self._stdin.close()
