"""One request in flight on the client, and how a lost connection ends it.

Guarantee: a call ends once — with its value, or with the error :func:`lost_error`
makes when the connection ends first — and ``done`` is set when it has (made on first
use, so a caller that reads its own answer and never waits pays nothing for it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from flux_system._exceptions import PortError, UnknownOutcomeError, UnreachableError
from flux_system.remote._ops import IDEMPOTENT
from flux_system.remote._wire import Event

__all__ = ["Call", "lost_error"]

_ENDING = threading.Lock()  # orders Call.finish against the lazy creation of Call.done


class Call:
    """One request in flight: its answer, download parts, and (for spawn) events.

    ``ended`` turns True once, when the answer (or the connection's loss) is in;
    ``done`` is the same fact as an event to wait on, made only when someone asks for
    it (a caller that reads its own answer never waits, and need not pay for one).
    """

    __slots__ = (
        "_done",
        "download",
        "ended",
        "error",
        "id",
        "on_chunk",
        "on_event",
        "op",
        "room",
        "sent",
        "value",
    )

    def __init__(self, rid: int, op: str) -> None:
        self.id = rid
        self.op = op
        self.sent = False
        self.ended = False
        self._done: threading.Event | None = None
        self.value: object = None
        self.error: BaseException | None = None
        self.download: list[bytes] = []
        self.room: int | None = 0  # download bytes still allowed (None: unbounded)
        self.on_chunk: Callable[[str, bytes], None] | None = None
        self.on_event: Callable[[Event], None] | None = None

    @property
    def done(self) -> threading.Event:
        event = self._done
        if event is None:
            with _ENDING:
                event = self._done
                if event is None:
                    event = self._done = threading.Event()
                    if self.ended:
                        event.set()
        return event

    def finish(self, value: object = None, error: BaseException | None = None) -> None:
        with _ENDING:
            if self.ended:
                return
            self.value = value
            self.error = error
            self.ended = True
            event = self._done
        if event is not None:
            event.set()


def lost_error(call: Call, exc: BaseException, *, target: str, closed: bool) -> PortError:
    """What *call* ends with when its connection to *target* ended by *exc* (*closed*:
    by this side): never sent, or an idempotent read — :class:`UnreachableError` (safe
    to retry); anything else that was sent — :class:`UnknownOutcomeError`."""
    why = "closed" if closed else f"lost: {exc}"
    if not call.sent or call.op in IDEMPOTENT:
        err: PortError = UnreachableError(f"{target}: connection {why}", op=call.op, target=target)
    else:
        err = UnknownOutcomeError(
            f"{target}: connection {why} after {call.op} was sent; its outcome is unknown",
            op=call.op,
            target=target,
        )
    err.__cause__ = exc
    return err
