"""The client side of one connection: handshake, one reader at a time, calls by id.

Exactly one thread at a time holds the *reading role*: it alone calls ``recv`` and
routes answers by id to their calls. A caller that waits for its own answer
(:meth:`Client.exchange`) takes the role itself when nobody holds it, so a sequential
request/response costs no thread hand-off; otherwise (another caller reads, calls that
nobody waits on are outstanding: spawned children, many requests in flight, a
heartbeat's pong) a background thread holds it and the callers wait for their calls.

Guarantee: every call ends in its value or one typed error. If the connection is
lost, a call whose request was never sent raises :class:`UnreachableError`; one that
was sent raises :class:`UnreachableError` for an idempotent read (safe to retry) and
:class:`UnknownOutcomeError` for anything that may have changed something (never
retried automatically). Before a request is sent while nobody reads, whatever the
channel already holds (a ``goodbye``, EOF) is read first, so a connection the server
ended while idle fails the call as never sent. The reader never blocks on a consumer:
streamed output goes to bounded per-child buffers, so one slow stream never stalls
another. Not guaranteed: any claim the server makes about itself (marked
``remotely_reported``); on a stdio channel, noticing an idle server's end before the
next heartbeat (its pipe cannot be polled).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from flux_system._exceptions import (
    PortError,
    PortReason,
    UnknownOutcomeError,
    UnreachableError,
)
from flux_system.port import Identity
from flux_system.remote._binary import BINARY_VERSION, BinaryResult, decode_binary, refuse_binary
from flux_system.remote._call import Call, lost_error
from flux_system.remote._canonical import (
    encode_chunk,
    encode_request,
    fast_chunk,
    fast_read_result,
)
from flux_system.remote._channel import Channel
from flux_system.remote._errors import error_from_body
from flux_system.remote._frame import decode_body, encode_frame
from flux_system.remote._hello import handshake
from flux_system.remote._ops import b64d, decode_identity
from flux_system.remote._wire import (
    Chunk,
    ErrorMsg,
    Event,
    Goodbye,
    Pong,
    Result,
    parse_message,
)

__all__ = ["Call", "Client"]

_RECV = 256 * 1024
_MIN_BEAT_S = 0.01
_MAX_BEAT_S = 60.0
"""Pinging more often than the server asks is harmless; this bounds both ways."""


class Client:
    """A handshaken connection over *channel* to the server named *target*."""

    def __init__(
        self,
        channel: Channel,
        *,
        target: str,
        token: str | None,
        timeout: float,
        client_name: str = "flux_system.remote",
    ) -> None:
        self.target = target
        self._ch = channel
        self._timeout = timeout
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)  # the background reader waits here
        self._reading = False  # a thread holds the reading role (under _lock)
        self._calls: dict[int, Call] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._lost: BaseException | None = None
        self._last_pong = time.monotonic()
        self._pings = 0  # nonce of the last ping sent
        self._pongs = 0  # nonce of the last pong read
        self.welcome, self._decoder, pending = handshake(
            channel, target=target, token=token, name=client_name, timeout=timeout
        )
        self.version = self.welcome.version
        self.identity: Identity = decode_identity(self.welcome.server.model_dump())
        self.operations = frozenset(self.welcome.operations)
        self.max_chunk = self.welcome.limits.max_chunk
        self._max_frame = self.welcome.limits.max_frame
        try:
            for obj in pending:  # frames that came in with the welcome
                self._route(obj)
        except Exception as exc:
            self._lose(exc)
        self._reader = threading.Thread(
            target=self._background, name=f"flux-remote-{target}", daemon=True
        )
        self._reader.start()
        self._beat = threading.Thread(
            target=self._heartbeat, name="flux-remote-heartbeat", daemon=True
        )
        self._beat.start()

    # -- calls ---------------------------------------------------------------------------

    def start(
        self,
        op: str,
        args: dict[str, object],
        *,
        upload: tuple[str, bytes] | None = None,
        on_chunk: Callable[[str, bytes], None] | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> Call:
        """Send one request (and its upload stream, in the same locked burst); its
        answers are read in the background (for calls nobody waits on at once)."""
        call = self._send(op, args, upload, on_chunk, on_event)
        with self._lock:
            if not self._reading:
                self._turn.notify()
        return call

    def exchange(
        self, op: str, args: dict[str, object], *, upload: tuple[str, bytes] | None = None
    ) -> Call:
        """Send one request and wait for its answer, reading the connection on this
        thread when no other thread does; return the ended call (see :meth:`wait`)."""
        self._probe()
        call = self._send(op, args, upload, None, None)
        self._drive(call)
        return call

    def call(
        self, op: str, args: dict[str, object], *, upload: tuple[str, bytes] | None = None
    ) -> object:
        return self.wait(self.exchange(op, args, upload=upload))

    def _send(
        self,
        op: str,
        args: dict[str, object],
        upload: tuple[str, bytes] | None,
        on_chunk: Callable[[str, bytes], None] | None,
        on_event: Callable[[Event], None] | None,
    ) -> Call:
        call = Call(next(self._ids), op)
        if op == "read_bytes":  # a read gets at most what it asked for; nothing else any
            limit = args.get("limit")
            call.room = limit if isinstance(limit, int) else None
        call.on_chunk = on_chunk
        call.on_event = on_event
        try:
            frames = [encode_request(call.id, op, args, max_frame=self._max_frame)]
        except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 JSON can carry it
            raise PortError(
                f"{op}: an argument is not valid Unicode text (a lone surrogate)",
                op=op,
                target=self.target,
                reason=PortReason.PROTOCOL,
            ) from exc
        if upload is not None:
            stream, data = upload
            step = self.max_chunk
            for start in range(0, len(data), step):  # size 0: no chunk at all
                last = start + step >= len(data)
                piece = data[start : start + step]
                frames.append(encode_chunk(call.id, stream, piece, last, max_frame=self._max_frame))
        with self._lock:
            if self._lost is not None or self._closed:
                raise UnreachableError(
                    f"{self.target}: connection is closed", op=op, target=self.target
                )
            self._calls[call.id] = call
        try:
            with self._send_lock:
                call.sent = True
                for frame in frames:
                    self._ch.send_all(frame)
        except OSError as exc:
            self._lose(exc)
        return call

    def send_chunk(self, rid: int, stream: str, data: bytes, last: bool) -> None:
        self._send_raw(encode_chunk(rid, stream, data, last, max_frame=self._max_frame))

    def cancel(self, rid: int) -> None:
        self._send_raw(encode_frame({"type": "cancel", "id": rid}))

    def _send_raw(self, frame: bytes) -> None:
        try:
            with self._send_lock:
                self._ch.send_all(frame)
        except OSError as exc:
            self._lose(exc)

    def wait(self, call: Call, timeout: float | None = None) -> object:
        """Block for *call*'s answer; raise its error."""
        if not call.ended and not call.done.wait(timeout):
            raise UnknownOutcomeError(
                f"{self.target}: no answer to {call.op} within {timeout} s",
                op=call.op,
                target=self.target,
            )
        if call.error is not None:
            raise call.error
        return call.value

    # -- the reading role ----------------------------------------------------------------

    def _probe(self) -> None:
        """While nobody reads, read what the channel already holds (a goodbye, EOF),
        so a connection the server already ended fails the next call as never sent."""
        with self._lock:
            if self._reading or self._lost is not None:
                return
            self._reading = True
        try:
            if self._ch.ready():
                self._read_once()
        except Exception as exc:
            self._lose(exc)
        finally:
            self._release()

    def _drive(self, call: Call) -> None:
        """Read on this thread until *call* ended, unless another thread reads (then it
        routes *call*'s answer: wait for ``call.done``)."""
        with self._lock:
            lead = not (call.ended or self._reading or self._lost is not None)
            if lead:
                self._reading = True
        if not lead:
            return
        try:
            while not call.ended:
                self._read_once()
        except Exception as exc:  # EOF, reset, a protocol error: all calls end
            self._lose(exc)
        finally:
            self._release()

    def _release(self) -> None:
        """Give the reading role up; wake the background reader if anything is left."""
        with self._lock:
            self._reading = False
            if self._calls or self._pings > self._pongs or self._lost is not None:
                self._turn.notify()

    def _background(self) -> None:
        """Hold the reading role whenever nobody else does and something is awaited;
        release the fd once the connection is lost and no thread reads any more."""
        try:
            while True:
                with self._lock:
                    while self._lost is None and (
                        self._reading or not (self._calls or self._pings > self._pongs)
                    ):
                        self._turn.wait()
                    if self._lost is not None:
                        return
                    self._reading = True
                try:
                    while True:
                        self._read_once()
                        with self._lock:
                            if self._lost is not None or not (
                                self._calls or self._pings > self._pongs
                            ):
                                break
                except BaseException as exc:  # EOF, reset, a protocol error: all calls end
                    self._lose(exc)
                finally:
                    self._release()
        finally:
            with self._lock:
                while self._reading:
                    self._turn.wait()
            with self._send_lock:
                self._ch.close()  # no thread reads or sends: the fd number is free after

    def _read_once(self) -> None:
        """Read what arrives and route every frame it completes (reading role held)."""
        data = self._ch.recv(_RECV)
        # From here an interruption would leave frames half routed: the connection ends.
        try:
            if not data:
                raise ConnectionError("the server closed the connection")
            for body in self._decoder.feed_bodies(data):
                self._route_body(body)
        except BaseException as exc:
            self._lose(exc)
            raise

    def _route_body(self, body: bytes) -> None:
        """Bulk frames in the canonical spelling skip JSON and the models (the same
        checks, done directly on the bytes); everything else takes the general path."""
        if body[:1] == b"\x00":  # a binary frame (version 2: a small read's bytes, a chunk)
            self._binary(body)
            return
        chunk = fast_chunk(body)
        if chunk is not None:
            rid, stream, data, _last = chunk
            call = self._calls.get(rid)
            if call is not None:
                self._chunk(call, stream, data)
            return
        small = fast_read_result(body)
        if small is not None:
            rid, data = small
            call = self._calls.get(rid)
            if call is not None:
                self._end(call, value={"size": len(data), "bytes": data})
            return
        self._route(decode_body(body))

    def _binary(self, body: bytes) -> None:
        if self.version < BINARY_VERSION:
            raise refuse_binary(self.version)
        got = decode_binary(body)
        call = self._calls.get(got.id)
        if call is None:
            return  # an answer to a call already given up on
        if not isinstance(got, BinaryResult):
            self._chunk(call, got.stream, got.data)  # as a JSON chunk is
            return
        data = got.data
        if call.op != "read_bytes" or (call.room is not None and len(data) > call.room):
            raise PortError(
                f"a binary result of {len(data)} bytes for {call.op} (room {call.room})",
                op=call.op,
                target=self.target,
                reason=PortReason.PROTOCOL,
            )
        self._end(call, value={"size": len(data), "bytes": data})

    def _chunk(self, call: Call, stream: str, data: bytes) -> None:
        if stream == "download":
            room = call.room
            if room is not None:
                if len(data) > room:
                    raise PortError(
                        f"{call.op} got more download than it asked for",
                        op=call.op,
                        target=self.target,
                        reason=PortReason.PROTOCOL,
                    )
                call.room = room - len(data)
            call.download.append(data)
        elif call.on_chunk is not None:
            call.on_chunk(stream, data)

    def _route(self, obj: dict[str, object]) -> None:
        msg = parse_message(obj)
        if isinstance(msg, Pong):
            self._last_pong = time.monotonic()
            with self._lock:
                self._pongs = max(self._pongs, msg.nonce)
            return
        if isinstance(msg, Goodbye):
            raise ConnectionError(f"server said goodbye ({msg.reason}): {msg.message}")
        rid = getattr(msg, "id", None)
        call = self._calls.get(rid) if isinstance(rid, int) else None
        if call is None:
            if isinstance(msg, ErrorMsg) and msg.id == 0:
                raise ConnectionError(f"server error: {msg.error.message}")
            return  # an answer to a call already given up on
        if isinstance(msg, Result):
            self._end(call, value=msg.value)
        elif isinstance(msg, ErrorMsg):
            self._end(call, error=error_from_body(msg.error.model_dump(), target=self.target))
        elif isinstance(msg, Chunk):
            self._chunk(call, msg.stream, b64d(msg.data, what="chunk data"))
        elif isinstance(msg, Event):
            if call.on_event is not None:
                call.on_event(msg)
            if msg.event in ("exited", "failed"):
                self._end(call, value=msg)
        else:
            raise PortError(
                f"a server may not send {msg.type!r}", op="frame", reason=PortReason.PROTOCOL
            )

    def _end(self, call: Call, *, value: object = None, error: BaseException | None = None) -> None:
        with self._lock:
            mine = self._calls.pop(call.id, None) is call
        if mine:  # else the connection's loss ended it (exactly one ending)
            call.finish(value, error)

    def _lose(self, exc: BaseException) -> None:
        with self._lock:
            if self._lost is None:
                self._lost = exc
            calls, self._calls = list(self._calls.values()), {}
            self._turn.notify()  # the background reader closes the fd once nobody reads
        self._ch.shutdown()  # wakes a thread blocked reading
        for call in calls:
            call.finish(error=lost_error(call, exc, target=self.target, closed=self._closed))

    def _heartbeat(self) -> None:
        # The server's figure, held to a sane range: a ping storm (1e-9) or a heartbeat
        # that never comes (1e308: sleep() overflows) would be the server's choice, not ours.
        interval = min(max(self.welcome.limits.heartbeat_s, _MIN_BEAT_S), _MAX_BEAT_S)
        nonce = 0
        while True:
            time.sleep(interval)
            with self._lock:
                if self._lost is not None or self._closed:
                    return
            if time.monotonic() - self._last_pong > 3 * interval + self._timeout:
                self._lose(TimeoutError(f"no heartbeat answer in {3 * interval:.0f} s"))
                return
            nonce += 1
            with self._lock:
                self._pings = nonce  # awaited: someone must read the pong
                if not self._reading:
                    self._turn.notify()
            self._send_raw(encode_frame({"type": "ping", "nonce": nonce}))

    def close(self) -> None:
        """Close the connection; calls still waiting end with the errors above."""
        with self._lock:
            self._closed = True
        self._lose(ConnectionError("closed by the client"))

    @property
    def lost(self) -> bool:
        return self._lost is not None
