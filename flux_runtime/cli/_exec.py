"""``flux exec`` — run one argv beneath a workspace through ``System.run`` (sandbox off).

Exit codes: the command's own exit code; ``128 + N`` when it was killed by signal N;
124 timeout; 125 any other flux error (bad cwd, workspace refused, limit, spawn
failure); 126 not executable; 127 not found; 2 usage; ``128 + N`` also when flux itself
gets SIGINT, SIGTERM or SIGHUP (N) — the command's tree is killed first.
The command's captured stdout/stderr are written to flux's own (capped per stream).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from flux_runtime.cli._sandbox_opts import SandboxRefused, add_sandbox_options, resolve_sandbox
from flux_system import (
    FluxSystemError,
    ProcessReason,
    ProcessTimeoutError,
    System,
    Workspace,
)

__all__ = ["register"]

EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_FLUX_ERROR = 125
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127

EXIT_CODES = """exit codes (flux exec):
  N      the command's own exit code (any value, so also 2 and 124-127)
  128+N  the command was killed by signal N, or flux got SIGINT/SIGTERM/SIGHUP
         (N) and killed the command
  124    timed out (--timeout)
  125    refused by flux: workspace, cwd, argv, limit, spawn (reason printed)
  126    the command is not executable
  127    the command was not found
  2      usage error
  141    stdout's reader went away (| head)"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "exec",
        help="run a command beneath a workspace",
        description=(
            "Run ARGV with its cwd pinned beneath the workspace, an allow-listed\n"
            "environment, stdout/stderr captured (capped per stream) and then written\n"
            "out, and its whole process tree killed when it ends. Confined by the OS\n"
            "sandbox (--sandbox require --profile default unless told otherwise; see\n"
            "flux doctor)."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workspace", default=".", help="workspace root (default: .)")
    parser.add_argument(
        "--timeout", type=float, default=None, help="wall-time limit, seconds (default: none)"
    )
    parser.add_argument("--cwd", default=".", help="workspace-relative working directory")
    add_sandbox_options(parser)
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- ARGV...")
    parser.set_defaults(func=run)


# Signals that end flux itself; turned into an exception so that System.run kills and
# reaps the command's tree before flux exits (with the default action flux would die
# and leave the tree running: it is in its own process group and gets no signal).
_ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Ended(BaseException):
    """Flux itself got one of the ``_ENDING`` signals."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _ending_signals_raise() -> Iterator[None]:
    """Raise :class:`_Ended` on the first ending signal; later ones are ignored.

    Ignoring the later ones keeps a second Ctrl-C from interrupting the cleanup of
    the first. A signal ignored on entry (``nohup``, a background job) stays ignored.
    Only the main thread can install handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ended: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not ended:
            ended.append(signum)
            raise _Ended(signum)

    previous = {}
    for sig in _ENDING:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _write(stream: object, data: bytes) -> None:
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()


def run(args: argparse.Namespace) -> int:
    try:
        with _ending_signals_raise():
            return _run(args)
    except _Ended as exc:
        name = signal.Signals(exc.signum).name
        print(f"flux exec: got {name}; the command was killed", file=sys.stderr)
        return 128 + exc.signum


def _run(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("flux exec: missing command (flux exec [OPTIONS] -- ARGV...)", file=sys.stderr)
        return EXIT_USAGE
    timeout = args.timeout
    if timeout is not None and (not math.isfinite(timeout) or timeout <= 0):
        print("flux exec: --timeout must be a positive number", file=sys.stderr)
        return EXIT_USAGE
    if not args.workspace or "\0" in args.workspace:
        print("flux exec: --workspace must be a non-empty path without NUL", file=sys.stderr)
        return EXIT_USAGE
    try:
        sandbox = resolve_sandbox(args)
    except SandboxRefused as exc:
        print(f"flux exec: {exc}", file=sys.stderr)
        return EXIT_FLUX_ERROR
    try:
        with Workspace(args.workspace) as ws, System(ws, sandbox=sandbox) as system:
            result = system.run(argv, timeout=timeout, cwd=args.cwd)
    except ProcessTimeoutError as exc:
        _write(sys.stdout, exc.stdout)
        _write(sys.stderr, exc.stderr)
        print(f"flux exec: timed out after {exc.timeout} s", file=sys.stderr)
        return EXIT_TIMEOUT
    except FluxSystemError as exc:
        print(f"flux exec: {exc.message} ({exc.reason.value})", file=sys.stderr)
        if exc.reason is ProcessReason.NOT_FOUND:
            return EXIT_NOT_FOUND
        if exc.reason is ProcessReason.NOT_EXECUTABLE:
            return EXIT_NOT_EXECUTABLE
        return EXIT_FLUX_ERROR
    _write(sys.stdout, result.stdout)
    _write(sys.stderr, result.stderr)
    if result.stdout_truncated or result.stderr_truncated:
        print("flux exec: output truncated at the per-stream cap", file=sys.stderr)
    if result.signal is not None:
        return 128 + result.signal
    return result.exit_code
