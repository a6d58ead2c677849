"""One served connection: handshake, request dispatch, streams, teardown.

One reader thread per connection reads frames and dispatches them; cheap file ops run
inline on it, everything else on a thread of its own. Guarantee: every request is
answered by exactly one ``result`` or ``error`` (a spawn by exactly one terminal
``exited`` or ``failed`` event); at most ``max_in_flight`` requests run at once — past
it the reader stops reading the connection until one ends (back-pressure, not
refusal); when the connection ends for any reason, every child it spawned is killed
and reaped before :meth:`Connection.serve` returns. Not guaranteed: delivery of
answers after the client went away (they are dropped).
"""

from __future__ import annotations

import contextlib
import hmac
import threading
import time
import typing

from flux_system._exceptions import (
    PortError,
    PortReason,
    UnknownOutcomeError,
    UnservedError,
    WorkspaceError,
    WorkspaceReason,
)
from flux_system.remote._binary import (
    BINARY_VERSION,
    encode_binary_chunk,
    encode_binary_result,
)
from flux_system.remote._canonical import (
    encode_chunk,
    encode_read_result,
    fast_chunk,
    fast_read_request,
)
from flux_system.remote._channel import Channel
from flux_system.remote._config import ServerConfig
from flux_system.remote._errors import body_from_exception
from flux_system.remote._frame import HEADER, FrameDecoder, decode_body, encode_frame
from flux_system.remote._handlers import INLINE, INLINE_READ, Handlers, Upload, file_op
from flux_system.remote._ops import ARGS, IDEMPOTENT, b64d, encode_identity
from flux_system.remote._wire import (
    PROTOCOL_NAME,
    SUPPORTED_VERSIONS,
    Cancel,
    Chunk,
    Hello,
    Ping,
    Request,
    parse_message,
)

__all__ = ["Connection"]

_READ = 256 * 1024
HELLO_MAX = 64 * 1024
"""Bytes of the first frame (the hello, before the client is known): a hello at its
field bounds (token and client name 4,096 characters each, JSON-escaped) fits."""
_WATCH_S = 0.25
"""At the in-flight cap nothing is read: how often the reader checks the client is there."""


def _protocol(message: str) -> PortError:
    return PortError(message, op="frame", reason=PortReason.PROTOCOL)


class Connection:
    """Serve one client over *channel* until either side ends (call :meth:`serve`)."""

    def __init__(
        self,
        config: ServerConfig,
        channel: Channel,
        peer: str,
        *,
        after_hello: typing.Callable[[], None] | None = None,
    ) -> None:
        self._cfg = config
        self._after_hello = after_hello  # e.g. the socket's timeout: silence from now on
        self._lim = config.limits
        self._ch = channel
        self.peer = peer
        self._decoder = FrameDecoder(max_frame=self._lim.max_frame)
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._slot_freed = threading.Condition(self._lock)
        self._running = 0  # requests holding an in-flight slot (under _lock)
        self._active: set[int] = set()
        self._uploads: dict[int, Upload] = {}
        self._held: dict[int, int] = {}  # sized upload bytes a request holds (under _lock)
        self._closing = threading.Event()
        self.requests = 0
        self.in_flight_peak = 0
        self.ended = ""
        self._served = frozenset(config.operations())
        self._fast_reads = self._lim.inline_fs and "read_bytes" in self._served
        self.version = 0  # the negotiated protocol version (0: before the handshake)
        self._encode_read = encode_read_result  # a small read's result frame (by version)
        self._encode_chunk = encode_chunk  # a chunk's frame (by version)
        self._handlers = Handlers(config, self)

    # -- sending (any thread) ----------------------------------------------------------

    def send(self, message: dict[str, object]) -> None:
        self.send_frame(encode_frame(message, max_frame=self._lim.max_frame))

    def send_frame(self, frame: bytes) -> None:
        if self._closing.is_set():
            raise ConnectionError("the connection is closing")
        with self._send_lock:
            self._ch.send_all(frame)

    def send_chunk(self, rid: int, stream: str, data: bytes, last: bool = False) -> None:
        self.send_frame(self._encode_chunk(rid, stream, data, last, max_frame=self._lim.max_frame))

    def answer(self, rid: int, value: object, op: str = "request") -> None:
        """Send *rid*'s result; a value no frame can carry fails that request alone."""
        try:
            frame = encode_frame(
                {"type": "result", "id": rid, "value": value}, max_frame=self._lim.max_frame
            )
        except (PortError, ValueError) as exc:  # over the ceiling; a name not UTF-8 (a
            # surrogate-escaped byte from the file system); a NaN: refused, not fatal
            why = (
                "a name or text in it is not valid UTF-8"
                if isinstance(exc, UnicodeEncodeError)
                else str(exc.message if isinstance(exc, PortError) else exc)
            )
            message = f"{op}: the result cannot travel: {why}"
            self.fail(
                rid,
                op,
                PortError(message, op=op, reason=PortReason.REFUSED)
                if op in IDEMPOTENT
                else UnknownOutcomeError(message + " (it ran)", op=op),  # its effect happened
            )
            return
        self._quiet(lambda: self.send_frame(frame))

    def fail(self, rid: int, op: str, exc: BaseException) -> None:
        body = body_from_exception(exc, op)
        try:
            frame = encode_frame({"type": "error", "id": rid, "error": body})
        except ValueError:  # a path in the message that is not UTF-8: shown escaped
            shown = {
                k: v.encode("utf-8", "backslashreplace").decode("utf-8")
                if isinstance(v, str)
                else v
                for k, v in body.items()
            }
            frame = encode_frame({"type": "error", "id": rid, "error": shown})
        self._quiet(lambda: self.send_frame(frame))

    @staticmethod
    def _quiet(fn: typing.Callable[[], None]) -> None:
        with contextlib.suppress(ConnectionError, OSError):  # the client is gone
            fn()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def abort(self) -> None:
        """End the connection from another thread: the reader wakes and tears it down."""
        self._ch.shutdown()

    # -- the connection's life (the reader thread) ------------------------------------

    def serve(self) -> None:
        """Handshake, then serve requests until EOF, a protocol error or silence."""
        handshaken = False
        try:
            self.ended = "handshake refused"
            if self._handshake():
                handshaken = True
                self.ended = "closed by the client"
                self._loop()
        except PortError as exc:  # the client broke the protocol: say why, then close
            self.ended = f"protocol error: {exc.message}"
            self._goodbye("protocol", exc.message)
        except TimeoutError:
            self.ended = (
                "silent for three heartbeats"
                if handshaken
                else f"no hello within {self._lim.handshake_s:g} s"
            )
        except (ConnectionError, OSError) as exc:
            self.ended = f"connection lost: {type(exc).__name__}"
        finally:
            self._teardown()

    def _goodbye(self, reason: str, message: str) -> None:
        self._quiet(
            lambda: self.send({"type": "goodbye", "reason": reason, "message": message[:4000]})
        )

    def _read(self) -> list[dict[str, object]] | None:
        """The hello and any frames pipelined behind it, within ``handshake_s``.

        Before the client is known, one frame of at most :data:`HELLO_MAX` bytes is
        accepted (refused from its header, as any frame over the ceiling): an
        unauthenticated peer can make the server hold no more than that.

        Raises:
            TimeoutError: the hello did not arrive in time (however slowly it trickled).
            PortError: ``PROTOCOL``: the first frame's length is 0 or over ``HELLO_MAX``.
        """
        deadline = time.monotonic() + self._lim.handshake_s
        ceiling = min(HELLO_MAX, self._lim.max_frame)
        buf = bytearray()  # at most HEADER + ceiling + one read
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("no hello in time")
            data = self._ch.recv(_READ)
            if not data:
                if buf:
                    raise _protocol("the stream ended inside a frame")
                return None
            buf += data
            if len(buf) < HEADER.size:
                continue
            (length,) = HEADER.unpack_from(buf)
            if length == 0:
                raise _protocol("frame of length 0")
            if length > ceiling:
                raise _protocol(f"hello length {length} exceeds the {ceiling}-byte ceiling")
            end = HEADER.size + length
            if len(buf) >= end:
                hello = decode_body(bytes(buf[HEADER.size : end]))
                return [hello, *self._decoder.feed(bytes(buf[end:]))]

    def _handshake(self) -> bool:
        messages = self._read()
        if messages is None:
            return False
        hello = parse_message(messages[0])
        if not isinstance(hello, Hello):
            self._goodbye("protocol", f"expected hello, got {hello.type}")
            return False
        common = sorted(set(hello.versions) & set(SUPPORTED_VERSIONS))
        if not common:
            self._goodbye(
                "version",
                f"server speaks {PROTOCOL_NAME} versions {list(SUPPORTED_VERSIONS)}, "
                f"client offered {hello.versions[:16]}",
            )
            return False
        if self._cfg.token is not None:
            given = (hello.token or "").encode("utf-8")
            if not hmac.compare_digest(given, self._cfg.token):
                self._goodbye("auth", "bad or missing token")
                return False
        if self._after_hello is not None:  # before the welcome: the client may act on it
            self._after_hello()
        self.version = common[-1]
        if self.version >= BINARY_VERSION:
            self._encode_read = encode_binary_result
            self._encode_chunk = encode_binary_chunk
        lim = self._lim
        self.send(
            {
                "type": "welcome",
                "protocol": PROTOCOL_NAME,
                "version": self.version,
                "server": encode_identity(self._cfg.identity, str(self._cfg.workspace.root)),
                "operations": sorted(self._served),
                "limits": {
                    "max_frame": lim.max_frame,
                    "max_chunk": lim.max_chunk,
                    "max_in_flight": lim.max_in_flight,
                    "max_buffered_output": lim.max_buffered_output,
                    "heartbeat_s": lim.heartbeat_s,
                },
            }
        )
        for extra in messages[1:]:  # pipelined after hello
            self._dispatch(extra)
        return True

    def _loop(self) -> None:
        while True:
            data = self._ch.recv(_READ)
            if not data:
                if not self._decoder.at_boundary():
                    raise _protocol("the stream ended inside a frame")
                return
            for body in self._decoder.feed_bodies(data):
                # Canonical bulk chunks and small reads skip JSON and the models (the
                # same checks, made on the bytes: ._canonical); the prefix only picks
                # which recogniser to ask.
                if body.startswith(b'{"type":"chunk"'):
                    chunk = fast_chunk(body)
                    if chunk is not None:
                        self._on_chunk(*chunk)
                        continue
                read = fast_read_request(body) if self._fast_reads else None
                if read is not None:
                    self._fast_read(*read)
                else:
                    self._dispatch(decode_body(body))

    def _on_chunk(self, rid: int, stream: str, data: bytes, last: bool) -> None:
        upload = self._uploads.get(rid)
        if upload is None or upload.stream != stream:
            raise _protocol(f"chunk for request {rid} ({stream}) that expects none")
        upload.add(data, last)
        if last:
            del self._uploads[rid]

    def _teardown(self) -> None:
        self._closing.set()
        self._ch.shutdown()
        for upload in list(self._uploads.values()):
            upload.discard()
        self._handlers.close()  # kills every child, waits for their threads
        self._ch.close()

    # -- dispatch ------------------------------------------------------------------------

    def _dispatch(self, obj: dict[str, object]) -> None:
        msg = parse_message(obj)
        if isinstance(msg, Request):
            self._start(msg)
        elif isinstance(msg, Chunk):
            self._on_chunk(msg.id, msg.stream, b64d(msg.data, what="chunk data"), msg.last)
        elif isinstance(msg, Cancel):
            upload = self._uploads.get(msg.id)
            if upload is not None:  # its request may be waiting for the rest of it
                upload.cancel()
            self._handlers.cancel(msg.id)
        elif isinstance(msg, Ping):
            self.send({"type": "pong", "nonce": msg.nonce})
        else:
            raise _protocol(f"a client may not send {msg.type!r}")

    def _admit(self, rid: int) -> None:
        """Give request *rid* an in-flight slot; at the cap, wait for one to free —
        nothing more is read from the connection meanwhile (back-pressure) — or for
        the client to hang up (then the connection ends: its children are killed).

        Raises:
            ConnectionError: the client went away while the connection was at the cap.
        """
        with self._lock:
            if rid in self._active:
                raise _protocol(f"request id {rid} is in use")
            while self._running >= self._lim.max_in_flight:
                if not self._slot_freed.wait(_WATCH_S) and self._ch.hung_up():
                    raise ConnectionError("the client hung up at the in-flight cap")
            self._running += 1
            self._active.add(rid)
            self.requests += 1
            self.in_flight_peak = max(self.in_flight_peak, self._running)

    def _start(self, req: Request) -> None:
        self._admit(req.id)
        if req.op not in self._served:
            self.done(req.id)
            self.fail(
                req.id,
                req.op,
                UnservedError(f"{req.op!r} is not served here", op=req.op, target=self.peer),
            )
            return
        upload = self._expect_upload(req)
        if upload is not None and upload.refused is not None:
            self.done(req.id)
            self.fail(req.id, req.op, upload.refused)
            return
        if self._lim.inline_fs and req.op in INLINE and self._inline(req):
            return
        self._handlers.start(req, upload)

    def done(self, rid: int, *, keep_id: bool = False) -> None:
        """A request ended (or a spawn started, *keep_id*): give its slot back."""
        with self._lock:
            if not keep_id:
                self._active.discard(rid)
            self._held.pop(rid, None)
            self._running -= 1
            self._slot_freed.notify()

    def event(self, rid: int, event: str, **fields: object) -> None:
        self.send({"type": "event", "id": rid, "event": event, **fields})

    def send_cancelled(self, rid: int, op: str) -> None:
        body = {
            "kind": "cancelled",
            "error": "CancelledError",
            "op": op,
            "target": None,
            "reason": "cancelled",
            "message": "cancelled by the client",
        }
        self._quiet(lambda: self.send({"type": "error", "id": rid, "error": body}))

    def forget(self, rid: int) -> None:
        """A spawned child ended: its id may be used again."""
        with self._lock:
            self._active.discard(rid)

    def _expect_upload(self, req: Request) -> Upload | None:
        if req.op not in ("write_bytes", "append_bytes", "run", "spawn"):
            return None
        if req.op == "spawn":
            if req.args.get("stdin") != "stream":
                return None
            upload = Upload("stdin", None, window=self._lim.max_buffered_output)
            self._uploads[req.id] = upload
            return upload
        key = "stdin_size" if req.op == "run" else "size"
        size = req.args.get(key)
        if size is None or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return None  # the args are invalid or there is no stdin: validation answers
        upload = Upload("stdin" if req.op == "run" else "upload", size)
        cap = self._lim.max_upload
        if size > cap:
            upload.refuse(ValueError(f"{size} bytes exceeds the {cap}-byte upload limit"))
        else:  # uploads are held in memory until their request ends: cap them together
            with self._lock:
                held = sum(self._held.values())
                if held + size > cap:
                    upload.refuse(
                        PortError(
                            f"{size} more bytes of uploads in flight on this connection "
                            f"would exceed the {cap}-byte upload limit",
                            op=req.op,
                            reason=PortReason.REFUSED,
                        )
                    )
                else:
                    self._held[req.id] = size
        if size == 0:
            upload.add(b"", True)
        else:
            self._uploads[req.id] = upload  # until its last chunk: swallowed if refused
        return upload

    def _inline(self, req: Request) -> bool:
        """Serve a metadata op or a small read right here (no thread switch).

        Returns False, with nothing sent, when a read is larger than ``INLINE_READ``.
        """
        try:
            args: typing.Any = ARGS[req.op].model_validate(req.args)
            if req.op == "read_bytes":
                return self._read_small(req.id, args.path, args.limit)
            value = file_op(self._cfg, req.op, args)
        except Exception as exc:
            self.done(req.id)
            self.fail(req.id, req.op, exc)
            return True
        self.done(req.id)
        self.answer(req.id, value, req.op)
        return True

    def _read_small(self, rid: int, path: str, limit: int | None) -> bool:
        """Read *path* here and answer (admitted, valid args); False, with nothing
        sent, when the file is larger than ``INLINE_READ`` and no smaller limit holds."""
        small = limit is not None and limit <= INLINE_READ
        try:
            data = self._cfg.workspace.read_bytes(path, limit=limit if small else INLINE_READ)
            frame = self._encode_read(rid, data, max_frame=self._lim.max_frame)
        except Exception as exc:
            if (
                isinstance(exc, WorkspaceError)
                and exc.reason is WorkspaceReason.TOO_LARGE
                and not small
            ):
                return False
            self.done(rid)
            self.fail(rid, "read_bytes", exc)
            return True
        self.done(rid)
        try:  # not contextlib.suppress: a context manager per answer costs 0.5 us
            self.send_frame(frame)
        except (ConnectionError, OSError):
            return True  # the client is gone
        return True

    def _fast_read(self, rid: int, path: str, limit: int | None) -> None:
        """A canonical ``read_bytes`` request (``fast_read_request``): the same steps
        as :meth:`_start` and :meth:`_inline` take for it, without the models."""
        self._admit(rid)
        if not self._read_small(rid, path, limit):
            req = Request(
                type="request", id=rid, op="read_bytes", args={"path": path, "limit": limit}
            )
            self._handlers.start(req, None)
