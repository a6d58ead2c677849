"""``flux exec``'s options: the argparse declarations and their checked value.

A new flag is one ``add_argument`` in :func:`add_options` (in its group) and one field
of :class:`ExecOptions` filled by :func:`options`, which refuses bad input with a
:class:`UsageError` naming the option (never a value that may be a secret).
"""

from __future__ import annotations

import argparse
import math
import os
import typing
from collections.abc import Mapping

from flux_runtime.cli._text import shown
from flux_system._values import record
from flux_system.process import is_denied_hook

__all__ = ["ExecOptions", "UsageError", "add_options", "options"]


class UsageError(Exception):
    """A bad option value: reported with exec's usage exit status (125)."""


@typing.final
@record
class ExecOptions:
    argv: tuple[str, ...]
    workspace: str
    cwd: str
    timeout: float | None
    output_cap: int | None
    env: Mapping[str, str]
    stdin_mode: str  # "stream" | "null"
    report: str | None


def add_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where")
    where.add_argument("--workspace", default=".", help="workspace root (default: .)")
    where.add_argument("--cwd", default=".", help="workspace-relative working directory")
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--timeout", type=float, default=None, help="wall-time limit, seconds (default: none)"
    )
    limits.add_argument(
        "--output-cap",
        type=int,
        default=None,
        metavar="BYTES",
        help="bytes of stdout and of stderr passed on, each (default: no cap); the rest"
        " is read and discarded, and a notice says so once",
    )
    io = parser.add_argument_group("input and environment")
    io.add_argument(
        "-i",
        "--interactive",
        action="store_true",
        help="forward flux's stdin even when it is a terminal (otherwise a terminal stdin"
        " gives the command /dev/null; a pipe or file is always forwarded)",
    )
    io.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable in the command's environment (repeatable)",
    )
    io.add_argument(
        "--env-pass",
        action="append",
        default=[],
        metavar="NAME",
        help="copy one variable from flux's environment (repeatable; loader and"
        " interpreter hooks such as LD_PRELOAD are refused)",
    )
    out = parser.add_argument_group("reporting")
    out.add_argument(
        "--report",
        default=None,
        metavar="FILE",
        help="write a JSON summary of the run to FILE (schema: docs/cli.md)",
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- ARGV...")


def _stdin_mode(interactive: bool, closed: bool) -> str:
    """*closed*: fd 0 was closed when flux started (main put /dev/null there)."""
    if closed:
        return "null"
    try:
        os.fstat(0)
    except OSError:  # fd 0 closed (options built outside main)
        return "null"
    if os.isatty(0) and not interactive:
        return "null"  # as docker run without -i: a background job never gets SIGTTIN
    return "stream"


def _env(pairs: list[str], passed: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for name in passed:
        if not name or "=" in name or "\0" in name:
            raise UsageError(f"--env-pass {shown(name)}: expected a variable name")
        if is_denied_hook(name):
            raise UsageError(
                f"--env-pass {shown(name)}: a loader or interpreter hook is never passed"
            )
        value = os.environ.get(name)
        if value is not None:
            env[name] = value
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            # Never show the argument: a mistyped one may be a secret value.
            raise UsageError("--env expects NAME=VALUE")
        env[name] = value
    return env


def options(args: argparse.Namespace) -> ExecOptions:
    """The checked options of one ``flux exec``; raises :class:`UsageError`."""
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("missing command (flux exec [OPTIONS] -- ARGV...)")
    timeout = args.timeout
    if timeout is not None and (not math.isfinite(timeout) or timeout <= 0):
        raise UsageError("--timeout must be a positive number of seconds")
    cap = args.output_cap
    if cap is not None and cap < 0:
        raise UsageError("--output-cap must be a number of bytes >= 0")
    if not args.workspace or "\0" in args.workspace:
        raise UsageError("--workspace must be a non-empty path without NUL")
    report = args.report
    if report is not None:
        if not report or "\0" in report:
            raise UsageError("--report must be a non-empty path without NUL")
        parent = os.path.dirname(report) or "."
        if not os.path.isdir(parent):
            raise UsageError(f"--report {shown(report)}: no such directory {shown(parent)}")
    return ExecOptions(
        argv=tuple(argv),
        workspace=args.workspace,
        cwd=args.cwd,
        timeout=timeout,
        output_cap=cap,
        env=_env(args.env, args.env_pass),
        stdin_mode=_stdin_mode(args.interactive, 0 in getattr(args, "closed_std_fds", ())),
        report=report,
    )
