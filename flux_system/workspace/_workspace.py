"""The :class:`Workspace`: file operations confined beneath directory fds."""

from __future__ import annotations

import codecs
import errno
import io
import os
import pathlib
import typing

from flux_system._exceptions import WorkspaceReason, workspace_error_from_os
from flux_system.workspace._base import DIR, LISTABLE, PATH, err
from flux_system.workspace._fileinfo import FileInfo
from flux_system.workspace._mutate import Mutations
from flux_system.workspace._pathname import as_text
from flux_system.workspace._resolve import link_free
from flux_system.workspace._walk import list_names, walk_tree

__all__ = ["Workspace"]

_MAX_LIST_ENTRIES = 1_000_000  # names list_dir returns before TOO_MANY_ENTRIES
_DEFAULT_WALK_ENTRIES = 100_000
_READ_CHUNK = 1 << 16
_DIR_FD_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _check_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise TypeError(f"limit must be int or None, not {type(limit).__name__}")
    if limit < 0:
        raise ValueError("limit must be >= 0")
    return limit


def _read_fd(fd: int, size: int, limit: int | None, op: str, display: str) -> bytes:
    want = size + 1 if size > 0 else _READ_CHUNK
    if limit is not None:
        if size > limit:
            raise err(op, display, WorkspaceReason.TOO_LARGE, f"larger than {limit} bytes")
        want = min(want, limit + 1)
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, want)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if limit is not None:
            if total > limit:
                raise err(op, display, WorkspaceReason.TOO_LARGE, f"larger than {limit} bytes")
            want = min(_READ_CHUNK, limit + 1 - total)
        else:
            want = _READ_CHUNK
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)


class _ConfinedFile(io.FileIO):
    """A read-only file whose OS errors are translated (see :meth:`Workspace.open_read`)."""

    _flux_display = ""

    def readinto(self, buffer: typing.Any) -> int | None:
        try:
            return super().readinto(buffer)
        except OSError as exc:
            raise workspace_error_from_os(exc, op="read", path=self._flux_display) from exc

    def readall(self) -> bytes:
        try:
            return super().readall()
        except OSError as exc:
            raise workspace_error_from_os(exc, op="read", path=self._flux_display) from exc


@typing.final
class Workspace(Mutations):
    """File operations confined beneath a root directory (and optional extra roots).

    Every path is resolved relative to an open directory fd of its root, with
    ``openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS)`` (``resolver="openat2"``) or a
    per-component ``O_NOFOLLOW`` walk with identical semantics (``resolver="walk"``);
    ``"auto"`` picks openat2 when the kernel has it. Operations act on the fd that
    resolution returned, never on a re-resolved path string.

    Paths: ``"rel/path"`` is relative to the main root (writable); ``"@name/rel"``
    addresses a named root (read-only unless ``NamedRoot(path, writable=True)``); an
    absolute path is accepted only if it lies lexically inside a root (the main root,
    a named root or a read root) and is then relative to the most specific one. Read
    roots are reachable only that way and only for reading. A path is ``str`` or
    ``os.PathLike[str]`` (bytes and anything else: ``TypeError`` naming the argument);
    a file literally named ``@x`` is ``"./@x"``. A final symlink is followed (beneath
    the root) by reads, every write (:meth:`write_bytes`, :meth:`copy`'s destination,
    :meth:`append_bytes`: written *through*, the link kept), :meth:`stat`,
    :meth:`chmod`, :meth:`exists`; it is acted on itself by :meth:`remove` and
    :meth:`rename`. A trailing ``/`` asks for a directory and follows a final symlink,
    as in POSIX.

    Guarantee: no operation reads, creates, changes or deletes anything outside its
    root: no ``..`` (even transiently), no symlink (absolute, relative, dangling,
    chained), no magic link takes resolution outside. No write modifies an inode that
    another name shares (``st_nlink > 1``). Reads of FIFOs, sockets and devices are
    refused before anything opens them (a device's driver ``open`` never runs, a FIFO
    never blocks) — unless a party able to create device nodes swaps one in during the
    lookup. Bad input gets a typed error before any syscall.

    ``unconfined=True`` is the one explicit hatch: paths then resolve with ordinary
    host semantics (absolute paths anywhere, ``..`` and symlinks followed; relative
    paths still start at the root) and none of the confinement guarantees above hold.
    Validation of input, atomic writes and the hard-link and special-file rules still
    apply. It is never implied by any other argument.

    Threads: every method may be called from several threads at once; the only
    shared state is the root fds, which are never closed while the object lives —
    :meth:`close` atomically replaces them (``dup2``) by an fd that fails every lookup,
    so an fd number can never be reused under a concurrent operation. Fork: all fds
    are ``O_CLOEXEC``; a forked child may keep using its copy (no locks are held), and
    closing it in the child does not affect the parent.

    Not guaranteed: mount points and bind mounts inside a root are crossed; with
    ``resolver="walk"`` a directory that a third party moves *out of* the root while a
    lookup is inside it (this needs write access outside the root) is not detected.

    Args:
        root: the main root directory (trusted configuration).
        read_roots: extra directories, readable only, addressed by absolute paths.
        named_roots: ``{"name": path | NamedRoot}``, addressed as ``"@name/rel"``.
        unconfined: drop path confinement (see above).
        resolver: ``"auto"``, ``"openat2"`` or ``"walk"``.

    Raises:
        TypeError, ValueError: bad arguments.
        WorkspaceError: a root cannot be opened; ``UNSUPPORTED`` when
            ``resolver="openat2"`` and the kernel lacks it.
    """

    def read_bytes(self, path: str | os.PathLike[str], *, limit: int | None = None) -> bytes:
        """Read the whole regular file *path* beneath its root.

        Guarantee: the file read lies beneath the root (main, named or read root); a
        FIFO, socket or device is refused before it is opened. With *limit*, at most
        ``limit + 1`` bytes are ever read. Not guaranteed: a consistent snapshot if
        another party writes the file meanwhile.

        Raises:
            PathEscapeError, InvalidPathError, NotFoundError,
            WorkspaceError: ``IS_A_DIRECTORY``, ``SPECIAL_FILE``, ``TOO_LARGE``, ...
        """
        op = "read_bytes"
        root, rel, display = self._locate(path, op)
        if limit is not None:
            limit = _check_limit(limit)
        try:
            fd, size = self._open_regular(root, rel, op, display)
            try:
                return _read_fd(fd, size, limit, op, display)
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._os_error(exc, root, op, display) from exc

    def read_text(
        self,
        path: str | os.PathLike[str],
        *,
        limit: int | None = None,
        encoding: str = "utf-8",
        errors: str = "strict",
    ) -> str:
        """:meth:`read_bytes`, decoded (*limit* counts bytes). Same guarantees and errors.

        Raises:
            LookupError: unknown *encoding* or *errors* handler (before any syscall).
            WorkspaceError: ``DECODE`` when the bytes are not valid *encoding* (with
                ``errors="strict"``; the ``UnicodeDecodeError`` is the ``__cause__``).
        """
        codecs.lookup(encoding)
        codecs.lookup_error(errors)
        data = self.read_bytes(path, limit=limit)
        try:
            return data.decode(encoding, errors)
        except UnicodeDecodeError as exc:
            display = path if type(path) is str else as_text(path, "path")
            raise err("read_text", display, WorkspaceReason.DECODE, "not valid text") from exc

    def open_read(self, path: str | os.PathLike[str]) -> io.BufferedReader:
        """Open the regular file *path* for streaming binary reads.

        Guarantee: as :meth:`read_bytes`; the returned object reads the inode that was
        resolved, whatever happens to the name afterwards. Its OS errors are translated
        to :class:`WorkspaceError`. The caller closes it (it is a context manager).
        """
        op = "open_read"
        root, rel, display = self._locate(path, op)
        with self._mapped(root, op, display):
            fd, _ = self._open_regular(root, rel, op, display)
        raw = _ConfinedFile(fd, "rb", closefd=True)
        raw._flux_display = display
        return io.BufferedReader(raw)

    def _open_dir_fd(self, path: str = ".") -> int:
        """Private hook (processes): an ``O_RDONLY|O_DIRECTORY|O_CLOEXEC`` fd of *path*.

        Resolved beneath its root like every other operation; the caller closes it.
        """
        op = "open_dir"
        if path == ".":  # the primary root itself (every run's default cwd): no name to
            root = self._main  # resolve, so a plain openat of "." relative to it
            with self._mapped(root, op, path):
                if root.fd < 0:
                    raise err(op, path, WorkspaceReason.CLOSED, "workspace is closed")
                return os.open(".", _DIR_FD_FLAGS, dir_fd=root.fd)
        root, rel, display = self._locate(path, op)
        with self._mapped(root, op, display):
            return self._open(root, rel, os.O_RDONLY | os.O_DIRECTORY, op=op, display=display)

    # -- queries ----------------------------------------------------------------------

    def stat(self, path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> FileInfo:
        """Metadata of *path* beneath its root (a final symlink followed beneath, or not).

        Raises:
            PathEscapeError, InvalidPathError, NotFoundError, WorkspaceError.
        """
        op = "stat"
        root, rel, display = self._locate(path, op)
        try:
            fd = self._open(root, rel, PATH, follow=follow_symlinks, op=op, display=display)
            try:
                return FileInfo.from_stat(os.fstat(fd))
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._os_error(exc, root, op, display) from exc

    def _probe(self, path: object, op: str, flags: int) -> bool:
        root, rel, display = self._locate(path, op)
        try:
            fd = self._open(root, rel, flags, op=op, display=display)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR) and root.fd >= 0:
                return False
            raise self._os_error(exc, root, op, display) from exc
        os.close(fd)
        return True

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether *path* exists beneath its root (a final symlink followed beneath).

        A dangling symlink does not exist. A path that would leave the root is not
        ``False`` but an error: the caller learns it asked for an escape.

        Raises:
            PathEscapeError, InvalidPathError, WorkspaceError (not NOT_FOUND).
        """
        return self._probe(path, "exists", PATH)

    def is_dir(self, path: str | os.PathLike[str]) -> bool:
        """Whether *path* is a directory beneath its root. Errors as :meth:`exists`."""
        return self._probe(path, "is_dir", DIR)

    def list_dir(self, path: str | os.PathLike[str] = ".") -> list[str]:
        """Sorted names in the directory *path* beneath its root (no ``.``/``..``).

        These are names, not paths: join them to *path* to address an entry. A name
        beginning with ``@`` in the main root (``@data``) must be passed back as
        ``./@data`` — a bare ``@data/...`` addresses the named root ``data``
        (:meth:`walk` returns such paths already spelled that way).

        Raises:
            WorkspaceError: ``NOT_A_DIRECTORY``, ``TOO_MANY_ENTRIES`` past 1,000,000, ...
        """
        op = "list_dir"
        root, rel, display = self._locate(path, op)
        with self._mapped(root, op, display):
            fd = self._open(root, rel, LISTABLE, op=op, display=display)
            try:
                return list_names(fd, bound=_MAX_LIST_ENTRIES, op=op, display=display)
            finally:
                os.close(fd)

    def walk(
        self, path: str | os.PathLike[str] = ".", *, max_entries: int = _DEFAULT_WALK_ENTRIES
    ) -> list[str]:
        """Every entry beneath the directory *path*, pre-order, names sorted.

        Paths are returned joined to *path* as given (``walk("src")`` gives
        ``"src/a.py"``; ``walk(".")`` gives ``"a.py"``). Guarantee: each path means the
        same file when passed back to this workspace — under ``walk(".")`` an entry
        ``@data`` of the main root comes back as ``"./@data"`` and its contents as
        ``"./@data/..."`` (``"@data/..."`` would address the named root ``data``).
        Symlinks are listed and never followed, even one swapped in for a directory
        mid-walk. Not guaranteed: names holding control characters come back as they
        are, and the API refuses them (``CONTROL_BYTE``).

        Raises:
            WorkspaceError: ``TOO_MANY_ENTRIES`` past *max_entries* (no silent
                truncation), ``TOO_DEEP`` past 256 levels or for a path the API would
                refuse back (``PATH_MAX`` bytes or more), ``NOT_A_DIRECTORY``, ...
        """
        op = "walk"
        if not isinstance(max_entries, int) or isinstance(max_entries, bool):
            raise TypeError(f"max_entries must be int, not {type(max_entries).__name__}")
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        root, rel, display = self._locate(path, op)
        trimmed = display.rstrip("/")
        prefix = "" if trimmed in ("", ".") else trimmed + "/"
        with self._mapped(root, op, display):
            fd = self._open(root, rel, LISTABLE, op=op, display=display)
            try:
                return walk_tree(fd, prefix, max_entries=max_entries, op=op, display=display)
            finally:
                os.close(fd)

    def link_free(self, path: str | os.PathLike[str]) -> bool:
        """Whether *path* exists and is reached beneath its root through no symlink.

        Then it resolves to the name given (:meth:`resolve` would return its root's
        path joined with it, normalized): a caller deciding on where a path leads can
        skip the resolution. One ``openat2`` with ``RESOLVE_NO_SYMLINKS`` (one ``lstat``
        for a name directly in its root: the same answer). False means
        "cannot tell" (a link somewhere, a missing component, a kernel without
        ``openat2``): ask :meth:`resolve`. Like :meth:`resolve`, for policy subjects
        only: the tree may change right after.

        Raises:
            InvalidPathError, PathEscapeError (outside every root), WorkspaceError
            (``CLOSED``).
        """
        root, rel, display = self._locate(path, "link_free")
        if root.fd < 0:
            raise err("link_free", display, WorkspaceReason.CLOSED, "workspace is closed")
        return not self._unconfined and link_free(root.fd, rel)

    def resolve(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """The physical absolute path *path* resolves to beneath its root.

        For display and policy subjects only: never open the result yourself (that
        would be "check a path, then open the path"). A missing final component is
        appended to its resolved parent.

        Raises:
            PathEscapeError, InvalidPathError, NotFoundError (missing parent),
            WorkspaceError: ``UNSUPPORTED`` without ``/proc/self/fd``.
        """
        op = "resolve"
        root, rel, display = self._locate(path, op)
        with self._mapped(root, op, display):
            try:
                fd = self._open(root, rel, PATH, op=op, display=display)
                tail = b""
            except FileNotFoundError:
                parent, name, _ = self._final(root, rel, op, display)
                fd = self._open(root, parent, DIR, op=op, display=display)
                tail = name
            try:
                where = os.readlink(f"/proc/self/fd/{fd}")
            except FileNotFoundError:
                raise err(
                    op, display, WorkspaceReason.UNSUPPORTED, "/proc is not mounted"
                ) from None
            finally:
                os.close(fd)
        result = pathlib.Path(where)
        return result / os.fsdecode(tail) if tail else result
