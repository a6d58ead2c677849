"""Symlink creation for :class:`~flux_system.Workspace` (a private mixin).

Kept apart from :mod:`._mutate` because checking a link *target* is its own concern:
the target is text that will be resolved later, from the link's physical directory,
so it is checked lexically against that directory's depth and resolved once now.
"""

from __future__ import annotations

import contextlib
import os

from flux_system._exceptions import ConfinementReason, PathEscapeError, WorkspaceReason
from flux_system.workspace._base import DIR, PATH, WorkspaceBase, err
from flux_system.workspace._pathname import as_text, check_target, encode_checked
from flux_system.workspace._roots import Root

__all__ = ["Links"]

_MAX_DEPTH = 2048  # PATH_MAX / 2: the deepest a directory can sit beneath a root
_UP = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def _escape(op: str, display: str, what: str) -> PathEscapeError:
    return PathEscapeError(f"{op}: {what}", op=op, path=display, reason=ConfinementReason.ESCAPE)


class Links(WorkspaceBase):
    """:meth:`symlink` (see ``Workspace``)."""

    def symlink(self, target: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
        """Create the symlink *path* -> *target*.

        Guarantee: refused unless *target* is relative, lexically stays beneath the
        root from the link's physical directory (``..`` never above the root), and
        resolves beneath the root through the links that exist now (a dangling target
        beneath the root is allowed). Not guaranteed: what later changes to
        intermediate components do to a consumer that follows links with host
        semantics (our own resolution stays beneath the root regardless).

        Under ``unconfined=True`` the target is only validated as text (absolute and
        escaping targets are created as asked) and *path* may be anywhere.

        Raises:
            PathEscapeError: ``ABSOLUTE_SYMLINK``, ``ESCAPE`` (naming *target* when the
                target is at fault, *path* when the link's directory is);
            InvalidPathError, NotFoundError, WorkspaceError: ``EXISTS``, ...
        """
        op = "symlink"
        if self._unconfined:  # the hatch: the target is validated as text, nothing more
            text = as_text(target, "target")
            raw_target = encode_checked(text, op=op, display=text)
        else:
            raw_target = check_target(target, op=op)
        tdisplay = os.fsdecode(raw_target)
        root, rel, display = self._locate(path, op, write=True)
        parent, name, trailing = self._final(root, rel, op, display)
        if trailing:
            name += b"/"  # the kernel refuses it (EEXIST or ENOENT); never followed
        with self._mapped(root, op, display):
            pfd = self._open(root, parent, DIR, op=op, display=display)
            try:
                if not self._unconfined:
                    self._check_target(
                        root, pfd, raw_target, op=op, display=display, tdisplay=tdisplay
                    )
                os.symlink(raw_target, name, dir_fd=pfd)
            finally:
                os.close(pfd)

    def _check_target(
        self, root: Root, pfd: int, raw_target: bytes, *, op: str, display: str, tdisplay: str
    ) -> None:
        """Refuse a *raw_target* that lexically climbs above the root from the link's
        physical directory *pfd*, or that resolves outside through existing links."""
        depth = self._depth(root, pfd, op, display)
        for part in raw_target.split(b"/"):
            if part == b"..":
                depth -= 1
                if depth < 0:
                    raise _escape(op, tdisplay, "target leaves the root")
            elif part not in (b"", b"."):
                depth += 1
        self._check_beneath(root, pfd, raw_target, op, display, tdisplay=tdisplay)

    def _check_beneath(
        self, root: Root, pfd: int, target: bytes, op: str, display: str, *, tdisplay: str
    ) -> None:
        """Resolve *target* from the directory *pfd*, beneath *root*: escapes raise.

        A target that does not exist (yet) beneath the root is allowed (dangling).
        Errors about the link's directory name *display*, those about the target
        *tdisplay*.
        """
        try:
            here = os.readlink(f"/proc/self/fd/{pfd}")
            top = os.readlink(f"/proc/self/fd/{root.fd}")
        except FileNotFoundError:
            raise err(op, display, WorkspaceReason.UNSUPPORTED, "/proc not mounted") from None
        base = top.rstrip("/") + "/"
        if here == top:
            path = target
        elif here.startswith(base):
            path = os.fsencode(here[len(base) :]) + b"/" + target
        else:
            raise _escape(op, display, "directory not beneath the root")
        with (
            self._mapped(root, op, tdisplay),
            contextlib.suppress(FileNotFoundError, NotADirectoryError),
        ):
            os.close(self._open(root, path, PATH, op=op, display=tdisplay))

    def _depth(self, root: Root, dirfd: int, op: str, display: str) -> int:
        """How many levels *dirfd* physically sits beneath *root* (walks ``..`` by fd)."""
        top = os.fstat(root.fd)
        cur = os.dup(dirfd)
        try:
            for depth in range(_MAX_DEPTH):
                st = os.fstat(cur)
                if st.st_ino == top.st_ino and st.st_dev == top.st_dev:
                    return depth
                up = os.open("..", _UP, dir_fd=cur)
                os.close(cur)
                cur = up
                up_st = os.fstat(cur)
                if up_st.st_ino == st.st_ino and up_st.st_dev == st.st_dev:
                    break  # reached "/" without meeting the root
        finally:
            os.close(cur)
        raise _escape(op, display, "directory not beneath the root")
