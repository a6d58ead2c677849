"""The fixed-argv git reads (``git_status``, ``git_diff``, ``git_log``): no program the
repository configures ever runs.

A repository's own config (``.git/config``, writable by the agent beside its files)
can name commands git runs on a read: ``core.fsmonitor`` on status; ``diff.external``
and ``diff.<driver>.textconv`` / ``.command`` on diff and log; clean/smudge filters
(``filter.<driver>.clean``, ``.process``) named by a ``.gitattributes`` entry (``*
filter=x``), run by status and diff on every file whose stat changed; gpg on
``log.showSignature``; a pager. Each read therefore runs as::

    git config -z --name-only --get-regexp '^filter\\.'   # the driver names, every scope
    git -c core.fsmonitor=false -c log.showSignature=false -c core.hooksPath=/dev/null
        -c filter.<name>.clean= -c filter.<name>.smudge= -c filter.<name>.process=
        -c filter.<name>.required=false ...   # each configured driver emptied
        --no-pager --no-optional-locks <status|diff|log> ... [--no-ext-diff --no-textconv]
        [--ignore-submodules=all]

An empty ``clean``/``process`` is no filter (git 2.39 checked: the same repository with
a plain ``git status`` runs the filter). ``--no-optional-locks`` keeps status from
rewriting the index (the reads are side-effect free by metadata); submodules are
ignored (their own config is not enumerated). Hooks: status, diff and log run none;
``core.hooksPath`` is pointed at ``/dev/null`` anyway. ``core.sshCommand``,
``credential.helper`` and the like are used by network commands only, never by these.
``git`` itself is found on :data:`SYSTEM_PATH` only (``PATH`` replaced for both
invocations), never on a ``PATH`` entry the agent could write.

Guarantee: a driver name ``git -c`` cannot override (one holding ``=`` or a newline)
refuses the operation (``OPERATION_FAILED``) rather than running git.
Not guaranteed: a git installed elsewhere (not found: the operation fails), or config
changed between the two invocations by a concurrent writer
(the agent has none: no process it starts outlives its ``proc.run``).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from flux_runtime._catalog import Result
from flux_runtime._errors import EnvelopeError, EnvelopeReason

if typing.TYPE_CHECKING:
    from flux_system.port import Substrate

__all__ = ["git_read"]

_SAFE = (
    *("-c", "core.fsmonitor=false", "-c", "log.showSignature=false"),
    *("-c", "core.hooksPath=/dev/null", "--no-pager", "--no-optional-locks"),
)
_NO_DRIVERS = ("--no-ext-diff", "--no-textconv")
_LIST = ("git", "config", "-z", "--name-only", "--get-regexp", r"^filter\.")
# git is looked up on the system's own directories only: a PATH entry inside the
# workspace (direnv's ``PATH_add bin``) would let the agent plant a ``git`` that these
# approval-free reads run.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_ENV = {"PATH": SYSTEM_PATH}
_EMPTIED = ("clean=", "smudge=", "process=", "required=false")
_VIEW_CAP = 64 * 1024


def _refuse(op: str, why: str) -> EnvelopeError:
    return EnvelopeError(why, op=op, reason=EnvelopeReason.OPERATION_FAILED, target="git")


def filter_overrides(names: str, op: str = "git") -> list[str]:
    """``-c`` pairs emptying every filter driver in *names* (``git config -z
    --name-only`` output: ``filter.<driver>.<key>`` NUL-separated).

    Raises:
        EnvelopeError: ``OPERATION_FAILED`` for a driver name ``-c`` cannot carry.
    """
    drivers: list[str] = []
    for name in names.split("\0"):
        if not name.startswith("filter.") or name.count(".") < 2:
            continue  # a bare ``filter.key`` names no driver
        driver = name[len("filter.") : name.rindex(".")]
        if "=" in driver or "\n" in driver:
            raise _refuse(op, "the repository names a filter driver git -c cannot override")
        if driver not in drivers:
            drivers.append(driver)
    return [arg for d in drivers for key in _EMPTIED for arg in ("-c", f"filter.{d}.{key}")]


def git_read(*args: str) -> Any:
    """The handler of one fixed-argv git read (module docstring)."""

    def handler(s: Substrate, inp: Mapping[str, Any]) -> Result:
        listed = s.processes.run(list(_LIST), env=_ENV, timeout=60.0)
        if listed.exit_code not in (0, 1):  # 1: no filter configured
            raise _refuse(args[0], f"git config failed (exit {listed.exit_code})")
        extra = ["-n", str(inp.get("count", 10))] if args[0] == "log" else []
        if args[0] in ("diff", "log"):
            extra += _NO_DRIVERS
        if args[0] in ("status", "diff"):
            extra.append("--ignore-submodules=all")
        argv = ["git", *_SAFE, *filter_overrides(listed.stdout_text, args[0]), *args, *extra]
        r = s.processes.run(argv, env=_ENV, timeout=60.0)
        out, err = r.stdout_text, r.stderr_text
        content = {"argv": argv, "exit_code": r.exit_code, "stdout": out, "stderr": err}
        view = f"exit {r.exit_code}\n{out[:_VIEW_CAP]}" + (
            f"\nstderr:\n{err[:_VIEW_CAP]}" if err else ""
        )
        return Result(content, view)

    return handler
