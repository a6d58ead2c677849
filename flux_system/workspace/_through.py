"""Which name an atomic write replaces: a final symlink is followed beneath the root.

``write_bytes`` and ``copy`` replace a name by ``renameat`` in a directory fd (see
:mod:`._atomic`). When the final component is a symlink, the write goes *through* it,
as ``open(2)`` and Go's ``os.Root`` do for ``O_CREAT``: the link is read with
``readlinkat`` from its directory fd, its text is resolved beneath the root (from the
link's directory, so ``..`` means what the kernel would make of it) and the name it
ends on is replaced, in the directory fd that resolution returned. The link itself is
kept. A target that leaves the root — absolute (beneath semantics), ``..`` above the
root, through another link — is refused by the resolver, before anything is created.

Race-freedom is the resolvers': every directory fd comes from a beneath-resolution,
and the rename happens in that fd. If the name is swapped after it was looked at (a
link for a file or back), the rename replaces whatever the name now is — in a
directory beneath the root, never through a link — so nothing outside can change.

Not followed into a missing directory: a link whose target's parent does not exist is
``NOT_FOUND`` (no directory is ever created from a link's text).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from flux_system._exceptions import ConfinementReason, PathEscapeError, WorkspaceReason
from flux_system.workspace._base import DIR, WorkspaceBase, err
from flux_system.workspace._pathname import split_parent
from flux_system.workspace._roots import Root

__all__ = ["WriteTargets"]

_MAX_SYMLINKS = 40  # Linux MAXSYMLINKS: final links followed before SYMLINK_LOOP


def _refuse_kind(st: os.stat_result, op: str, display: str) -> None:
    """A write replaces a regular file or nothing: refuse directories and special files."""
    if stat.S_ISDIR(st.st_mode):
        raise err(op, display, WorkspaceReason.IS_A_DIRECTORY, "is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise err(op, display, WorkspaceReason.SPECIAL_FILE, "not a regular file")


class WriteTargets(WorkspaceBase):
    """:meth:`_write_target` (see the module docstring)."""

    def _write_target(
        self, root: Root, pfd: int, parent: bytes, name: bytes, *, op: str, display: str
    ) -> tuple[int, bytes, os.stat_result | None]:
        """The (directory fd, name, its ``lstat`` or None if missing) a write replaces.

        *pfd* is the directory fd of *name* (resolved beneath *root* from *parent*); it
        stays the caller's. The fd returned is *pfd* itself when *name* is not a symlink,
        else a new one the caller closes. Raises ``PathEscapeError`` for a target that
        leaves the root, ``WorkspaceError`` ``IS_A_DIRECTORY`` / ``SPECIAL_FILE`` for
        what a write must not replace, and ``OSError`` for the caller to map.
        """
        cur = pfd
        try:
            for _ in range(_MAX_SYMLINKS + 1):
                try:
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    return cur, name, None
                if not stat.S_ISLNK(st.st_mode):
                    _refuse_kind(st, op, display)
                    return cur, name, st
                try:
                    target = os.readlink(name, dir_fd=cur)
                except OSError as exc:
                    if exc.errno in (errno.ENOENT, errno.EINVAL):
                        continue  # no longer a link (swapped meanwhile): look again
                    raise
                parent, name = self._link_step(root, parent, target, op, display)
                nxt = self._open(root, parent, DIR, op=op, display=display)
                if cur != pfd:
                    os.close(cur)
                cur = nxt
            raise PathEscapeError(
                f"{op}: too many symlinks",
                op=op,
                path=display,
                reason=ConfinementReason.SYMLINK_LOOP,
            )
        except BaseException:
            if cur != pfd:
                os.close(cur)
            raise

    def _link_step(
        self, root: Root, parent: bytes, target: bytes, op: str, display: str
    ) -> tuple[bytes, bytes]:
        """The (parent, name) the link text *target*, read in *parent*, leads to."""
        if not target:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))  # names nothing
        if target.startswith(b"/"):
            if not self._unconfined:  # beneath semantics, even for a target inside
                raise PathEscapeError(
                    f"{op}: absolute symlink target",
                    op=op,
                    path=display,
                    reason=ConfinementReason.ABSOLUTE_SYMLINK,
                )
            rel = target
        else:
            rel = target if parent == b"." else parent + b"/" + target
        new_parent, new_name, trailing = split_parent(rel)
        if trailing or new_name in (b".", b".."):
            # The link names a directory: resolve it beneath the root (escapes raise),
            # then refuse, as open(2) refuses O_CREAT on a directory.
            with contextlib.suppress(FileNotFoundError):
                os.close(self._open(root, rel, DIR, op=op, display=display))
            raise err(op, display, WorkspaceReason.IS_A_DIRECTORY, "symlink names a directory")
        return new_parent, new_name
