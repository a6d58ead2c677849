"""Keep this process non-dumpable while a Landlock-only spawner thread lives.

The spawner thread (``_spawner.py``) shares its Landlock domain with every child it
forks, and Landlock lets a domain reach its own members: a child could open
``/proc/<flux>/task/<spawner tid>/environ`` or ``mem`` (the whole process's
environment and memory: every thread shares them) or take its fds with
``pidfd_getfd``. All of those pass through the kernel's ptrace access check, which
refuses a caller without ``CAP_SYS_PTRACE`` when the target's memory is not dumpable.
Dumpability belongs to the memory, so it is the whole process's: set while at least
one spawner is held, and put back to what it was when the last one is released.
A child's exec gives it its own, dumpable, memory: the children are not affected.

Guarantee: between the first :func:`hold` and the matching last :func:`release`,
``PR_GET_DUMPABLE`` is 0 (unless other code of this process sets it meanwhile).
Not guaranteed: core dumps and debuggers attaching to this process meanwhile (both
refused by the kernel).

Raises: :func:`hold` raises ``OSError`` when ``prctl`` refuses.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

__all__ = ["hold", "release"]

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4


class _State:
    lock = threading.Lock()
    holders = 0
    before = 1


def _prctl(option: int, arg: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.prctl(option, arg, 0, 0, 0))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): failed")
    return result


def hold() -> None:
    """Make the process non-dumpable (counted).

    Raises:
        OSError: ``prctl`` refused.
    """
    with _State.lock:
        if _State.holders == 0:
            _State.before = _prctl(_PR_GET_DUMPABLE)
            _prctl(_PR_SET_DUMPABLE, 0)
        _State.holders += 1


def release() -> None:
    """Undo one :func:`hold`; the last one restores the earlier setting."""
    with _State.lock:
        if _State.holders == 0:
            return
        _State.holders -= 1
        if _State.holders == 0 and _State.before:
            with contextlib.suppress(OSError):  # stays non-dumpable: the safe side
                _prctl(_PR_SET_DUMPABLE, 1)
