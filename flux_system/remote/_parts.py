"""The remote implementations of the port families, over one :class:`Client`."""

from __future__ import annotations

import collections
import threading
import typing
from collections.abc import Mapping, Sequence

from flux_system._exceptions import PortError, PortReason, UnknownOutcomeError
from flux_system.port import HttpResult, Identity, Metrics
from flux_system.process import ChildOutput, ChildStatus, RunResult
from flux_system.remote._client import Client
from flux_system.remote._ops import (
    b64d,
    b64e,
    decode_file_info,
    decode_http,
    decode_metrics,
    decode_run_result,
)
from flux_system.remote._wire import Event
from flux_system.workspace import FileInfo

__all__ = [
    "RemoteChild",
    "RemoteFiles",
    "RemoteHttp",
    "RemoteIdentity",
    "RemoteMetrics",
    "RemoteProcesses",
]

DEFAULT_CHILD_BUFFER = 1 << 20
"""Bytes of a remote child's output kept per stream between two ``read_output`` calls."""


def _expect(value: object, kind: type, op: str) -> typing.Any:
    if isinstance(value, bool) and kind is not bool:
        value = None
    if not isinstance(value, kind):
        raise PortError(
            f"{op} answered with a {type(value).__name__}", op=op, reason=PortReason.PROTOCOL
        )
    return value


def _names(value: object, op: str) -> list[str]:
    items = _expect(value, list, op)
    if not all(isinstance(x, str) for x in items):
        raise PortError(f"{op} answered with a non-string name", op=op, reason=PortReason.PROTOCOL)
    return list(items)


@typing.final
class RemoteFiles:
    """:class:`~flux_system.port.FilesPort` served by the far side's workspace."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes:
        call = self._c.exchange("read_bytes", {"path": path, "limit": limit})
        value = self._c.wait(call)
        if type(value) is dict:  # the fast paths' answer: the checks below, inline
            got, size = value.get("bytes"), value.get("size")
            if (
                type(got) is bytes
                and type(size) is int
                and size == len(got)
                and (limit is None or size <= limit)
            ):
                return got
        value = _expect(value, dict, "read_bytes")
        size = _expect(value.get("size"), int, "read_bytes")
        data: bytes
        if "bytes" in value:  # decoded on the fast path
            data = _expect(value["bytes"], bytes, "read_bytes")
        elif "data" in value:
            data = b64d(_expect(value["data"], str, "read_bytes"))
        else:
            data = b"".join(call.download)
        if len(data) != size:
            raise PortError(
                f"read_bytes of {path!r}: {len(data)} of {size} bytes arrived",
                op="read_bytes",
                target=path,
                reason=PortReason.PROTOCOL,
            )
        if limit is not None and size > limit:  # a result of any form, as a download is
            raise PortError(
                f"read_bytes of {path!r}: {size} bytes answered a read of at most {limit}",
                op="read_bytes",
                target=path,
                reason=PortReason.PROTOCOL,
            )
        return data

    def read_text(self, path: str, *, limit: int | None = None) -> str:
        from flux_system._exceptions import WorkspaceError, WorkspaceReason

        data = self.read_bytes(path, limit=limit)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WorkspaceError(
                "not valid text", op="read_text", path=path, reason=WorkspaceReason.DECODE
            ) from exc

    def write_bytes(self, path: str, data: bytes, *, create_parents: bool = True) -> None:
        data = bytes(data)
        self._c.call(
            "write_bytes",
            {"path": path, "size": len(data), "create_parents": create_parents},
            upload=("upload", data),
        )

    def append_bytes(self, path: str, data: bytes) -> None:
        data = bytes(data)
        self._c.call("append_bytes", {"path": path, "size": len(data)}, upload=("upload", data))

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        self._c.call("mkdir", {"path": path, "parents": parents, "exist_ok": exist_ok})

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._c.call("remove", {"path": path, "recursive": recursive})

    def rename(self, src: str, dst: str) -> None:
        self._c.call("rename", {"src": src, "dst": dst})

    def list_dir(self, path: str = ".") -> list[str]:
        return _names(self._c.call("list_dir", {"path": path}), "list_dir")

    def walk(self, path: str = ".", *, max_entries: int | None = None) -> list[str]:
        return _names(self._c.call("walk", {"path": path, "max_entries": max_entries}), "walk")

    def stat(self, path: str, *, follow_symlinks: bool = True) -> FileInfo:
        args = {"path": path, "follow_symlinks": follow_symlinks}
        return decode_file_info(self._c.call("stat", args))

    def resolve(self, path: str) -> str:
        """The far side's physical path of *path* beneath its root (for policy subjects
        only: never a path to open)."""
        where: str = _expect(self._c.call("resolve", {"path": path}), str, "resolve")
        return where

    def exists(self, path: str) -> bool:
        return bool(_expect(self._c.call("exists", {"path": path}), bool, "exists"))

    def is_dir(self, path: str) -> bool:
        return bool(_expect(self._c.call("is_dir", {"path": path}), bool, "is_dir"))


class _Ring:
    """Bounded output of one stream: the oldest bytes are dropped first (counted)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)
        while self.size > self.cap and self.parts:
            over = self.size - self.cap
            head = self.parts[0]
            if len(head) <= over:
                self.parts.popleft()
                self.size -= len(head)
                self.dropped += len(head)
            else:
                self.parts[0] = head[over:]
                self.size -= over
                self.dropped += over

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        self.size = 0
        return data


@typing.final
class RemoteChild:
    """:class:`~flux_system.port.ChildPort` for a child running on the far side.

    Output arrives as it is produced; ``on_output(stream, data)`` (if given) sees every
    byte, live, on whichever thread reads the connection (it must not block); ``read_output``
    returns what was buffered since the previous call (bounded; oldest dropped first).
    ``status()`` raises :class:`UnknownOutcomeError` once the connection was lost before
    the child's end was reported — an exit code is never invented.
    """

    def __init__(
        self,
        client: Client,
        argv: Sequence[str],
        args: dict[str, object],
        *,
        buffer_cap: int,
        on_output: typing.Callable[[str, bytes], None] | None,
    ) -> None:
        self._c = client
        self._lock = threading.Lock()
        self._stdin_cond = threading.Condition()
        self._window = client.welcome.limits.max_buffered_output
        self._sent = 0
        self._acked = 0
        self._stdin_closed = False
        self._out = _Ring(buffer_cap)
        self._err = _Ring(buffer_cap)
        self._on_output = on_output
        self._started = threading.Event()
        self._pid: int | None = None
        self._end: Event | None = None
        self._argv0 = argv[0]
        self._call = client.start("spawn", args, on_chunk=self._chunk, on_event=self._event)
        self._wait_started(client)

    def _wait_started(self, client: Client) -> None:
        while not self._started.wait(0.05):
            if self._call.done.is_set():
                break
        if self._call.error is not None:
            raise self._call.error
        end = self._end
        if end is not None and end.event == "failed" and end.error is not None:
            from flux_system.remote._errors import error_from_body

            raise error_from_body(end.error.model_dump(), target=client.target)

    def _chunk(self, stream: str, data: bytes) -> None:
        with self._lock:
            (self._out if stream == "stdout" else self._err).add(data)
        if self._on_output is not None:
            self._on_output(stream, data)

    def _event(self, event: Event) -> None:
        if event.event == "started":
            self._pid = event.pid
            self._started.set()
        elif event.event == "stdin":
            with self._stdin_cond:
                self._acked = max(self._acked, event.written)
                self._stdin_cond.notify_all()
        else:
            self._end = event
            self._started.set()
            with self._stdin_cond:
                self._stdin_cond.notify_all()

    def write_stdin(self, data: bytes, *, timeout: float | None = None) -> bool:
        """Send *data* to the child's streamed stdin (``spawn(..., stream_stdin=True)``).

        Guarantee: at most the server's window (``max_buffered_output``) is in flight
        unacknowledged, so this blocks while the child is slow to read — back-pressure
        reaches the producer. Returns ``False`` once the child has ended (the rest is
        dropped), as :class:`~flux_system.ChildStdin` does.

        Raises:
            ValueError: after :meth:`close_stdin`.
            TimeoutError: the window stayed full for *timeout* seconds.
        """
        if self._stdin_closed:
            raise ValueError("stdin is closed")
        step = max(1, min(self._c.max_chunk, self._window))
        view = memoryview(bytes(data))
        while view:
            piece = bytes(view[:step])
            with self._stdin_cond:
                size = len(piece)

                def room(size: int = size) -> bool:
                    window_ok = self._sent - self._acked + size <= self._window
                    return self._call.done.is_set() or window_ok

                ok = self._stdin_cond.wait_for(room, timeout)
                if self._call.done.is_set():
                    return False
                if not ok:
                    raise TimeoutError("the child did not take its stdin in time")
                self._sent += len(piece)
            self._c.send_chunk(self._call.id, "stdin", piece, False)
            view = view[step:]
        return True

    def close_stdin(self) -> None:
        """Give the child EOF after what was sent (idempotent)."""
        if self._stdin_closed:
            return
        self._stdin_closed = True
        if not self._call.done.is_set():
            self._c.send_chunk(self._call.id, "stdin", b"", True)

    @property
    def pid(self) -> int:
        """The child's pid *on the far side* (as reported there)."""
        return -1 if self._pid is None else self._pid

    def read_output(self) -> ChildOutput:
        with self._lock:
            return ChildOutput(
                self._out.take(), self._err.take(), self._out.dropped, self._err.dropped
            )

    def status(self) -> ChildStatus:
        if not self._call.done.is_set():
            return ChildStatus(True, None, None, timed_out=False)
        end = self._end
        if end is None or end.event != "exited":
            raise UnknownOutcomeError(
                f"{self._c.target}: the end of {self._argv0!r} was not reported",
                op="spawn",
                target=self._argv0,
            )
        return ChildStatus(False, end.exit_code, end.signal, timed_out=end.timed_out)

    def kill(self) -> None:
        if not self._call.done.is_set():
            self._c.cancel(self._call.id)

    def join(self, timeout: float | None = None) -> bool:
        return self._call.done.wait(timeout)


@typing.final
class RemoteProcesses:
    """:class:`~flux_system.port.ProcessPort` run by the far side's ``System``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = 60.0,
        cwd: str = ".",
    ) -> RunResult:
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv must be a sequence of str, not str")
        args: dict[str, object] = {
            "argv": list(argv),
            "env": None if env is None else dict(env),
            "stdin_size": None if stdin is None else len(stdin),
            "timeout": timeout,
            "cwd": cwd,
        }
        upload = None if stdin is None else ("stdin", bytes(stdin))
        return decode_run_result(self._c.call("run", args, upload=upload))

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str = ".",
        buffer_cap: int = DEFAULT_CHILD_BUFFER,
        on_output: typing.Callable[[str, bytes], None] | None = None,
        stream_stdin: bool = False,
    ) -> RemoteChild:
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv must be a sequence of str, not str")
        if stdin is not None and stream_stdin:
            raise ValueError("stdin bytes and stream_stdin=True exclude each other")
        args: dict[str, object] = {
            "argv": list(argv),
            "env": None if env is None else dict(env),
            "stdin": "stream" if stream_stdin or stdin is not None else "none",
            "timeout": timeout,
            "cwd": cwd,
        }
        child = RemoteChild(self._c, argv, args, buffer_cap=buffer_cap, on_output=on_output)
        if stdin is not None:
            data = bytes(stdin)

            def feed() -> None:
                child.write_stdin(data)
                child.close_stdin()

            threading.Thread(target=feed, name="flux-remote-stdin", daemon=True).start()
        return child


@typing.final
class RemoteHttp:
    """:class:`~flux_system.port.HttpPort`: the request is guarded on the far side."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def http_request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 30.0,
    ) -> HttpResult:
        args: dict[str, object] = {
            "method": method,
            "url": url,
            "headers": dict(headers or {}),
            "body": None if body is None else b64e(body),
            "timeout": timeout,
        }
        return decode_http(self._c.call("http_request", args))


@typing.final
class RemoteMetrics:
    def __init__(self, client: Client) -> None:
        self._c = client

    def metrics(self) -> Metrics:
        return decode_metrics(self._c.call("metrics", {}))


@typing.final
class RemoteIdentity:
    """The far side's identity, always ``remotely_reported=True``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def identity(self) -> Identity:
        from flux_system.remote._ops import decode_identity

        return decode_identity(self._c.call("identity", {}))
