"""Extra paths granted to a sandbox, checked for links an earlier run could plant.

``SandboxSettings.read_only``/``read_write`` and a profile's ``read_write`` are host
paths, bound by path (bubblewrap) or opened by path for a Landlock rule, and both
follow symlinks. One that lies inside a tree the sandbox may write (a writable root,
or another writable extra path) is attacker-influenced between runs: a run can
replace ``ws/data`` (given as ``--ro ws/data``) with a symlink to ``~/.ssh``, and the
next run would be shown the target — read-write, for ``--rw``. So below such a tree
no component of an extra path may be a symlink; the part above it (chosen by the
user, outside the sandbox's reach) may.

Guarantee: checked when a ``System`` is confined, before any rule or bind is made
from the path; a violation refuses the confinement.
Not guaranteed: a swap by a sandboxed process still running from an earlier run
between this check and bubblewrap's bind at a later launch (as for protected paths);
Landlock rules hold the inodes opened at confinement, so later swaps do not move them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from typing import Final

from flux_system._exceptions import SandboxReason, SandboxUnavailableError

__all__ = ["check_extra_paths"]

_MAX_COMPONENTS: Final = 256  # components of one extra path (PATH_MAX / 16)


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def _refuse(extra: str, base: str, why: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"the extra path {extra} lies inside {base}, which the sandbox can write, "
        f"and {why}: an earlier run could have planted it; pass the path it should be",
        op="confine",
        layer=extra,
        reason=SandboxReason.EXTRA_PATH_UNSAFE,
    )


def _check_one(extra: str, bases: Sequence[str]) -> None:
    parts = [p for p in os.path.normpath(extra).split("/") if p]
    if len(parts) > _MAX_COMPONENTS:
        raise _refuse(extra, "/", "it has too many components")
    cur = "/"
    for part in parts:
        nxt = os.path.join(cur, part)
        base = next((b for b in bases if _within(cur, b)), None)
        if base is None:  # above every writable tree: the user's own links are fine
            cur = os.path.realpath(nxt)
            continue
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            return  # absent: skipped when the view is made
        except OSError as exc:
            raise _refuse(extra, base, f"{nxt} cannot be examined ({exc.strerror})") from exc
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(extra, base, f"{nxt} is a symlink")
        cur = nxt


def check_extra_paths(
    writable_roots: Iterable[str], read_only: Iterable[str], read_write: Iterable[str]
) -> None:
    """Refuse an extra path with a symlink below a tree the sandbox can write.

    Args:
        writable_roots: physical paths of the workspace's writable roots.
        read_only, read_write: the extra paths (absolute).

    Raises:
        SandboxUnavailableError: ``EXTRA_PATH_UNSAFE``, ``layer`` the extra path.
    """
    rw = tuple(read_write)
    extras = (*read_only, *rw)
    bases = [os.path.normpath(r) for r in writable_roots]
    for path in rw:
        if not any(_within(os.path.normpath(path), b) for b in bases):
            bases.append(os.path.realpath(path))  # its own subtree is writable inside
    for extra in extras:
        _check_one(extra, bases)
