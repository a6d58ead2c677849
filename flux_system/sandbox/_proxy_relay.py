"""Copy bytes both ways between two connected sockets: :func:`relay`.

Shared by the host-side egress proxy (client ↔ vetted upstream) and the in-sandbox
forwarder (sandbox TCP client ↔ the proxy's Unix socket). One thread, ``poll``-driven,
bounded buffers with back-pressure (a direction reads only once its buffer has been
written out), half-close passed through (``shutdown(SHUT_WR)`` once one side has
finished sending), and an idle timeout that ends a connection on which nothing moved.
"""

from __future__ import annotations

import contextlib
import select
import socket
from typing import Final

__all__ = ["CHUNK", "relay"]

CHUNK: Final = 65536  # bytes read at once per direction: the whole per-direction buffer
_ERRORS: Final = select.POLLERR | select.POLLHUP | select.POLLNVAL


class _Direction:
    __slots__ = ("budget", "buf", "done", "dst", "eof", "src")

    def __init__(
        self, src: socket.socket, dst: socket.socket, pending: bytes, budget: int | None
    ) -> None:
        self.src = src
        self.dst = dst
        self.buf = bytearray(pending)
        self.budget = budget  # bytes still to be read from src (None: until EOF)
        self.eof = False
        self.done = False

    def step(self) -> bool:
        """Move what can be moved without blocking; True when something moved.

        Raises OSError (a reset, a broken pipe) for the caller to end the relay.
        """
        moved = False
        if self.buf:
            try:
                sent = self.dst.send(self.buf)
            except BlockingIOError:
                return False
            del self.buf[:sent]
            moved = sent > 0
        if self.buf:
            return moved
        if self.budget == 0:
            self.done = True  # everything allowed has gone out; later bytes stay unread
            return True
        if self.eof:
            with contextlib.suppress(OSError):  # the other side may be gone already
                self.dst.shutdown(socket.SHUT_WR)
            self.done = True
            return True
        try:
            data = self.src.recv(CHUNK if self.budget is None else min(CHUNK, self.budget))
        except BlockingIOError:
            return moved
        if not data:
            self.eof = True
        else:
            self.buf += data
            if self.budget is not None:
                self.budget -= len(data)
        return True


def relay(
    left: socket.socket,
    right: socket.socket,
    *,
    idle_timeout: float,
    to_right: bytes = b"",
    to_left: bytes = b"",
    right_budget: int | None = None,
) -> None:
    """Copy ``left → right`` and ``right → left`` until both directions have ended.

    *to_right* / *to_left* are bytes already read that go out first (a request head
    rewritten by the proxy, bytes that arrived behind a CONNECT head). With
    *right_budget*, at most that many more bytes are read from *left* (a request
    body's declared length); what *left* sends beyond it is never read nor forwarded.

    Guarantee: at most :data:`CHUNK` bytes are buffered per direction; returns when
    both sides have finished sending (each EOF is passed on as a half-close), when a
    side resets, or when nothing moved for *idle_timeout* seconds. Never raises for a
    peer's behaviour. Not guaranteed: that the sockets are closed — the caller owns
    them (and shuts them down from another thread to end a relay early).
    """
    for sock in (left, right):
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):  # relayed writes go out at once
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    directions = (
        _Direction(left, right, to_right, right_budget),
        _Direction(right, left, to_left, None),
    )
    poller = select.poll()
    lfd, rfd = left.fileno(), right.fileno()
    wait_ms = max(1, int(idle_timeout * 1000))
    try:
        while not all(d.done for d in directions):
            moved = False
            for d in directions:
                if not d.done:
                    moved = d.step() or moved
            if moved:
                continue
            masks = {lfd: 0, rfd: 0}
            for d in directions:
                if d.done:
                    continue
                if d.buf:
                    masks[d.dst.fileno()] |= select.POLLOUT
                elif not d.eof:
                    masks[d.src.fileno()] |= select.POLLIN
            for fd, mask in masks.items():
                poller.register(fd, mask)
            events = poller.poll(wait_ms)
            if not events:
                return  # idle for idle_timeout: end the connection
            if any(ev & _ERRORS for _, ev in events) and not any(
                d.step() for d in directions if not d.done
            ):
                return  # hung up or failed and nothing left to move
    except OSError:
        return  # reset, broken pipe, shut down by the owner: the relay is over
