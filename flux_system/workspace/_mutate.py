"""The mutating operations of :class:`~flux_system.Workspace` (a private mixin)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable

from flux_system._exceptions import WorkspaceReason
from flux_system.workspace._atomic import replace_atomically, write_all
from flux_system.workspace._base import DIR, PATH, Data, check_data, err
from flux_system.workspace._link import Links
from flux_system.workspace._pathname import split_parent
from flux_system.workspace._rmtree import remove_tree
from flux_system.workspace._roots import Root
from flux_system.workspace._through import WriteTargets

__all__ = ["Mutations"]

_COPY_CHUNK = 1 << 20
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
# renameat errors caused by what sits at the destination name (rename(2)): they name dst.
_DST_ERRNOS = frozenset(
    {errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR, errno.EINVAL, errno.EXDEV}
)


def _append_all(fd: int, data: Data, size: int) -> None:
    """Append every byte of *data* to *fd* (``O_APPEND``) whose size was *size*.

    On failure (disk full, file-size limit, a signal) the bytes already appended are cut
    off again — but only if the file is still exactly *size* plus them, so a concurrent
    appender's data is never cut (then the partial tail stays: decision 0014).
    """
    view = memoryview(data).cast("B")
    done = 0
    try:
        while done < len(view):
            done += os.write(fd, view[done:])
    except BaseException:
        if done:
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_size == size + done:
                    os.ftruncate(fd, size)
        raise


class Mutations(Links, WriteTargets):
    """Writes, creation, removal, rename and modes (see ``Workspace``)."""

    def write_bytes(
        self, path: str | os.PathLike[str], data: Data, *, create_parents: bool = True
    ) -> None:
        """Atomically replace (or create) the file *path* with *data*.

        A temporary file is created ``O_EXCL`` in the destination directory's fd,
        written, fsynced and renamed over the name, and the directory is fsynced.
        Guarantee: readers see the old or the new content, never a mix; on any failure
        nothing partial is left (a writer killed mid-write neither, where the file
        system has ``O_TMPFILE``); once it returns, content and name survive a crash; the
        replaced file's permission bits are kept (setuid/setgid dropped; a new file
        gets ``0o666`` under the umask); an inode
        shared with another name is never modified (the name is replaced: the other
        name keeps the old content). A final symlink is followed beneath the root, as
        ``open(2)`` and Go's ``os.Root`` do: a link whose target lies inside is
        written *through* (the link is kept; the target — created if the link dangles
        — is replaced in its own directory, opened beneath the root by fd); a link
        whose target leaves the root (absolute, ``..`` above it, through another link)
        is refused and nothing is created. A directory, a FIFO, socket or device, and
        a trailing ``/`` on something that is not a directory are refused, never
        replaced. Missing parent directories of *path* are created beneath the root
        unless ``create_parents=False`` (never those of a link's target). Not
        guaranteed: durability of parent directories it created (only the final
        directory is fsynced), nor of the rename in a directory the caller may write
        but not read; a special file swapped in for the name after it was looked at
        is replaced (by rename, never opened).

        Raises:
            TypeError: *data* is not bytes-like.
            PathEscapeError: the path or a final link's target leaves the root
                (``ESCAPE``, ``ABSOLUTE_SYMLINK``, ``SYMLINK_LOOP``, ...).
            InvalidPathError, NotFoundError (missing parent with
            ``create_parents=False``, or of a link's target), WorkspaceError:
            ``READ_ONLY``, ``IS_A_DIRECTORY``, ``NOT_A_DIRECTORY``, ``SPECIAL_FILE``,
            ``BAD_NAME``, ``NO_SPACE``, ...
        """
        op = "write_bytes"
        payload = check_data(data)
        root, rel, display = self._locate(path, op, write=True)
        self._replace(
            root,
            rel,
            display=display,
            op=op,
            fill=lambda fd: write_all(fd, payload),
            mode=None,
            create_parents=create_parents,
        )

    def _replace(
        self,
        root: Root,
        rel: bytes,
        *,
        display: str,
        op: str,
        fill: Callable[[int], None],
        mode: int | None,
        create_parents: bool,
    ) -> None:
        parent, name, trailing = self._final(root, rel, op, display)
        if trailing:
            raise err(op, display, WorkspaceReason.IS_A_DIRECTORY, "path ends with '/'")
        with self._mapped(root, op, display):
            pfd = self._parent_fd(root, parent, create=create_parents, op=op, display=display)
            try:
                dirfd, final, seen = self._write_target(
                    root, pfd, parent, name, op=op, display=display
                )
                try:
                    replace_atomically(dirfd, final, fill, seen, mode=mode, op=op, display=display)
                finally:
                    if dirfd != pfd:
                        os.close(dirfd)
            finally:
                os.close(pfd)

    def append_bytes(self, path: str | os.PathLike[str], data: Data) -> None:
        """Append *data* to the regular file *path* (created if missing).

        A final symlink is followed beneath the root (written through, the link kept;
        one whose target leaves the root is ``PathEscapeError``, nothing created).
        Guarantee: refuses a file whose
        inode another name shares (``HARD_LINK``) and anything not a regular file
        (``SPECIAL_FILE``: an existing one is refused before it is opened, so a device's
        driver ``open`` never runs and a FIFO never blocks) before writing a byte; a
        failed append (disk full, file-size limit) cuts off what it had appended. Not
        guaranteed: atomicity for concurrent readers (they may see a
        partial tail while it is written), nor the cut when another process appended
        to the same file meanwhile (its data is never cut; the partial tail then stays).

        Raises:
            TypeError, PathEscapeError, InvalidPathError, NotFoundError,
            WorkspaceError: ``HARD_LINK``, ``SPECIAL_FILE``, ``READ_ONLY``, ...
        """
        op = "append_bytes"
        payload = check_data(data)
        root, rel, display = self._locate(path, op, write=True)
        if rel.endswith(b"/"):
            self._final(root, rel, op, display)  # escape or NOT_A_DIRECTORY first
            raise err(op, display, WorkspaceReason.IS_A_DIRECTORY, "path ends with '/'")
        with self._mapped(root, op, display):
            self._refuse_special_before_open(root, rel, op, display)
            fd = self._open(root, rel, _APPEND, 0o666, op=op, display=display)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise err(op, display, WorkspaceReason.SPECIAL_FILE, "not a regular file")
                if st.st_nlink > 1:
                    raise err(op, display, WorkspaceReason.HARD_LINK, "inode shared by a name")
                _append_all(fd, payload, st.st_size)
            finally:
                os.close(fd)

    def _refuse_special_before_open(self, root: Root, rel: bytes, op: str, display: str) -> None:
        """If *rel* exists, refuse it unless it is a regular file — looked at through an
        ``O_PATH`` handle, so a device's driver ``open`` never runs (decision 0015). A
        missing file passes (the caller creates it); the caller still checks what it
        opens (a swap in between is refused after the open)."""
        try:
            probe = self._open(root, rel, PATH, op=op, display=display)
        except FileNotFoundError:
            return
        try:
            mode = os.fstat(probe).st_mode
        finally:
            os.close(probe)
        if stat.S_ISDIR(mode):
            raise err(op, display, WorkspaceReason.IS_A_DIRECTORY, "is a directory")
        if not stat.S_ISREG(mode):
            raise err(op, display, WorkspaceReason.SPECIAL_FILE, "not a regular file")

    def copy(
        self,
        src: str | os.PathLike[str],
        dst: str | os.PathLike[str],
        *,
        create_parents: bool = True,
    ) -> None:
        """Copy the regular file *src* (any root) to *dst* atomically (as :meth:`write_bytes`).

        The new file takes the permission bits of a replaced *dst*, else those of *src*
        under the umask (setuid/setgid dropped). Guarantee: as :meth:`read_bytes` for *src* and
        :meth:`write_bytes` for *dst* (a final symlink at *dst* is written through
        beneath the root, one leading outside refused); an error names the side at
        fault.
        """
        op = "copy"
        sroot, srel, sdisplay = self._locate(src, op)
        droot, drel, ddisplay = self._locate(dst, op, write=True)
        with self._mapped(sroot, op, sdisplay):
            sfd, _ = self._open_regular(sroot, srel, op, sdisplay)
        try:
            mode = stat.S_IMODE(os.fstat(sfd).st_mode) & 0o777
            self._replace(
                droot,
                drel,
                display=ddisplay,
                op=op,
                fill=lambda fd: self._copy_fd(sfd, fd, sroot, op, sdisplay),
                mode=mode,
                create_parents=create_parents,
            )
        finally:
            os.close(sfd)

    def _copy_fd(self, src: int, dst: int, sroot: Root, op: str, sdisplay: str) -> None:
        """Copy *src* to *dst* to the end; an error reading *src* names *sdisplay*."""
        while True:
            with self._mapped(sroot, op, sdisplay):
                chunk = os.read(src, _COPY_CHUNK)
            if not chunk:
                return
            write_all(dst, chunk)

    def mkdir(
        self, path: str | os.PathLike[str], *, parents: bool = True, exist_ok: bool = True
    ) -> None:
        """Create the directory *path* beneath its root (and missing parents if asked).

        With ``exist_ok`` an existing directory (a symlink to one beneath the root
        included) is success; anything else at that name is ``EXISTS``.

        Raises:
            PathEscapeError, InvalidPathError, NotFoundError (missing parent with
            ``parents=False``), WorkspaceError: ``EXISTS``, ``READ_ONLY``, ...
        """
        op = "mkdir"
        root, rel, display = self._locate(path, op, write=True)
        with self._mapped(root, op, display):
            parent, name, _ = split_parent(rel)
            if name in (b".", b".."):
                if self._probe_dir(root, rel, op, display) and exist_ok:
                    return
                raise err(op, display, WorkspaceReason.EXISTS, "exists")
            self._final(root, rel, op, display)  # "link/": the link must resolve beneath
            pfd = self._parent_fd(root, parent, create=parents, op=op, display=display)
            try:
                os.mkdir(name, 0o777, dir_fd=pfd)
            except FileExistsError:
                if not (exist_ok and self._probe_dir(root, rel, op, display)):
                    raise
            finally:
                os.close(pfd)

    def _probe_dir(self, root: Root, rel: bytes, op: str, display: str) -> bool:
        try:
            fd = self._open(root, rel, DIR, op=op, display=display)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ENOENT):
                return False
            raise
        os.close(fd)
        return True

    def remove(self, path: str | os.PathLike[str], *, recursive: bool = False) -> None:
        """Remove the file, symlink or (empty, or with *recursive* any) directory *path*.

        A final symlink is removed itself, never followed. Guarantee: a recursive
        removal walks by directory fd and never enters a symlink, even one swapped in
        for a directory mid-walk; nothing outside the root is touched.

        Raises:
            PathEscapeError, InvalidPathError, NotFoundError,
            WorkspaceError: ``NOT_EMPTY``, ``BAD_NAME`` (``.``, ``..``, the root),
            ``READ_ONLY``, ...
        """
        op = "remove"
        root, rel, display = self._locate(path, op, write=True)
        parent, name, trailing = self._final(root, rel, op, display)
        with self._mapped(root, op, display):
            pfd = self._open(root, parent, DIR, op=op, display=display)
            try:
                if trailing and not stat.S_ISDIR(
                    os.stat(name, dir_fd=pfd, follow_symlinks=False).st_mode
                ):
                    raise err(op, display, WorkspaceReason.NOT_A_DIRECTORY, "not a directory")
                try:
                    os.unlink(name, dir_fd=pfd)
                except OSError as exc:
                    if exc.errno not in (errno.EISDIR, errno.EPERM):
                        raise
                    if recursive:
                        remove_tree(pfd, name, op=op, display=display)
                    else:
                        os.rmdir(name, dir_fd=pfd)
            finally:
                os.close(pfd)

    def rename(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        """Rename *src* to *dst* within one root (``renameat``; *dst* is replaced).

        Neither final component is followed. Guarantee: both names resolve beneath the
        same writable root. An error names the side at fault: a missing *src*, or a
        destination that is missing its parent, escapes, or cannot be replaced
        (``IS_A_DIRECTORY``, ``NOT_A_DIRECTORY``, ``NOT_EMPTY``) names *dst*.

        Raises:
            PathEscapeError, InvalidPathError, NotFoundError,
            WorkspaceError: ``CROSS_ROOT``, ``NOT_EMPTY``, ``BAD_NAME``, ``READ_ONLY``.
        """
        op = "rename"
        sroot, srel, sdisplay = self._locate(src, op, write=True)
        droot, drel, ddisplay = self._locate(dst, op, write=True)
        if sroot is not droot:
            raise err(op, ddisplay, WorkspaceReason.CROSS_ROOT, "src and dst in different roots")
        sparent, sname, strailing = self._final(sroot, srel, op, sdisplay)
        dparent, dname, dtrailing = self._final(droot, drel, op, ddisplay)
        with self._mapped(sroot, op, sdisplay):
            sfd = self._open(sroot, sparent, DIR, op=op, display=sdisplay)
        try:
            with self._mapped(sroot, op, sdisplay):
                if (strailing or dtrailing) and not stat.S_ISDIR(
                    os.stat(sname, dir_fd=sfd, follow_symlinks=False).st_mode
                ):
                    raise err(op, sdisplay, WorkspaceReason.NOT_A_DIRECTORY, "not a directory")
            with self._mapped(droot, op, ddisplay):
                dfd = self._open(droot, dparent, DIR, op=op, display=ddisplay)
            try:
                os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            except OSError as exc:
                at = ddisplay if exc.errno in _DST_ERRNOS else sdisplay
                raise self._os_error(exc, sroot, op, at) from exc
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)

    def chmod(self, path: str | os.PathLike[str], mode: int) -> None:
        """Set the permission bits of *path* (a final symlink followed beneath the root).

        Guarantee: the inode changed is the one resolved beneath the root (changed
        through its fd's ``/proc/self/fd`` entry, never by re-resolving the path), and
        never one that another name shares (``HARD_LINK``: the other name may be
        outside). setuid/setgid bits are refused.

        Raises:
            TypeError, ValueError: *mode* not an int within ``0o1777``.
            PathEscapeError, InvalidPathError, NotFoundError,
            WorkspaceError: ``READ_ONLY``, ``UNSUPPORTED`` without ``/proc``.
        """
        op = "chmod"
        if not isinstance(mode, int) or isinstance(mode, bool):
            raise TypeError(f"mode must be int, not {type(mode).__name__}")
        if not 0 <= mode <= 0o1777:
            raise ValueError("mode must be within 0o1777 (no setuid/setgid)")
        root, rel, display = self._locate(path, op, write=True)
        with self._mapped(root, op, display):
            fd = self._open(root, rel, PATH, op=op, display=display)
            try:
                st = os.fstat(fd)
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    raise err(op, display, WorkspaceReason.HARD_LINK, "inode shared by a name")
                os.chmod(f"/proc/self/fd/{fd}", mode)
            except FileNotFoundError:
                raise err(op, display, WorkspaceReason.UNSUPPORTED, "/proc not mounted") from None
            finally:
                os.close(fd)
