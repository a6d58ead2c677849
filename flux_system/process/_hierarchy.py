"""Which cgroup hierarchy trees are contained in: v1 ``pids``, the unified v2 tree, or none.

Found from ``/proc/self/mountinfo`` (where each hierarchy is mounted, and which part of
it the mount shows) joined with ``/proc/self/cgroup`` (where this process sits), never
from ``/proc/self/cgroup`` alone: a host lists v1 controllers there that are not
mounted (a v2-only host keeps the kernel's v1 lines), and a mount can be hidden by a
later one (a tmpfs over ``/sys/fs/cgroup``). A mount is used only when the mount point
still shows that mount (its ``st_dev`` is the one mountinfo gives).

Order (docs/decisions/0024): a mounted v1 ``pids`` hierarchy first — on a hybrid host
(v1 controllers plus an empty v2 tree) only v1 can limit the number of processes —
then the v2 tree, then none. Whether the chosen cgroup is writable is found by the
first ``mkdir`` (:mod:`flux_system.process._cgroup`), not guessed here.

Not guaranteed: a hierarchy mounted after the first spawn is not seen (the answer is
computed once per process).
"""

from __future__ import annotations

import contextlib
import os
import re
import typing

from flux_system._values import record

__all__ = ["Hierarchy", "detect", "find", "reset"]

_OCTAL = re.compile(r"\\([0-7]{3})")
# mountinfo lines looked at: a host with more mounts than this is not parsed further.
_MAX_MOUNTS = 65536


@typing.final
@record
class Hierarchy:
    """The cgroup this process sits in, in the hierarchy trees are contained in.

    Attributes:
        version: 1 (the v1 ``pids`` controller) or 2 (the unified hierarchy).
        own: absolute path of this process's own cgroup directory in that mount.
        proc: the same cgroup as ``/proc/PID/cgroup`` names it.
        mount: the mount point.
        dev: the mount's device number (``st_dev`` of every directory in it).
    """

    version: int
    own: str
    proc: str
    mount: str
    dev: int


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def _own_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """``(pids path, v2 path)`` of this process from ``/proc/self/cgroup`` text."""
    pids = unified = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            unified = parts[2]
        elif "pids" in parts[1].split(","):
            pids = parts[2]
    return pids, unified


def _inside(path: str, root: str) -> str | None:
    """*path* relative to the mount's *root*, or ``None`` when the mount cannot show it."""
    if root == "/":
        return path.lstrip("/")
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return None


def _join(point: str, rel: str) -> str:
    return os.path.join(point, rel).rstrip("/") or "/"


def find(
    mountinfo: str, proc_cgroup: str, *, visible: typing.Callable[[str, int], bool]
) -> Hierarchy | None:
    """The hierarchy to use, from the text of mountinfo and ``/proc/self/cgroup``.

    *visible(mount_point, dev)* says whether the mount point shows that mount (the
    real check stats it; tests pass their own). Pure otherwise.
    """
    pids_path, v2_path = _own_paths(proc_cgroup)
    v1: Hierarchy | None = None
    v2: Hierarchy | None = None
    for line in mountinfo.splitlines()[:_MAX_MOUNTS]:
        fields = line.split()
        try:
            sep = fields.index("-", 6)
            major, minor = (int(x) for x in fields[2].split(":"))
            root, point = _unescape(fields[3]), _unescape(fields[4])
            fstype, options = fields[sep + 1], fields[sep + 3]
        except (ValueError, IndexError):
            continue
        dev = os.makedev(major, minor)
        if fstype == "cgroup" and pids_path is not None and v1 is None:
            if "pids" not in options.split(","):
                continue
            rel = _inside(pids_path, root)
            if rel is not None and visible(point, dev):
                v1 = Hierarchy(1, _join(point, rel), pids_path, point, dev)
        elif fstype == "cgroup2" and v2_path is not None and v2 is None:
            rel = _inside(v2_path, root)
            if rel is not None and visible(point, dev):
                v2 = Hierarchy(2, _join(point, rel), v2_path, point, dev)
    return v1 or v2


def _visible(point: str, dev: int) -> bool:
    try:
        return os.stat(point).st_dev == dev
    except OSError:
        return False


_found: list[Hierarchy | None] = []  # empty until computed


def detect() -> Hierarchy | None:
    """This process's hierarchy (computed once; ``None`` when no cgroup is mounted)."""
    if not _found:
        result: Hierarchy | None = None
        with contextlib.suppress(OSError, UnicodeDecodeError):
            with open("/proc/self/mountinfo", encoding="utf-8") as fh:
                mountinfo = fh.read()
            with open("/proc/self/cgroup", encoding="utf-8") as fh:
                proc_cgroup = fh.read()
            result = find(mountinfo, proc_cgroup, visible=_visible)
        _found[:] = [result]
    return _found[0]


def reset() -> None:
    """Forget the answer (a test that changed the mounts)."""
    _found.clear()
