"""The client against a hostile server: a real Unix socket whose far end lies.

Each server here is a few lines of this test speaking raw frames; what it sends is
the attack. The client must end every call in a documented PortError subclass, in
bounded time and memory, whatever the far side says (DESIGN §2.6).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from flux_system import PortError, UnreachableError
from flux_system.port import Substrate
from flux_system.remote import connect
from flux_system.remote._ops import FILE_OPS
from tests.flux_system.remote._harness import guarded

SERVER_INFO = {
    "hostname": "h",
    "system": "Linux",
    "release": "r",
    "machine": "m",
    "uid": 0,
    "pid": 1,
    "flux_version": "0",
    "sandbox": [],
    "workspace": "/w",
}
OPS = sorted(FILE_OPS | {"metrics", "identity"})  # what a files-only server announces


def welcome(**limits: float) -> dict[str, Any]:
    base: dict[str, float] = {
        "max_frame": 8 * 1024 * 1024,
        "max_chunk": 4 * 1024 * 1024,
        "max_in_flight": 32,
        "max_buffered_output": 1024 * 1024,
        "heartbeat_s": 10.0,
    }
    base.update(limits)
    return {
        "type": "welcome",
        "protocol": "flux-port",
        "version": 1,
        "server": SERVER_INFO,
        "operations": OPS,
        "limits": base,
    }


def frame(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def read_frame(conn: socket.socket) -> dict[str, Any]:
    head = conn.recv(4, socket.MSG_WAITALL)
    (n,) = struct.unpack(">I", head)
    out: dict[str, Any] = json.loads(conn.recv(n, socket.MSG_WAITALL))
    return out


Behaviour = Callable[[socket.socket], None]


@contextlib.contextmanager
def hostile(behave: Behaviour) -> Iterator[str]:
    """A Unix socket whose one connection is handled by *behave*."""
    where = tempfile.mkdtemp(prefix="flux-hostile-")
    path = os.path.join(where, "s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    conns: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            conns.append(conn)
            with contextlib.suppress(OSError, ValueError, struct.error):
                behave(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"unix:{path}"
    finally:
        listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        thread.join(30)
        os.unlink(path)
        os.rmdir(where)


def caught(call: Callable[[], object]) -> BaseException:
    """The exception *call* raises (on a thread; a hang fails the test)."""
    try:
        guarded(call)
    except BaseException as exc:
        return exc
    raise AssertionError("the call did not fail")


def failed_read(behave: Behaviour, **kwargs: Any) -> BaseException:
    """What a real client's ``read_bytes("f", **kwargs)`` raised against *behave*."""
    with hostile(behave) as target:
        sub = connect(target, timeout=5)
        try:
            return caught(lambda: sub.files.read_bytes("f", **kwargs))
        finally:
            sub.close()


def then_welcome(after: Behaviour, *, version: int = 1, **limits: float) -> Behaviour:
    def behave(conn: socket.socket) -> None:
        assert read_frame(conn)["type"] == "hello"
        conn.sendall(frame({**welcome(**limits), "version": version}))
        after(conn)

    return behave


def test_a_server_that_never_answers_the_hello_times_the_connect_out() -> None:
    heard = threading.Event()

    def silent(conn: socket.socket) -> None:
        if read_frame(conn)["type"] == "hello":
            heard.set()  # positive control: the client got through and spoke
        conn.recv(1)  # and then nothing, until the client gives up

    with hostile(silent) as target:
        got = caught(lambda: connect(target, timeout=0.5))
    assert heard.is_set()
    assert isinstance(got, UnreachableError), got
    assert "no handshake answer within 0.5 s" in got.message


def test_a_download_past_the_reads_limit_is_refused() -> None:
    sent = [0]

    def endless(conn: socket.socket) -> None:
        req = read_frame(conn)
        data = base64.b64encode(b"x" * (1 << 20)).decode()
        piece = {"type": "chunk", "id": req["id"], "stream": "download", "data": data}
        while True:  # never ends: the client must stop it, not run out of memory
            conn.sendall(frame({**piece, "last": False}))
            sent[0] += 1 << 20

    got = failed_read(then_welcome(endless), limit=10)
    assert sent[0] >= 1 << 20  # positive control: the flood was sent
    assert isinstance(got, UnreachableError), got
    assert "more download than it asked for" in str(got.__cause__)


def test_a_download_for_a_call_that_reads_nothing_is_refused() -> None:
    def misroute(conn: socket.socket) -> None:
        req = read_frame(conn)
        assert req["op"] == "stat"
        data = base64.b64encode(b"y" * 100).decode()
        chunk = {"type": "chunk", "id": req["id"], "stream": "download", "data": data}
        conn.sendall(frame({**chunk, "last": False}))
        conn.recv(1)

    with hostile(then_welcome(misroute)) as target:
        sub = connect(target, timeout=5)
        try:
            got = caught(lambda: sub.files.stat("f"))
        finally:
            sub.close()
    assert isinstance(got, UnreachableError), got
    assert "more download than it asked for" in str(got.__cause__)


def _stat_value(mtime: str) -> Behaviour:
    def answer(conn: socket.socket) -> None:
        req = read_frame(conn)
        value = (
            '{"kind":"file","size":1,"mode":420,"mtime":' + mtime + ',"nlink":1,'
            '"inode":1,"device":1,"uid":0,"gid":0}'
        )
        body = ('{"type":"result","id":' + str(req["id"]) + ',"value":' + value + "}").encode()
        conn.sendall(struct.pack(">I", len(body)) + body)
        conn.recv(1)

    return answer


@pytest.mark.parametrize("mtime", ["1" + "0" * 400, "-" + "9" * 400], ids=["huge", "-huge"])
def test_a_number_past_floats_range_is_a_protocol_error(mtime: str) -> None:
    with hostile(then_welcome(_stat_value("12.5"))) as target:  # positive control
        sub: Substrate = connect(target, timeout=5)
        try:
            assert sub.files.stat("f").mtime == 12.5
        finally:
            sub.close()
    with hostile(then_welcome(_stat_value(mtime))) as target:
        sub = connect(target, timeout=5)
        try:
            got = caught(lambda: sub.files.stat("f"))
        finally:
            sub.close()
    assert isinstance(got, PortError), got  # was OverflowError
    assert "out of range" in got.message


def test_a_heartbeat_interval_past_any_clock_keeps_the_heartbeat_running() -> None:
    """heartbeat_s=1e308 made the client's heartbeat thread die (sleep overflowed), so a
    server that then went silent was never noticed."""
    crashed: list[BaseException | None] = []
    old_hook = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        crashed.append(args.exc_value)

    stop = threading.Event()

    def idle(conn: socket.socket) -> None:
        stop.wait(30)

    threading.excepthook = hook
    try:
        with hostile(then_welcome(idle, heartbeat_s=1e308)) as target:
            sub = connect(target, timeout=5)
            try:
                client = sub.files._c  # type: ignore[attr-defined]
                client._beat.join(1.0)  # old code: ended here, having raised
                assert client._beat.is_alive()
            finally:
                stop.set()
                sub.close()
    finally:
        threading.excepthook = old_hook
    assert crashed == []


def _binary_answer(size: int | None = None) -> Behaviour:
    """Answer the first request with a binary result of b"abc" (its size: *size*)."""

    def answer(conn: socket.socket) -> None:
        req = read_frame(conn)
        head = b'{"type":"result","id":%d,"value":{"size":%d}}' % (req["id"], size or 3)
        body = b"\x00" + struct.pack(">I", len(head)) + head + b"abc"
        conn.sendall(struct.pack(">I", len(body)) + body)
        conn.recv(1)

    return answer


def test_a_binary_result_answers_a_read_on_version_2() -> None:  # the positive control
    with hostile(then_welcome(_binary_answer(), version=2)) as target:
        sub = connect(target, timeout=5)
        try:
            assert sub.files.read_bytes("f") == b"abc"
        finally:
            sub.close()


@pytest.mark.parametrize(
    ("version", "call", "because"),
    [
        (1, lambda sub: sub.files.read_bytes("f"), "binary frame on a version-1 connection"),
        (2, lambda sub: sub.files.stat("f"), "binary result of 3 bytes for stat"),
        (2, lambda sub: sub.files.read_bytes("f", limit=2), "binary result of 3 bytes"),
    ],
    ids=["on-version-1", "for-a-stat", "past-the-reads-limit"],
)
def test_a_binary_result_where_none_may_come_is_a_protocol_error(
    version: int, call: Callable[[Substrate], object], because: str
) -> None:
    with hostile(then_welcome(_binary_answer(), version=version)) as target:
        sub: Substrate = connect(target, timeout=5)
        try:
            got = caught(lambda: call(sub))
        finally:
            sub.close()
    assert isinstance(got, UnreachableError), got  # the connection is lost: a read
    assert because in str(got.__cause__)


def test_a_binary_result_whose_size_lies_is_a_protocol_error() -> None:
    got = failed_read(then_welcome(_binary_answer(size=4), version=2))
    assert isinstance(got, UnreachableError), got
    assert "size" in str(got.__cause__)


def _binary_download(conn: socket.socket) -> None:
    req = read_frame(conn)
    head = b'{"type":"chunk","id":%d,"stream":"download","last":false}' % req["id"]
    body = b"\x00" + struct.pack(">I", len(head)) + head + b"abc"
    conn.sendall(struct.pack(">I", len(body)) + body)
    conn.recv(1)


@pytest.mark.parametrize(
    ("version", "because"),
    [(1, "binary frame on a version-1 connection"), (2, "more download than it asked for")],
    ids=["on-version-1", "past-the-reads-limit"],
)
def test_a_binary_download_chunk_is_held_to_the_json_chunks_rules(
    version: int, because: str
) -> None:
    with hostile(then_welcome(_binary_download, version=version)) as target:
        sub: Substrate = connect(target, timeout=5)
        try:
            got = caught(lambda: sub.files.read_bytes("f", limit=2))
        finally:
            sub.close()
    assert isinstance(got, UnreachableError), got
    assert because in str(got.__cause__)
