"""One served connection: handshake, request dispatch, streams, teardown.

Guarantee: every request is answered by exactly one ``result`` or ``error`` (a spawn
by exactly one terminal ``exited`` or ``failed`` event); at most ``max_in_flight``
requests run at once — past it the connection is not read until one ends; when the
connection ends for any reason, every child it spawned is killed and reaped and every
task it started is cancelled. Not guaranteed: delivery of answers after the client
went away (they are dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import typing
from collections.abc import Awaitable, Callable

from flux_system._exceptions import PortError, PortReason, UnservedError
from flux_system.port import measure_host
from flux_system.remote._config import ServerConfig
from flux_system.remote._errors import body_from_exception
from flux_system.remote._frame import FrameDecoder, encode_frame
from flux_system.remote._ops import (
    ARGS,
    b64d,
    b64e,
    encode_file_info,
    encode_http,
    encode_identity,
    encode_metrics,
    encode_run_result,
)
from flux_system.remote._pump import Pump
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

if typing.TYPE_CHECKING:
    from flux_system.process import ManagedChild

__all__ = ["Connection"]

_READ = 256 * 1024


class _Upload:
    """Bytes a request expects as chunks of one stream, exactly *size* of them."""

    def __init__(self, stream: str, size: int) -> None:
        self.stream = stream
        self.size = size
        self.parts: list[bytes] = []
        self.got = 0
        self.done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def discard(self) -> None:
        """Nobody waits any more: swallow the rest of the stream, keep nothing."""
        self.parts.clear()
        if not self.done.done():
            self.done.cancel()

    def add(self, data: bytes, last: bool) -> None:
        if self.done.done():
            return
        self.got += len(data)
        if self.got > self.size:
            self.done.set_exception(
                ValueError(f"{self.stream} carries more than {self.size} bytes")
            )
            return
        self.parts.append(data)
        if last:
            if self.got != self.size:
                self.done.set_exception(
                    ValueError(f"{self.stream} ended after {self.got} of {self.size} bytes")
                )
            else:
                self.done.set_result(b"".join(self.parts))


class Connection:
    """Serve one client over *reader*/*writer* until either side ends."""

    def __init__(
        self,
        config: ServerConfig,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
    ) -> None:
        self._cfg = config
        self._lim = config.limits
        self._reader = reader
        self._writer = writer
        self.peer = peer
        self._decoder = FrameDecoder(max_frame=self._lim.max_frame)
        self._send_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(self._lim.max_in_flight)
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._uploads: dict[int, _Upload] = {}
        self._expect: dict[int, _Upload] = {}
        self._children: dict[int, ManagedChild] = {}
        self._pumps: dict[int, Pump] = {}
        self._closing = False
        self.requests = 0
        self._running = 0
        self.in_flight_peak = 0
        self._served = frozenset(config.operations())
        self._handlers: dict[str, Callable[[int, typing.Any], Awaitable[object]]] = {
            "read_bytes": self._read_bytes,
            "write_bytes": self._write_bytes,
            "append_bytes": self._append_bytes,
            "run": self._run,
            "spawn": self._spawn,
            "kill": self._kill,
            "http_request": self._http,
            "metrics": self._metrics,
            "identity": self._identity,
        }

    # -- sending -------------------------------------------------------------------------

    async def _send(self, message: dict[str, object]) -> None:
        frame = encode_frame(message, max_frame=self._lim.max_frame)
        async with self._send_lock:
            if self._closing:
                return
            self._writer.write(frame)
            await self._writer.drain()

    async def _goodbye(self, reason: str, message: str) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self._send({"type": "goodbye", "reason": reason, "message": message[:4000]})

    # -- the connection's life -----------------------------------------------------------

    async def serve(self) -> None:
        """Handshake, then serve requests until EOF, a protocol error or silence."""
        try:
            if await self._handshake():
                await self._loop()
        except PortError as exc:  # the client broke the protocol: say why, then close
            await self._goodbye("protocol", exc.message)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            await self._teardown()

    async def _next_messages(self, timeout: float) -> list[dict[str, object]] | None:
        while True:
            try:
                data = await asyncio.wait_for(self._reader.read(_READ), timeout)
            except TimeoutError:
                return None
            if not data:
                if not self._decoder.at_boundary():
                    raise PortError(
                        "the stream ended inside a frame", op="frame", reason=PortReason.PROTOCOL
                    )
                return None
            messages = self._decoder.feed(data)
            if messages:
                return messages

    async def _handshake(self) -> bool:
        messages = await self._next_messages(self._lim.handshake_s)
        if messages is None:
            return False
        hello = parse_message(messages[0])
        if not isinstance(hello, Hello):
            await self._goodbye("protocol", f"expected hello, got {hello.type}")
            return False
        common = sorted(set(hello.versions) & set(SUPPORTED_VERSIONS))
        if not common:
            await self._goodbye(
                "version",
                f"server speaks {PROTOCOL_NAME} versions {list(SUPPORTED_VERSIONS)}, "
                f"client offered {hello.versions[:16]}",
            )
            return False
        if self._cfg.token is not None:
            given = (hello.token or "").encode("utf-8")
            if not hmac.compare_digest(given, self._cfg.token):
                await self._goodbye("auth", "bad or missing token")
                return False
        ident = encode_identity(self._cfg.identity, str(self._cfg.workspace.root))
        lim = self._lim
        await self._send(
            {
                "type": "welcome",
                "protocol": PROTOCOL_NAME,
                "version": common[-1],
                "server": ident,
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
            await self._dispatch(extra)
        return True

    async def _loop(self) -> None:
        silence = 3 * self._lim.heartbeat_s
        while True:
            messages = await self._next_messages(silence)
            if messages is None:
                return
            for obj in messages:
                await self._dispatch(obj)

    async def _teardown(self) -> None:
        self._closing = True
        for pump in self._pumps.values():
            pump.close()
        for child in list(self._children.values()):
            child.kill()
        for task in list(self._tasks.values()):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        for child in list(self._children.values()):  # killed above: reaped promptly
            await asyncio.get_running_loop().run_in_executor(None, child.join)
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()

    # -- dispatch ------------------------------------------------------------------------

    async def _dispatch(self, obj: dict[str, object]) -> None:
        msg = parse_message(obj)
        if isinstance(msg, Request):
            await self._start_request(msg)
        elif isinstance(msg, Chunk):
            upload = self._uploads.get(msg.id)
            if upload is None or upload.stream != msg.stream:
                raise PortError(
                    f"chunk for request {msg.id} ({msg.stream}) that expects none",
                    op="frame",
                    reason=PortReason.PROTOCOL,
                )
            upload.add(b64d(msg.data, what="chunk data"), msg.last)
            if msg.last:  # the stream is over; whoever waited has what it needs
                del self._uploads[msg.id]
        elif isinstance(msg, Cancel):
            task = self._tasks.get(msg.id)
            child = self._children.get(msg.id)
            if child is not None:
                child.kill()
            elif task is not None:
                task.cancel()
        elif isinstance(msg, Ping):
            await self._send({"type": "pong", "nonce": msg.nonce})
        else:
            raise PortError(
                f"a client may not send {msg.type!r}", op="frame", reason=PortReason.PROTOCOL
            )

    async def _start_request(self, req: Request) -> None:
        if req.id in self._tasks or req.id in self._children:
            raise PortError(
                f"request id {req.id} is in use", op="frame", reason=PortReason.PROTOCOL
            )
        # Back-pressure: the connection is not read again until a slot is free.
        await self._slots.acquire()
        self._running += 1
        self.requests += 1
        self.in_flight_peak = max(self.in_flight_peak, self._running)
        spec = ARGS.get(req.op)
        if spec is not None and req.op in ("write_bytes", "append_bytes", "run"):
            # Register the upload now: its chunks follow this frame on the stream.
            try:
                size = _upload_size(req.op, req.args)
            except (TypeError, ValueError):
                size = None
            if size is not None:
                upload = _Upload("stdin" if req.op == "run" else "upload", size)
                self._uploads[req.id] = upload  # until its last chunk (dispatch side)
                self._expect[req.id] = upload  # until the request ends (handler side)
                if size == 0:
                    upload.add(b"", True)
                    del self._uploads[req.id]
                if size > self._lim.max_upload:  # refuse now; swallow what follows
                    upload.discard()
                    del self._expect[req.id]
                    self._release_slot()
                    limit = self._lim.max_upload
                    too_big = ValueError(f"{size} bytes exceeds the {limit}-byte upload limit")
                    await self._answer_error(req.id, req.op, too_big)
                    return
        task = asyncio.get_running_loop().create_task(self._handle(req))
        self._tasks[req.id] = task

    def _release_slot(self) -> None:
        self._running -= 1
        self._slots.release()

    async def _answer_error(self, rid: int, op: str, exc: BaseException) -> None:
        await self._send({"type": "error", "id": rid, "error": body_from_exception(exc, op)})

    async def _handle(self, req: Request) -> None:
        held = True
        try:
            if req.op not in self._served:
                raise UnservedError(f"{req.op!r} is not served here", op=req.op, target=self.peer)
            args = ARGS[req.op].model_validate(req.args)
            handler = self._handlers.get(req.op)
            if req.op == "spawn":
                held = False
                self._release_slot()  # a child's life is bounded by max_children instead
                await self._spawn(req.id, args)
                return
            if handler is None:
                value = await self._in_thread(_file_op, self._cfg, req.op, args)
            else:
                value = await handler(req.id, args)
            await self._send({"type": "result", "id": req.id, "value": value})
        except asyncio.CancelledError:
            if not self._closing:
                await self._send(
                    {
                        "type": "error",
                        "id": req.id,
                        "error": {
                            "kind": "cancelled",
                            "error": "CancelledError",
                            "op": req.op,
                            "target": None,
                            "reason": "cancelled",
                            "message": "cancelled by the client",
                        },
                    }
                )
        except Exception as exc:
            if not self._closing:
                await self._answer_error(req.id, req.op, exc)
        finally:
            upload = self._expect.pop(req.id, None)
            if upload is not None:
                upload.discard()
            self._tasks.pop(req.id, None)
            if held:
                self._release_slot()

    @staticmethod
    async def _in_thread(fn: Callable[..., object], *args: object) -> object:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # -- handlers that stream ----------------------------------------------------------

    async def _read_bytes(self, rid: int, args: typing.Any) -> object:
        ws = self._cfg.workspace
        data = await self._in_thread(lambda: ws.read_bytes(args.path, limit=args.limit))
        assert isinstance(data, bytes)
        step = self._lim.max_chunk
        if len(data) <= step:
            return {"size": len(data), "data": b64e(data)}
        for start in range(0, len(data), step):
            piece = data[start : start + step]
            last = start + step >= len(data)
            await self._send(
                {
                    "type": "chunk",
                    "id": rid,
                    "stream": "download",
                    "data": b64e(piece),
                    "last": last,
                }
            )
        return {"size": len(data)}

    async def _received(self, rid: int) -> bytes:
        return await self._expect[rid].done

    async def _write_bytes(self, rid: int, args: typing.Any) -> object:
        data = await self._received(rid)
        ws = self._cfg.workspace
        await self._in_thread(
            lambda: ws.write_bytes(args.path, data, create_parents=args.create_parents)
        )
        return None

    async def _append_bytes(self, rid: int, args: typing.Any) -> object:
        data = await self._received(rid)
        await self._in_thread(self._cfg.workspace.append_bytes, args.path, data)
        return None

    async def _run(self, rid: int, args: typing.Any) -> object:
        system = self._cfg.system
        assert system is not None
        stdin = None if args.stdin_size is None else await self._received(rid)
        result = await system.arun(
            args.argv, env=args.env, stdin=stdin, timeout=args.timeout, cwd=args.cwd
        )
        return encode_run_result(result)

    async def _spawn(self, rid: int, args: typing.Any) -> None:
        system = self._cfg.system
        assert system is not None
        if len(self._children) >= self._lim.max_children:
            await self._event(
                rid,
                "failed",
                error=body_from_exception(
                    ValueError(f"more than {self._lim.max_children} children on this connection"),
                    "spawn",
                ),
            )
            return
        if args.stdin == "stream":
            await self._event(
                rid,
                "failed",
                error=body_from_exception(
                    UnservedError("streamed stdin is not served yet", op="spawn", target=self.peer),
                    "spawn",
                ),
            )
            return
        loop = asyncio.get_running_loop()
        pump = Pump(loop, self._lim.max_buffered_output)

        def observe(stream: str, data: bytes) -> None:
            pump.put(stream, data)

        try:
            child = await loop.run_in_executor(
                None,
                lambda: system.spawn(
                    args.argv, env=args.env, timeout=args.timeout, cwd=args.cwd, observer=observe
                ),
            )
        except Exception as exc:
            await self._event(rid, "failed", error=body_from_exception(exc, "spawn"))
            return
        self._children[rid] = child
        self._pumps[rid] = pump
        try:
            await self._event(rid, "started", pid=child.pid)
            done = loop.create_future()
            finished = loop.run_in_executor(None, child.join)

            def settle(_: object) -> None:
                if not done.done():
                    done.set_result(None)

            finished.add_done_callback(settle)
            while True:
                waiter = loop.create_task(pump.wait())
                await asyncio.wait({waiter, done}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                await self._flush(rid, pump)
                if done.done():
                    await self._flush(rid, pump)
                    break
            status = child.status()
            out = child.read_output()
            await self._event(
                rid,
                "exited",
                exit_code=status.exit_code,
                signal=status.signal,
                timed_out=status.timed_out,
                stdout_dropped=out.stdout_dropped,
                stderr_dropped=out.stderr_dropped,
            )
        finally:
            pump.close()
            child.kill()
            self._children.pop(rid, None)
            self._pumps.pop(rid, None)

    async def _flush(self, rid: int, pump: Pump) -> None:
        for stream, data in pump.take_now(self._lim.max_chunk):
            await self._send(
                {"type": "chunk", "id": rid, "stream": stream, "data": b64e(data), "last": False}
            )

    async def _event(self, rid: int, event: str, **fields: object) -> None:
        await self._send({"type": "event", "id": rid, "event": event, **fields})

    async def _kill(self, rid: int, args: typing.Any) -> object:
        child = self._children.get(args.child)
        if child is None:
            raise ValueError(f"no running child of request {args.child} on this connection")
        child.kill()
        return None

    async def _http(self, rid: int, args: typing.Any) -> object:
        http = self._cfg.http
        assert http is not None
        body = None if args.body is None else b64d(args.body, what="body")
        result = await self._in_thread(
            lambda: http.http_request(
                args.method, args.url, headers=args.headers, body=body, timeout=args.timeout
            )
        )
        return encode_http(typing.cast(typing.Any, result))

    async def _metrics(self, rid: int, args: typing.Any) -> object:
        m = await self._in_thread(measure_host, str(self._cfg.workspace.root))
        return encode_metrics(typing.cast(typing.Any, m))

    async def _identity(self, rid: int, args: typing.Any) -> object:
        return encode_identity(self._cfg.identity, str(self._cfg.workspace.root))


def _upload_size(op: str, raw: dict[str, typing.Any]) -> int | None:
    key = "stdin_size" if op == "run" else "size"
    size = raw.get(key)
    if size is None or isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return None
    return size


def _file_op(config: ServerConfig, op: str, args: typing.Any) -> object:
    ws = config.workspace
    if op == "mkdir":
        ws.mkdir(args.path, parents=args.parents, exist_ok=args.exist_ok)
        return None
    if op == "remove":
        ws.remove(args.path, recursive=args.recursive)
        return None
    if op == "rename":
        ws.rename(args.src, args.dst)
        return None
    if op == "list_dir":
        return ws.list_dir(args.path)
    if op == "walk":
        if args.max_entries is None:
            return ws.walk(args.path)
        return ws.walk(args.path, max_entries=args.max_entries)
    if op == "stat":
        return encode_file_info(ws.stat(args.path))
    if op == "exists":
        return ws.exists(args.path)
    if op == "is_dir":
        return ws.is_dir(args.path)
    raise UnservedError(f"{op!r} is not served here", op=op)
