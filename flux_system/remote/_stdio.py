"""A channel over a spawned command's stdin/stdout (``ssh host flux serve --stdio``)."""

from __future__ import annotations

from flux_system._exceptions import PortError, PortReason
from flux_system.remote._channel import Channel

__all__ = ["open_stdio_channel"]


def open_stdio_channel(argv: list[str]) -> Channel:
    raise PortError(
        "argv targets need System.spawn's streamed stdin, not wired yet",
        op="connect",
        target=argv[0],
        reason=PortReason.UNSERVED,
    )
