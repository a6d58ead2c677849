"""The guarded clients across ``os.fork()`` (decision 0034): real loopback server, real fork.

A child forked from a process whose client holds kept-alive connections must never
write on them (two processes on one TCP/TLS stream), nor wait forever on a lock another
thread held at the fork. The child reports over a pipe and always ends with
``os._exit``; a child that hangs is killed after a generous bound and reported as
``hung`` (the bound only stops a deadlock: nothing is timed).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from flux_system.net import (
    PrivateNetAllow,
    StaticResolver,
    _guard,
    _url,
    guarded_async_client,
    guarded_client,
)
from tests.flux_system.net._servers import Handler, LoopbackHTTP

GRANT = PrivateNetAllow(cidrs=["127.0.0.1/32"])
NAMES = {"a.flux.example": ["127.0.0.1"]}


def _peer(h: Handler) -> None:
    h.reply(200, str(h.client_address[1]).encode())  # which connection carried it


@pytest.fixture
def server() -> Iterator[LoopbackHTTP]:
    with LoopbackHTTP("127.0.0.1", 0, routes={"/peer": _peer}) as srv:
        yield srv


def _in_child(work: Callable[[], str]) -> str:
    """Run *work* in a forked child; its result, ``error <type>`` or ``hung``."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.close(reader)
            box: list[str] = []

            def run() -> None:
                try:
                    box.append(work())
                except BaseException as exc:
                    box.append(f"error {type(exc).__name__}")

            t = threading.Thread(target=run, daemon=True)
            t.start()
            t.join(20)
            os.write(writer, (box[0] if box else "hung").encode())
        finally:
            os._exit(0)
    os.close(writer)
    chunks = []
    try:
        while chunk := os.read(reader, 4096):
            chunks.append(chunk)
    finally:
        os.close(reader)
    for _ in range(600):
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
        time.sleep(0.05)
    else:  # pragma: no cover - only if the child ignored its own bound
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return b"".join(chunks).decode() or "hung"


def test_sync_client_child_never_reuses_the_parents_connection(server: LoopbackHTTP) -> None:
    url = f"http://a.flux.example:{server.port}/peer"
    with guarded_client(allow=GRANT, resolver=StaticResolver(NAMES), ports=[server.port]) as c:
        first = c.get(url).text  # a kept-alive connection now sits in the pool
        assert c.get(url).text == first  # control: the pool does reuse it
        child = _in_child(lambda: c.get(url).text)
        assert child != "hung" and not child.startswith("error"), child
        assert child != first  # the child opened its own connection
        assert c.get(url).text == first  # the parent's connection is intact and still used


def test_async_client_child_never_reuses_the_parents_connection(server: LoopbackHTTP) -> None:
    url = f"http://a.flux.example:{server.port}/peer"
    client = guarded_async_client(allow=GRANT, resolver=StaticResolver(NAMES), ports=[server.port])

    async def fetch() -> str:
        return (await client.get(url)).text

    async def twice() -> tuple[str, str, str]:
        first = await fetch()
        again = await fetch()
        try:
            child = await asyncio.to_thread(_in_child, lambda: asyncio.run(fetch()))
        finally:
            await client.aclose()
        return first, again, child

    first, again, child = asyncio.run(twice())
    assert again == first  # control: the pool does reuse it
    assert child != "hung" and not child.startswith("error"), child
    assert child != first


def test_module_locks_held_at_fork_do_not_deadlock_the_child(server: LoopbackHTTP) -> None:
    # Another thread is inside the URL-parse cache or the default-resolver set-up when
    # the fork happens (held here deterministically): the child must still work.
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _url._accepted_lock, _guard._default_lock:
            held.set()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    try:
        url = f"http://a.flux.example:{server.port}/peer?fresh"

        def work() -> str:
            resolver = StaticResolver(NAMES)
            with guarded_client(allow=GRANT, resolver=resolver, ports=[server.port]) as c:
                return str(c.get(url).status_code)

        assert _in_child(work) == "200"
    finally:
        release.set()
        t.join()
