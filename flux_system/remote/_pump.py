"""A bounded byte buffer between a child's drain thread and a connection's event loop.

The drain thread puts output in; an asyncio task takes it out and sends it. When the
buffer holds ``cap`` bytes the producer blocks — back-pressure reaches the child's
pipe, as with a plain pipe — until the consumer takes some or the pump closes.
Guarantee: at most ``cap`` bytes plus one put are buffered per pump; a closed pump
never blocks a producer (its puts raise :class:`PumpClosed`, which ends the child's
observer and so kills its tree). One slow pump never blocks another.
"""

from __future__ import annotations

import asyncio
import threading
import typing

__all__ = ["Pump", "PumpClosed"]


class PumpClosed(Exception):
    """The consumer went away (connection closed or request cancelled)."""


@typing.final
class Pump:
    """Output of one child, per stream, in arrival order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cap: int) -> None:
        self._loop = loop
        self._cap = cap
        self._cond = threading.Condition()
        self._items: list[tuple[str, bytes]] = []
        self._size = 0
        self._closed = False
        self._ready = asyncio.Event()

    def _wake(self) -> None:
        self._ready.set()

    def put(self, stream: str, data: bytes) -> None:
        """Add *data* (called from the drain thread); blocks while the buffer is full."""
        with self._cond:
            while self._size >= self._cap and not self._closed:
                self._cond.wait()
            if self._closed:
                raise PumpClosed
            self._items.append((stream, data))
            self._size += len(data)
        self._loop.call_soon_threadsafe(self._wake)

    def close(self) -> None:
        """Wake every blocked producer; later puts raise :class:`PumpClosed`."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._size = 0
            self._cond.notify_all()
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake)

    def take_now(self, limit: int) -> list[tuple[str, bytes]]:
        """Take what is buffered, merged per stream run, pieces of at most *limit* bytes."""
        with self._cond:
            items, self._items = self._items, []
            self._size = 0
            self._cond.notify_all()
        out: list[tuple[str, bytes]] = []
        for stream, data in items:
            if out and out[-1][0] == stream and len(out[-1][1]) + len(data) <= limit:
                out[-1] = (stream, out[-1][1] + data)
                continue
            for start in range(0, len(data), limit):
                out.append((stream, data[start : start + limit]))
        return out

    async def wait(self) -> None:
        """Wait until something was put (or the pump closed)."""
        await self._ready.wait()
        self._ready.clear()
