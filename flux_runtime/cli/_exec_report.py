"""``flux exec --report FILE``: the JSON summary of one run (schema in docs/cli.md).

The report names the command (``argv[0]`` only: arguments and environment values may
hold secrets) and says how the run ended, how long it took and how many bytes each
stream carried, and (when sandboxed) the sandbox's active layers, what is missing, each
guarantee and what it denied.
The file is written through :mod:`flux_runtime._files` (atomic replace). Its directory
is resolved before the run (:func:`report_dir`) and reached again after it without
following a symlink (:func:`write_report`): the run may lie in the workspace it could
write, and a parent it swapped for a symlink must not take the host's write elsewhere.
"""

from __future__ import annotations

import typing

from flux_system._values import record
from flux_system.process import OutputTotals
from flux_system.sandbox import Denials

__all__ = ["REPORT_SCHEMA", "Outcome", "report_dict", "report_dir", "write_report"]

REPORT_SCHEMA = "flux.exec.report/1"


@typing.final
@record(frozen=False)
class Outcome:
    """What one ``flux exec`` run came to (filled in as it goes)."""

    command: str
    stdin_mode: str
    flux_exit: int = 125
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    broken_pipe: bool = False
    interrupted: int | None = None  # the signal flux itself got
    duration_s: float = 0.0
    totals: OutputTotals | None = None
    stdin_bytes: int = 0
    error: tuple[str, str] | None = None  # (reason, message)
    sandbox: dict[str, object] | None = None  # the sandbox section (None: --sandbox off)
    denials: Denials | None = None


def _stream(totals: OutputTotals | None, name: str) -> dict[str, object]:
    if totals is None:
        return {"bytes": 0, "delivered": 0, "truncated": False}
    written = totals.stdout_bytes if name == "stdout" else totals.stderr_bytes
    dropped = totals.stdout_dropped if name == "stdout" else totals.stderr_dropped
    return {"bytes": written, "delivered": written - dropped, "truncated": dropped > 0}


def _ended(o: Outcome) -> str:
    if o.error is not None:
        return "refused"
    if o.interrupted is not None:
        return "interrupted"
    if o.broken_pipe:
        return "broken_pipe"
    if o.timed_out:
        return "timed_out"
    if o.signal is not None:
        return "signaled"
    return "exited"


def report_dict(o: Outcome) -> dict[str, object]:
    """The report of *o* as a JSON-ready dict (keys as documented in docs/cli.md)."""
    return {
        "schema": REPORT_SCHEMA,
        "command": o.command,
        "ended": _ended(o),
        "exit_code": o.exit_code,
        "signal": o.signal,
        "flux_exit": o.flux_exit,
        "timed_out": o.timed_out,
        "duration_s": round(o.duration_s, 6),
        "stdout": _stream(o.totals, "stdout"),
        "stderr": _stream(o.totals, "stderr"),
        "stdin": {"mode": o.stdin_mode, "bytes": o.stdin_bytes},
        "error": None if o.error is None else {"reason": o.error[0], "message": o.error[1]},
        "sandbox": o.sandbox,
    }


def report_dir(path: str, writable: list[str]) -> str:
    """The real path of the directory of the report *path*, taken before the run.

    Raises:
        ValueError: the path goes through a symlink that lies inside one of the
            *writable* roots (an earlier sandboxed run may have planted it); its one
            argument is the link's path.
        OSError: missing, not a directory, not searchable.
    """
    import os

    from flux_runtime._files import real_dir, real_path, symlinks_on

    parent = os.path.dirname(path) or "."
    roots = [real_path(r).rstrip("/") for r in writable]
    for where, name in symlinks_on(parent):
        if any(where == r or where.startswith(r + "/") for r in roots):
            raise ValueError(os.path.join(where, name))
    return real_dir(parent)


def write_report(directory: str, path: str, o: Outcome) -> None:
    """Write the report of *o* as *path*'s file name in *directory* (:func:`report_dir`).

    Raises:
        flux_runtime._files.ReplacedError: a component of *directory* is now a symlink,
            a file or missing (the run replaced it): nothing is written.
        OSError: the directory is not writable, or the rename failed.
    """
    import json
    import os

    from flux_runtime._files import write_text_beneath

    text = json.dumps(report_dict(o), indent=2, sort_keys=True) + "\n"
    write_text_beneath(directory, os.path.basename(path), text)
