"""The ``flux`` command line.

Each subcommand lives in its own module ``flux_runtime/cli/_<name>.py`` exposing
``register(subparsers)`` and ``EXIT_CODES`` (the exit-code table its ``--help`` shows;
``flux --help`` shows them all); the module adds its parser and sets ``func`` (taking
the parsed namespace, returning the exit code).

Exit codes: 0 success (or the confined command's own exit code for ``flux exec``),
2 usage or load error, 141 (128 + SIGPIPE) the reader of stdout went away (``| head``);
subcommands document the others they use.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

__all__ = ["EXIT_BROKEN_PIPE", "main"]

# stdout's reader went away: what a shell reports for a process killed by SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13

# Subcommand modules, in help order.
_SUBCOMMANDS: tuple[str, ...] = ("exec", "doctor", "policy", "evidence")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flux",
        description="Flux execution substrate",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    codes = []
    for name in _SUBCOMMANDS:
        module = importlib.import_module(f"flux_runtime.cli._{name}")
        module.register(sub)
        codes.append(module.EXIT_CODES)
    parser.epilog = "\n\n".join(codes)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``flux`` command line; return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code = func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more can reach the reader; drop stdout so that the flush at
        # interpreter exit does not fail again and print a traceback.
        sys.stdout = None
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
