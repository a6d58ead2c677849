"""``flux exec`` — run one argv confined beneath a workspace, its output live.

The command's stdout and stderr reach flux's own as they are produced, through pipes
flux drains (``System.spawn(stream_output=True)``); flux's stdin is streamed to it when
it is not a terminal (or with ``-i``), else it gets ``/dev/null``. See docs/cli.md.

Exit codes: the command's own exit code; ``128 + N`` when it was killed by signal N;
124 timeout; 125 any flux error and flux's own usage errors; 126 not executable; 127
not found; 141 stdout's reader went away; ``128 + N`` also when flux itself gets
SIGINT, SIGTERM or SIGHUP (N) — the command's tree is killed first.

Only what this command uses is imported here (no pydantic, asyncio or policy engine):
keep it so, ``tests/flux_runtime/test_cli_fast_start.py`` checks it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

from flux_runtime.cli._exec_io import Relay, StdinPump
from flux_runtime.cli._exec_options import ExecOptions, UsageError, add_options, options
from flux_runtime.cli._exec_report import Outcome, report_dir, write_report
from flux_runtime.cli._sandbox_opts import (
    SandboxRefused,
    add_sandbox_options,
    resolve_sandbox,
    sandbox_section,
)
from flux_runtime.cli._text import shown
from flux_system import (
    ConfinementError,
    FluxSystemError,
    ProcessReason,
    SandboxReason,
    System,
    Workspace,
    WorkspaceError,
)
from flux_system.sandbox import Sandbox

__all__ = ["USAGE_EXIT", "register"]

EXIT_TIMEOUT = 124
EXIT_FLUX_ERROR = 125
EXIT_USAGE = 125  # as env, timeout, docker run: never mistaken for the command's 2
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
EXIT_BROKEN_PIPE = 141
USAGE_EXIT = EXIT_USAGE

# After a timeout, how long the output already read may take to reach a reader that
# is not reading (a paused pager) before flux stops waiting for it.
_RELAY_AFTER_TIMEOUT_S = 1.0

EXIT_CODES = """exit codes (flux exec):
  N      the command's own exit code (any value, so also 2 and 124-127)
  128+N  the command was killed by signal N, or flux got SIGINT/SIGTERM/SIGHUP
         (N) and killed the command
  124    timed out (--timeout)
  125    flux's own error: usage, workspace, cwd, argv, env, limit, spawn, --report
         (the reason is printed)
  126    the command is not executable
  127    the command was not found
  141    stdout's reader went away (| head): the command's tree was killed"""

_PROG = "flux exec"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "exec",
        help="run a command beneath a workspace",
        description=(
            "Run ARGV with its cwd pinned beneath the workspace, an allow-listed\n"
            "environment, its output streamed live through pipes flux drains, and its\n"
            "whole process tree killed when it ends. Confined by the OS sandbox\n"
            "(--sandbox require --profile default unless told otherwise; flux doctor\n"
            "says what this host supports)."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser)
    add_sandbox_options(parser)  # --sandbox require --profile default unless told otherwise
    parser.set_defaults(func=run)


# Signals that end flux itself; turned into an exception so that the System kills and
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


def _say(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{_PROG}: {text}\n".encode(errors="replace"))


def run(args: argparse.Namespace) -> int:
    try:
        opts = options(args)
    except UsageError as exc:
        _say(str(exc))
        return EXIT_USAGE
    System.warm_up()  # the first spawn's cgroup, made while the sandbox is resolved
    outcome = Outcome(command=opts.argv[0], stdin_mode=opts.stdin_mode)
    report_at = ""
    if opts.report is not None:  # resolved now: the run may change what its path names
        try:
            report_at = report_dir(opts.report, [opts.workspace, *getattr(args, "rw", [])])
        except ValueError as exc:
            _say(
                f"--report {shown(opts.report)}: its directory goes through the symlink "
                f"{shown(exc.args[0])} inside a root the command may write; give the real path"
            )
            return EXIT_FLUX_ERROR
        except OSError as exc:
            _say(f"--report {shown(opts.report)}: cannot use its directory: {exc.strerror}")
            return EXIT_FLUX_ERROR
    try:
        sandbox = resolve_sandbox(args)
    except SandboxRefused as exc:  # one line naming the layer, pointing to flux doctor
        outcome.error = ("sandbox_unavailable", str(exc))
        _say(str(exc))
        sandbox = None
    try:
        with _ending_signals_raise():
            code = EXIT_FLUX_ERROR if sandbox is None else _run(opts, outcome, sandbox)
    except _Ended as exc:
        name = signal.Signals(exc.signum).name
        _say(f"got {name}; {shown(opts.argv[0])} was killed")
        code = 128 + exc.signum
        outcome.interrupted = exc.signum
    outcome.flux_exit = code
    if opts.report is not None:
        from flux_runtime._files import ReplacedError

        try:
            write_report(report_at, opts.report, outcome)
        except ReplacedError as exc:
            _say(
                f"--report {shown(opts.report)}: not written: its directory "
                f"{shown(exc.path)} was replaced during the run ({exc.why})"
            )
            return EXIT_FLUX_ERROR
        except OSError as exc:
            _say(f"--report {shown(opts.report)}: cannot write: {exc.strerror}")
            return EXIT_FLUX_ERROR
    return code


def _refused(outcome: Outcome, exc: FluxSystemError, text: str) -> None:
    outcome.error = (exc.reason.value, text)
    _say(f"{text} ({exc.reason.value})")


def _run(opts: ExecOptions, outcome: Outcome, sandbox: Sandbox) -> int:
    try:
        ws = Workspace(opts.workspace)
    except FluxSystemError as exc:
        _refused(outcome, exc, f"workspace {shown(opts.workspace)}: {exc.message}")
        return EXIT_FLUX_ERROR
    try:
        system = System(ws, sandbox=sandbox)
    except FluxSystemError as exc:  # the sandbox refused this workspace ($HOME, /) or a value
        ws.close()
        about = (
            f"workspace {shown(opts.workspace)}"
            if getattr(exc, "reason", None) is SandboxReason.WORKSPACE_COVERS_HOME
            else "sandbox"
        )
        _refused(outcome, exc, f"{about}: {exc.message}")
        return EXIT_FLUX_ERROR
    with ws, system:
        try:
            return _run_in(opts, outcome, system)
        finally:
            if sandbox.mode != "off":
                outcome.sandbox = sandbox_section(sandbox, outcome.denials)


def _run_in(opts: ExecOptions, outcome: Outcome, system: System) -> int:
    t0 = time.monotonic()
    try:
        child = system.spawn(
            opts.argv,
            env=opts.env,
            timeout=opts.timeout,
            cwd=opts.cwd,
            stream_output=True,
            output_cap=opts.output_cap,
            stream_stdin=opts.stdin_mode == "stream",
        )
    except (ConfinementError, WorkspaceError) as exc:
        _refused(outcome, exc, f"--cwd {shown(opts.cwd)}: {exc.message}")
        return EXIT_FLUX_ERROR
    except FluxSystemError as exc:
        return _spawn_refused(outcome, exc, opts.argv[0])
    relay = Relay(child, notice_prefix=_PROG)
    relay.start()
    if child.stdin is not None:
        StdinPump(child.stdin).start()
    child.join()  # interruptible: an ending signal raises _Ended here
    status = child.status()
    if status.timed_out:
        relay.done.wait(_RELAY_AFTER_TIMEOUT_S)
    else:
        relay.done.wait()
    outcome.duration_s = time.monotonic() - t0
    outcome.totals = child.output_totals()
    outcome.stdin_bytes = 0 if child.stdin is None else child.stdin.written
    outcome.exit_code = status.exit_code if status.signal is None else None
    outcome.signal = status.signal
    outcome.timed_out = status.timed_out
    outcome.denials = child.denials
    if relay.broken_pipe:
        outcome.broken_pipe = True
        return EXIT_BROKEN_PIPE
    if status.timed_out:
        _say(f"timed out after {opts.timeout} s; {shown(opts.argv[0])} was killed")
        return EXIT_TIMEOUT
    if status.signal is not None:
        return 128 + status.signal
    assert status.exit_code is not None
    return status.exit_code


def _spawn_refused(outcome: Outcome, exc: FluxSystemError, argv0: str) -> int:
    name = shown(exc.target if exc.target is not None else argv0)
    if exc.reason is ProcessReason.NOT_FOUND:
        _refused(outcome, exc, f"{name}: command not found")
        return EXIT_NOT_FOUND
    if exc.reason is ProcessReason.NOT_EXECUTABLE:
        _refused(outcome, exc, f"{name}: cannot execute: {exc.message}")
        return EXIT_NOT_EXECUTABLE
    if exc.reason is ProcessReason.BAD_CWD:
        _refused(outcome, exc, f"{name}: bad working directory: {exc.message}")
        return EXIT_FLUX_ERROR
    if exc.reason is ProcessReason.INVALID_ENV:
        _refused(outcome, exc, f"{name}: --env: {exc.message}")
        return EXIT_FLUX_ERROR
    _refused(outcome, exc, f"{name}: {exc.message}")
    return EXIT_FLUX_ERROR
