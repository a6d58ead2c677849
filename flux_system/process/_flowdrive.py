"""The driver of a streamed child: :func:`drive_sync` with back-pressure and stdin feeding.

As :func:`flux_system.process._run.drive_sync` (``poll(2)`` in the calling thread,
the pidfd watched, the tree killed at the leader's exit), plus: an output pipe whose
queue is full is left unread until the consumer makes room (the flow's ``eventfd``
wakes the poll), and the child's stdin is written from the flow's buffer and closed at
its EOF. After the leader's exit the pipes are read to EOF within a bounded wait, as
there; that wait does not run while a paused stream still owes the bytes the exited
tree left in its pipe (they are delivered at the consumer's pace, never dropped).
"""

from __future__ import annotations

import select
import time

from flux_system.process._run import Session, _pipe_pending
from flux_system.process._stream import Flow, StreamSink

__all__ = ["drive_flow"]

_DRAIN_AFTER_EXIT_S = 0.5  # as _run._DRAIN_AFTER_KILL_S
_MAX_WAIT_MS = 1 << 30


def drive_flow(sess: Session, deadline: float | None, flow: Flow) -> bool:
    """Run streamed *sess* to its end in this thread; ``False`` when *deadline* passed."""
    sp = sess.sp
    poller = select.poll()
    masks: dict[int, int] = {}

    def want(fd: int, mask: int) -> None:
        old = masks.get(fd)
        if old == mask:
            return
        if mask:
            if old is None:
                poller.register(fd, mask)
            else:
                poller.modify(fd, mask)
            masks[fd] = mask
        elif old is not None:
            poller.unregister(fd)
            del masks[fd]

    def forget(fd: int) -> None:
        want(fd, 0)

    sess.forget = forget
    want(flow.wake_fd, select.POLLIN)
    want(sp.pidfd, select.POLLIN)
    grace_end: float | None = None
    try:
        while not sess.done:
            sinks = list(sess.sinks())
            for fd, sink in sinks:  # a ring buffer (output not streamed) never pauses
                paused = isinstance(sink, StreamSink) and sink.paused
                want(fd, 0 if paused else select.POLLIN)
            if sp.stdin_fd is not None and flow.stdin is None:  # a bytes stdin, as run()
                want(sp.stdin_fd, select.POLLOUT)
            elif sp.stdin_fd is not None:
                if flow.stdin_at_eof():
                    sess.close_stdin()
                    flow.stdin_gone()
                else:
                    want(sp.stdin_fd, select.POLLOUT if flow.stdin_pending() else 0)
            now = time.monotonic()
            if grace_end is not None:  # the leader exited: the deadline no longer applies
                if any(s.held for _, s in sinks if isinstance(s, StreamSink)):
                    grace_end = now + _DRAIN_AFTER_EXIT_S
                if now >= grace_end:
                    return True
                end: float | None = grace_end
            elif deadline is not None and now >= deadline:
                return False
            else:
                end = deadline
            left_ms = _MAX_WAIT_MS if end is None else (end - now) * 1000
            wait_ms = None if end is None else int(min(_MAX_WAIT_MS, left_ms)) + 1
            for fd, _ in poller.poll(wait_ms):
                if fd == flow.wake_fd:
                    flow.clear_wake()
                elif fd == sp.pidfd:
                    for ofd, sink in sess.sinks():
                        if isinstance(sink, StreamSink):
                            sink.budget = _pipe_pending(ofd)
                    sess.on_exit()  # closes stdin: the rest of it is dropped
                    flow.stdin_gone()
                    grace_end = time.monotonic() + _DRAIN_AFTER_EXIT_S
                elif fd == sp.stdin_fd and flow.stdin is None:
                    sess.on_writable()
                elif fd == sp.stdin_fd:
                    if not flow.write_stdin(fd):
                        sess.close_stdin()
                        flow.stdin_gone()
                elif fd in masks:  # not unregistered by an earlier event of this poll
                    sess.on_readable(fd)
    finally:
        sess.forget = lambda fd: None
    return True
