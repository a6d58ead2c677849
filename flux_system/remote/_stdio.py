"""A client channel over a spawned command's stdin/stdout (``ssh host flux serve --stdio``).

The command is started through :class:`~flux_system.System` — the one spawn builder —
in a private, empty directory (mode 0700, removed at close) with the allow-listed
environment plus ``SSH_AUTH_SOCK`` when set (ssh needs its agent) and the caller's
*env*. Its stdout is the protocol; its stderr is relayed to this process's stderr,
prefixed, so an ssh prompt or error is seen.
Guarantee: closing the channel kills the command's whole tree and removes the
directory. Not guaranteed: anything about the far side beyond what it reports.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import typing
from collections.abc import Iterator, Mapping

from flux_system.process import OutputChunk, System
from flux_system.remote._channel import Channel
from flux_system.workspace import Workspace

__all__ = ["open_stdio_channel"]


@typing.final
class ChildChannel:
    """The protocol over a child's streamed stdin and stdout."""

    def __init__(self, argv: list[str], env: Mapping[str, str] | None) -> None:
        self._dir = tempfile.mkdtemp(prefix="flux-connect-")
        self._ws = Workspace(self._dir)
        self._system = System(self._ws)
        child_env = {k: v for k, v in (env or {}).items()}
        agent = os.environ.get("SSH_AUTH_SOCK")
        if agent is not None and "SSH_AUTH_SOCK" not in child_env:
            child_env["SSH_AUTH_SOCK"] = agent
        try:
            self._child = self._system.spawn(
                argv, env=child_env, timeout=None, stream_output=True, stream_stdin=True
            )
        except BaseException:
            self._cleanup()
            raise
        self._chunks: Iterator[OutputChunk] = self._child.chunks()
        self._pending = b""
        self._lock = threading.Lock()
        self._closed = False
        self.argv0 = argv[0]

    def send_all(self, data: bytes) -> None:
        stdin = self._child.stdin
        assert stdin is not None
        if not stdin.write(data):
            raise ConnectionError(f"{self.argv0} closed its stdin")

    def recv(self, size: int) -> bytes:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            if chunk.stream == "stderr":
                text = chunk.data.decode("utf-8", "replace")
                sys.stderr.write("".join(f"[{self.argv0}] {line}\n" for line in text.splitlines()))
                continue
            self._pending = chunk.data
        data, self._pending = self._pending[:size], self._pending[size:]
        return data

    def ready(self) -> bool:
        return bool(self._pending)  # the child's pipe is behind an iterator: cannot tell

    def hung_up(self) -> bool:
        return not self._child.status().running

    def shutdown(self) -> None:
        self._child.kill()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._child.kill()
        self._child.join()
        self._cleanup()

    def _cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self._system.close()
        with contextlib.suppress(Exception):
            self._ws.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def open_stdio_channel(argv: list[str], env: Mapping[str, str] | None = None) -> Channel:
    """Start *argv* and speak the protocol over its stdin/stdout.

    Raises: :class:`~flux_system.SpawnError` (and the process errors) when it cannot start.
    """
    return ChildChannel(argv, env)
