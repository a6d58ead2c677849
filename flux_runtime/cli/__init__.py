"""The ``flux`` command line.

Each subcommand lives in its own module ``flux_runtime/cli/_<name>.py`` exposing
``register(subparsers)`` and ``EXIT_CODES`` (the exit-code table its ``--help`` shows;
``flux --help`` shows them all); the module adds its parser and sets ``func`` (taking
the parsed namespace, returning the exit code). A module may set ``USAGE_EXIT`` (the
exit status of its usage errors; default 2).

Only the module of the subcommand being run is imported, so ``flux exec`` does not pay
for pydantic or the policy engine (``flux --help`` imports them all). An unknown option
of a subcommand prints that subcommand's usage, not the top-level one.

Exit codes: 0 success (or the confined command's own exit code for ``flux exec``),
2 usage or load error, 141 (128 + SIGPIPE) the reader of stdout went away (``| head``);
subcommands document the others they use.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from flux_runtime._files import fill_closed_std_fds

__all__ = ["EXIT_BROKEN_PIPE", "main"]

# stdout's reader went away: what a shell reports for a process killed by SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13
EXIT_USAGE = 2

# Subcommand modules, in help order.
_SUBCOMMANDS: tuple[str, ...] = ("exec", "doctor", "serve", "policy", "evidence", "run")


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose unknown arguments are reported by the parser they
    were given to (argparse hands a subcommand's leftovers up to the top level, which
    then prints the top-level usage), with a per-parser usage exit status."""

    usage_exit = EXIT_USAGE

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(extras))
        return ns, extras

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(self.usage_exit, f"{self.prog}: error: {message}\n")

    def _get_formatter(self) -> argparse.HelpFormatter:
        # The width given, as argparse would compute it, so that the formatter never
        # imports shutil (with bz2 and lzma: ~3 ms of every start, for every argument).
        return self.formatter_class(prog=self.prog, width=_columns() - 2)  # type: ignore[call-arg]


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size().columns`` gives it."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 80
    return columns


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("flux")
    except metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked for (importlib.metadata is slow to load)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show flux's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"flux {_version()}")
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``flux`` parser with every subcommand, or with *only* that one registered."""
    parser = _Parser(
        prog="flux",
        description="Flux execution substrate",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    codes = []
    for name in _SUBCOMMANDS if only is None else (only,):
        module = importlib.import_module(f"flux_runtime.cli._{name}")
        module.register(sub)
        chosen = sub.choices[name]
        if isinstance(chosen, _Parser):
            chosen.usage_exit = getattr(module, "USAGE_EXIT", EXIT_USAGE)
        codes.append(module.EXIT_CODES)
    parser.epilog = "\n\n".join(codes)
    return parser


def _warm_up_early() -> None:
    """Start making ``flux exec``'s tree cgroup now (decision 0029, amended): on cgroup
    v1 it waits for an RCU grace period (~20 ms here), which then overlaps the rest of
    the start-up (the CLI's own imports, parsing, the sandbox's probe) instead of
    following it. What is not used is removed at exit."""
    from flux_system.process import System

    System.warm_up()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``flux`` command line; return the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    closed = fill_closed_std_fds() if argv is None else frozenset()
    if args == ["--version"]:  # without building any parser
        print(f"flux {_version()}")
        return 0
    # The subcommand named first is the only one imported (fast start).
    only = args[0] if args and args[0] in _SUBCOMMANDS else None
    if only == "exec" and "-h" not in args and "--help" not in args:
        _warm_up_early()
    parser = build_parser(only)
    parsed = parser.parse_args(args)
    parsed.closed_std_fds = closed  # what the process was started without (fds 0-2)
    func: Callable[[argparse.Namespace], int] | None = getattr(parsed, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code = func(parsed)
        if sys.stdout is not None:  # None: started with fd 1 closed
            sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more can reach the reader; drop stdout so that the flush at
        # interpreter exit does not fail again and print a traceback.
        sys.stdout = None
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
