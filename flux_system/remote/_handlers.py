"""The served operations that need a thread: writes, large reads, runs, spawns, HTTP.

Each such request runs on a thread of its own (bounded by the in-flight cap; a spawned
child's thread by ``max_children``). A spawned child's output is taken with
``System.spawn(stream_output=True)`` and sent as it comes — back-pressure flows from
the client's socket to the child's pipe — and its stdin, when streamed, is fed by a
writer thread from a bounded queue.
Guarantee: :meth:`Handlers.close` kills every child and waits for every thread, so
nothing a connection started outlives it.
Not guaranteed: a cancel of a file operation already running interrupts it (it
completes and is answered); a spawned child whose stdin queue is full pauses the
whole connection until the child reads (the queue holds ``max_buffered_output``).
"""

from __future__ import annotations

import asyncio
import threading
import typing

from flux_system._exceptions import UnservedError
from flux_system.port import measure_host
from flux_system.remote._config import ServerConfig
from flux_system.remote._errors import body_from_exception
from flux_system.remote._ops import (
    ARGS,
    b64d,
    encode_file_info,
    encode_http,
    encode_identity,
    encode_metrics,
    encode_run_result,
)
from flux_system.remote._wire import Request

if typing.TYPE_CHECKING:
    from flux_system.process import ManagedChild
    from flux_system.remote._connection import Connection

__all__ = ["INLINE", "INLINE_READ", "Handlers", "Upload", "file_op"]

INLINE = frozenset({"read_bytes", "stat", "resolve", "exists", "is_dir", "list_dir"})
"""Ops served on the reader thread itself when ``ServerLimits.inline_fs`` (the default)."""
INLINE_READ = 64 * 1024
"""Largest read served inline; a larger file is read on a thread of its own."""


class Upload:
    """Bytes a request receives as chunks of one stream.

    With a *size*, exactly that many bytes are collected and handed over at the end.
    With ``size=None`` (a spawned child's streamed stdin) each chunk is queued for the
    child as it arrives; the client keeps at most *window* bytes unacknowledged (the
    server acknowledges with ``stdin`` events as the child takes them), so the queue
    never holds more than *window* bytes and the reader thread never blocks on it — a
    client that overruns the window has broken the protocol.
    """

    def __init__(self, stream: str, size: int | None, *, window: int = 1 << 20) -> None:
        self.stream = stream
        self.size = size
        self._parts: list[bytes] = []
        self._got = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.refused: BaseException | None = None
        self._window = window
        self._cond = threading.Condition()
        self._live: list[tuple[bytes, bool]] = []
        self._queued = 0
        self._ended = False

    @property
    def streamed(self) -> bool:
        return self.size is None

    def refuse(self, exc: BaseException) -> None:
        """Answer the request with *exc*; swallow the stream that follows."""
        self.refused = exc
        self.discard()

    def add(self, data: bytes, last: bool) -> None:
        """Take one chunk (reader thread); never blocks.

        Raises:
            PortError: ``PROTOCOL`` when a streamed client overruns its window.
        """
        if self.size is None:
            self._push(data, last)
            return
        if self._ready.is_set():
            return
        self._got += len(data)
        if self._got > self.size:
            self._fail(ValueError(f"{self.stream} carries more than {self.size} bytes"))
            return
        self._parts.append(data)
        if last:
            if self._got != self.size:
                self._fail(
                    ValueError(f"{self.stream} ended after {self._got} of {self.size} bytes")
                )
            else:
                self._ready.set()

    def _push(self, data: bytes, last: bool) -> None:
        from flux_system._exceptions import PortError, PortReason

        with self._cond:
            if self._ended:
                return
            self._queued += len(data)
            if self._queued > self._window:
                raise PortError(
                    f"stdin sent {self._queued} bytes ahead of the child (window {self._window})",
                    op="frame",
                    reason=PortReason.PROTOCOL,
                )
            self._live.append((data, last))
            self._cond.notify_all()

    def take(self) -> tuple[bytes, bool] | None:
        """The next streamed piece, blocking (``None``: the stream was discarded)."""
        with self._cond:
            while not self._live and not self._ended:
                self._cond.wait()
            if not self._live:
                return None
            data, last = self._live.pop(0)
            self._queued -= len(data)
            return data, last

    def _fail(self, exc: BaseException) -> None:
        self._parts.clear()
        self._error = exc
        self._ready.set()

    def cancel(self) -> None:
        """The client cancelled its request: a sized upload still arriving ends its wait
        (the request is answered ``cancelled``); the rest of it is swallowed."""
        if self.size is not None and not self._ready.is_set():
            self._fail(asyncio.CancelledError())

    def discard(self) -> None:
        """Nobody waits any more: keep nothing, wake a streamed consumer."""
        if not self._ready.is_set():
            self._fail(ConnectionError("the request ended"))
        with self._cond:
            self._ended = True
            self._live.clear()
            self._cond.notify_all()

    def wait(self) -> bytes:
        """Block until the whole stream arrived; return it (or raise why not)."""
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return b"".join(self._parts)


def file_op(config: ServerConfig, op: str, args: typing.Any) -> object:
    """The file operations without a byte stream, run on the calling thread."""
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
        return encode_file_info(ws.stat(args.path, follow_symlinks=args.follow_symlinks))
    if op == "resolve":  # the far side's physical path (the runtime decides on it)
        return str(ws.resolve(args.path))
    if op == "exists":
        return ws.exists(args.path)
    if op == "is_dir":
        return ws.is_dir(args.path)
    raise UnservedError(f"{op!r} is not served here", op=op)


class Handlers:
    """The threads, children and cancellations of one connection."""

    def __init__(self, config: ServerConfig, conn: Connection) -> None:
        self._cfg = config
        self._conn = conn
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._children: dict[int, ManagedChild] = {}
        self._runs: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Task[object]]] = {}
        self._cancelled: set[int] = set()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, req: Request, upload: Upload | None) -> None:
        thread = threading.Thread(
            target=self._serve, args=(req, upload), name=f"flux-serve-{req.op}", daemon=True
        )
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def cancel(self, rid: int) -> None:
        with self._lock:
            child = self._children.get(rid)
            run = self._runs.get(rid)
            self._cancelled.add(rid)
        if child is not None:
            child.kill()
        elif run is not None:
            loop, task = run
            loop.call_soon_threadsafe(task.cancel)

    def close(self) -> None:
        """Kill every child, cancel every run, wait for every thread (teardown)."""
        with self._lock:
            children = list(self._children.values())
            runs = list(self._runs.values())
            threads = list(self._threads)
        for child in children:
            child.kill()
        for loop, task in runs:
            loop.call_soon_threadsafe(task.cancel)
        for thread in threads:
            thread.join()

    # -- one request ---------------------------------------------------------------------

    def _serve(self, req: Request, upload: Upload | None) -> None:
        conn = self._conn
        try:
            args: typing.Any = ARGS[req.op].model_validate(req.args)
            if req.op == "spawn":
                self._spawn(req.id, args, upload)
                return
            value = self._call(req.id, req.op, args, upload)
        except BaseException as exc:
            conn.done(req.id)
            if isinstance(exc, asyncio.CancelledError):
                conn.send_cancelled(req.id, req.op)
            elif isinstance(exc, Exception):
                conn.fail(req.id, req.op, exc)
            else:
                raise
        else:
            conn.done(req.id)
            conn.answer(req.id, value, req.op)
        finally:
            if upload is not None:
                upload.discard()
            with self._lock:
                self._threads.discard(threading.current_thread())
                self._cancelled.discard(req.id)

    def _call(self, rid: int, op: str, args: typing.Any, upload: Upload | None) -> object:
        cfg = self._cfg
        ws = cfg.workspace
        if op == "read_bytes":
            return self._read(rid, args.path, args.limit)
        if op == "write_bytes":
            assert upload is not None
            ws.write_bytes(args.path, upload.wait(), create_parents=args.create_parents)
            return None
        if op == "append_bytes":
            assert upload is not None
            ws.append_bytes(args.path, upload.wait())
            return None
        if op == "run":
            return self._run(rid, args, None if upload is None else upload.wait())
        if op == "kill":
            with self._lock:
                child = self._children.get(args.child)
            if child is None:
                raise ValueError(f"no running child of request {args.child} on this connection")
            child.kill()
            return None
        if op == "http_request":
            assert cfg.http is not None
            body = None if args.body is None else b64d(args.body, what="body")
            result = cfg.http.http_request(
                args.method, args.url, headers=args.headers, body=body, timeout=args.timeout
            )
            return encode_http(result)
        if op == "metrics":
            return encode_metrics(measure_host(str(ws.root)))
        if op == "identity":
            return encode_identity(cfg.identity, str(ws.root))
        return file_op(cfg, op, args)

    def _read(self, rid: int, path: str, limit: int | None) -> object:
        """Send *path* as ``download`` chunks read one ahead of the one sent, so a read
        holds at most two chunks of memory, whatever the file's size (a client that
        reads slowly holds them longer, never more); at most *limit* bytes are sent."""
        from flux_system._exceptions import WorkspaceError, WorkspaceReason
        from flux_system.remote._ops import b64e

        def too_large() -> WorkspaceError:
            return WorkspaceError(
                f"read_bytes: larger than {limit} bytes",
                op="read_bytes",
                path=path,
                reason=WorkspaceReason.TOO_LARGE,
            )

        step = self._cfg.limits.max_chunk
        sent = 0
        with self._cfg.workspace.open_read(path) as f:
            piece = f.read(step)
            while True:
                after = f.read(step) if len(piece) == step else b""
                if limit is not None and sent + len(piece) + len(after) > limit:
                    raise too_large()
                if not after and not sent:
                    return {"size": len(piece), "data": b64e(piece)}
                self._conn.send_chunk(rid, "download", piece, not after)
                sent += len(piece)
                if not after:
                    return {"size": sent}
                piece = after

    def _run(self, rid: int, args: typing.Any, stdin: bytes | None) -> object:
        system = self._cfg.system
        assert system is not None
        loop = asyncio.new_event_loop()
        try:
            coro = system.arun(
                args.argv, env=args.env, stdin=stdin, timeout=args.timeout, cwd=args.cwd
            )
            task: asyncio.Task[object] = loop.create_task(coro)
            with self._lock:
                cancelled = rid in self._cancelled
                self._runs[rid] = (loop, task)
            if cancelled:
                task.cancel()
            result = loop.run_until_complete(task)
        finally:
            with self._lock:
                self._runs.pop(rid, None)
            loop.close()
        return encode_run_result(typing.cast(typing.Any, result))

    def _spawn(self, rid: int, args: typing.Any, upload: Upload | None) -> None:
        conn = self._conn
        system = self._cfg.system
        assert system is not None
        with self._lock:
            crowded = len(self._children) >= self._cfg.limits.max_children
        if crowded:
            conn.done(rid)
            limit = self._cfg.limits.max_children
            conn.event(
                rid,
                "failed",
                error=body_from_exception(
                    ValueError(f"more than {limit} children on this connection"), "spawn"
                ),
            )
            return
        try:
            child = system.spawn(
                args.argv,
                env=args.env,
                timeout=args.timeout,
                cwd=args.cwd,
                stream_output=True,
                stream_stdin=args.stdin == "stream",
            )
        except Exception as exc:
            conn.done(rid)
            conn.event(rid, "failed", error=body_from_exception(exc, "spawn"))
            return
        with self._lock:
            self._children[rid] = child
            cancelled = rid in self._cancelled
        if cancelled:
            child.kill()
        feeder = None
        try:
            conn.done(rid, keep_id=True)  # its slot back; the id stays in use until the end
            conn.event(rid, "started", pid=child.pid)
            if upload is not None and child.stdin is not None:
                feeder = threading.Thread(
                    target=_feed_stdin, args=(conn, rid, upload, child), daemon=True
                )
                feeder.start()
            for chunk in child.chunks():
                conn.send_chunk(rid, chunk.stream, chunk.data)
            child.join()
            status = child.status()
            conn.event(
                rid,
                "exited",
                exit_code=status.exit_code,
                signal=status.signal,
                timed_out=status.timed_out,
            )
        except (ConnectionError, OSError):
            pass  # the client is gone: the finally below kills the tree
        finally:
            child.kill()
            child.join()
            if upload is not None:
                upload.discard()
            if feeder is not None:
                feeder.join()
            with self._lock:
                self._children.pop(rid, None)
            conn.forget(rid)


def _feed_stdin(conn: Connection, rid: int, upload: Upload, child: ManagedChild) -> None:
    """Write the streamed stdin into the child, acknowledging what it took."""
    stdin = child.stdin
    assert stdin is not None
    written = 0
    try:
        while True:
            piece = upload.take()
            if piece is None:
                return
            data, last = piece
            if data:
                if not stdin.write(data):
                    return  # the child closed its stdin or exited: the rest is dropped
                written += len(data)
                conn.event(rid, "stdin", written=written)
            if last:
                return
    except (ConnectionError, OSError):
        return
    finally:
        stdin.close()
