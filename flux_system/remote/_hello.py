"""The client's side of the handshake: ``hello`` out, ``welcome`` (or ``goodbye``) in.

Guarantee: :func:`handshake` returns within *timeout* seconds with the server's
``welcome`` — for a version this client offered — or raises; on any failure the
channel is closed. A server that never answers, or answers a byte at a time, cannot
hold it longer: at the deadline the channel is shut, which ends a blocked receive (and
a send into a full pipe). Not guaranteed: anything the welcome claims (the caller marks
it ``remotely_reported``).
"""

from __future__ import annotations

import threading
import time

from flux_system._exceptions import PortError, PortReason, UnreachableError
from flux_system.remote._channel import Channel
from flux_system.remote._frame import FrameDecoder, encode_frame
from flux_system.remote._wire import (
    PROTOCOL_NAME,
    SUPPORTED_VERSIONS,
    Goodbye,
    Welcome,
    parse_message,
)

__all__ = ["handshake"]

_RECV = 256 * 1024


def handshake(
    channel: Channel, *, target: str, token: str | None, name: str, timeout: float
) -> tuple[Welcome, FrameDecoder, list[dict[str, object]]]:
    """Say hello on *channel*; return the welcome, the decoder to go on reading with,
    and any frames that came in behind the welcome.

    Raises:
        UnreachableError: no answer within *timeout*, or the connection failed.
        PortError: ``AUTH`` (the server refused the token), ``PROTOCOL`` (a version
            mismatch, or something other than a welcome).
    """
    hello: dict[str, object] = {
        "type": "hello",
        "protocol": PROTOCOL_NAME,
        "versions": list(SUPPORTED_VERSIONS),
        "client": name,
    }
    if token is not None:
        hello["token"] = token
    decoder = FrameDecoder()
    pending: list[dict[str, object]] = []
    settled = threading.Lock()  # taken once: by the timer firing, or by the answer

    def expire() -> None:
        if settled.acquire(blocking=False):  # else the answer came first
            channel.shutdown()

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        channel.send_all(encode_frame(hello))
        deadline = time.monotonic() + timeout
        while not pending:
            if time.monotonic() > deadline:
                raise UnreachableError(
                    f"{target}: no handshake answer", op="connect", target=target
                )
            data = channel.recv(_RECV)
            if not data:
                raise UnreachableError(
                    f"{target} closed the connection", op="connect", target=target
                )
            pending.extend(decoder.feed(data))
        first = pending.pop(0)
        if not settled.acquire(blocking=False):
            raise ConnectionError("the handshake timed out")
    except (PortError, OSError) as exc:
        channel.close()
        if not settled.acquire(blocking=False):  # the timer fired and shut the channel
            raise UnreachableError(
                f"{target}: no handshake answer within {timeout:g} s",
                op="connect",
                target=target,
            ) from exc
        if isinstance(exc, PortError):
            raise
        raise UnreachableError(
            f"{target}: handshake failed: {exc}", op="connect", target=target
        ) from exc
    finally:
        timer.cancel()
    msg = parse_message(first)
    if isinstance(msg, Goodbye):
        channel.close()
        reason = PortReason.AUTH if msg.reason == "auth" else PortReason.PROTOCOL
        raise PortError(
            f"{target} refused the connection ({msg.reason}): {msg.message}",
            op="connect",
            target=target,
            reason=reason,
        )
    if not isinstance(msg, Welcome) or msg.version not in SUPPORTED_VERSIONS:
        channel.close()
        raise PortError(
            f"{target} answered the handshake with {msg.type!r}",
            op="connect",
            target=target,
            reason=PortReason.PROTOCOL,
        )
    return msg, decoder, pending
