"""Process-wide state of the file logs: the open writers, across fork and signals.

- :func:`register` / :func:`close_writer`: the writers open in this process (weakly
  held). A forked child's hook abandons its copies (``FORKED``, see
  ``EvidenceLog._abandon_in_child``) so that only the parent's ``close`` releases the
  ``flock`` they share.
- A descriptor is closed and its log leaves the registry in one step, under a lock that
  a fork also takes: otherwise a fork landing after another thread closed the
  descriptor, but before the log left the registry, would have the child close that
  number — maybe reused meanwhile by an unrelated open. A fork waits at most for one
  ``close(2)`` of a log file.
- :func:`signals_held`: Python runs signal handlers in the main thread only; there the
  catchable signals are held for a block and delivered after it (a batch append, a
  close, the step above — so no handler can fork while this thread holds the lock).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import typing
import weakref
from collections.abc import Iterator

__all__ = ["close_writer", "register", "signals_held"]


class _Writer(typing.Protocol):
    def _abandon_in_child(self, *, close_fd: bool) -> None: ...


# SIGKILL and SIGSTOP cannot be held.
_CATCHABLE = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """In the main thread, hold the catchable signals for the block and deliver them
    after it (elsewhere Python runs no signal handler: nothing to hold)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _CATCHABLE)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


_WRITERS: weakref.WeakSet[_Writer] = weakref.WeakSet()  # an unclosed log may be freed
_FD_LOCK = threading.Lock()
_fork_held = False  # the fork's before-hook got _FD_LOCK (it may be interrupted)


def register(log: _Writer) -> None:
    """*log* is an open writer of this process."""
    _WRITERS.add(log)


def close_writer(log: _Writer, fd: int) -> None:
    """Close *log*'s descriptor *fd* and forget it, in one step as seen from a fork."""
    with signals_held(), _FD_LOCK:
        try:
            os.close(fd)
        finally:
            _WRITERS.discard(log)


def _before_fork() -> None:
    global _fork_held  # noqa: PLW0603 - fork-hook state, one fork at a time
    _FD_LOCK.acquire()
    _fork_held = True


def _after_fork_in_parent() -> None:
    global _fork_held  # noqa: PLW0603
    if _fork_held:
        _fork_held = False
        _FD_LOCK.release()


def _after_fork_in_child() -> None:
    global _FD_LOCK, _fork_held  # noqa: PLW0603 - only the forking thread exists here
    held, _fork_held = _fork_held, False
    _FD_LOCK = threading.Lock()
    for log in list(_WRITERS):
        # Without the lock (the before-hook was interrupted) a listed descriptor may be
        # closed and reused already: keep it (the parent's lock then lasts until this
        # child exits) rather than close an unrelated file.
        log._abandon_in_child(close_fd=held)
    _WRITERS.clear()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
