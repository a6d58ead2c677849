"""The core of :class:`~flux_system.Workspace`: roots, path attribution, resolution.

Kept apart from the operations (:mod:`._workspace`, :mod:`._mutate`,
:mod:`._link`) so each module stays small. Nothing here is public.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import stat
import threading
import typing
import weakref
from collections.abc import Iterable, Mapping
from typing import Self

from flux_system._exceptions import (
    WorkspaceError,
    WorkspaceReason,
    map_os_errors,
    workspace_error_from_os,
)
from flux_system.workspace._pathname import as_text, encode_checked, split_parent
from flux_system.workspace._regular import REGULAR_OPENERS
from flux_system.workspace._resolve import OPENERS, RESOLVERS, openat2_available
from flux_system.workspace._roots import (
    NamedRoot,
    Root,
    open_root,
    outside_roots,
    remainder,
    split_abs,
    unknown_root,
)

__all__ = ["WorkspaceBase", "check_data", "err"]

_MAX_PARENT_DEPTH = 2048  # PATH_MAX / 2: the deepest a valid path can nest

READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
PATH = os.O_PATH
DIR = os.O_PATH | os.O_DIRECTORY
LISTABLE = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK
Data = bytes | bytearray | memoryview
_S_ISREG = stat.S_ISREG
_S_ISDIR = stat.S_ISDIR


_DEAD: list[int] = []  # one process-wide fd that fails every lookup (see _dead_fd)


# Every live Workspace: a child forked while another thread was inside close() inherits
# that close lock held, with no thread to release it; the fork hook gives each a new one.
_LIVE: weakref.WeakSet[WorkspaceBase] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for ws in list(_LIVE):
        ws._close_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _dead_fd() -> int:
    """The read end of a pipe whose write end is closed: ``openat`` relative to it fails.

    Taken once per process, when the first Workspace is built, so that :meth:`close`
    never needs a new fd: it ``dup2``s this one over each root fd, which cannot fail
    for want of a free fd number (decision 0011; 0014 for fd exhaustion).
    """
    if not _DEAD:
        with map_os_errors("Workspace"):
            dead, writer = os.pipe2(os.O_CLOEXEC)
        os.close(writer)
        _DEAD.append(dead)
        if _DEAD[0] != dead:  # another thread got there first
            os.close(dead)
    return _DEAD[0]


def err(op: str, display: str, reason: WorkspaceReason, what: str) -> WorkspaceError:
    return WorkspaceError(f"{op}: {what}", op=op, path=display, reason=reason)


def check_data(data: object) -> Data:
    if isinstance(data, bytes | bytearray | memoryview):
        return data
    raise TypeError(f"data must be bytes, bytearray or memoryview, not {type(data).__name__}")


@typing.final
class _Mapped:
    """``with ws._mapped(root, op, display):`` — ``OSError`` inside becomes a WorkspaceError."""

    __slots__ = ("display", "op", "root", "ws")

    def __init__(self, ws: WorkspaceBase, root: Root, op: str, display: str) -> None:
        self.ws = ws
        self.root = root
        self.op = op
        self.display = display

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, OSError):
            raise self.ws._os_error(exc, self.root, self.op, self.display) from exc


class WorkspaceBase:
    """Roots, attribution of paths to roots, and beneath-resolution (see ``Workspace``)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        read_roots: Iterable[str | os.PathLike[str]] = (),
        named_roots: Mapping[str, str | os.PathLike[str] | NamedRoot] | None = None,
        unconfined: bool = False,
        resolver: str = "auto",
    ) -> None:
        self._roots: list[Root] = []
        self._retired: list[int] = []
        self._close_lock = threading.Lock()  # one close() at a time: each fd retired once
        _LIVE.add(self)  # its lock is replaced in a forked child (decision 0011)
        self._dead = _dead_fd()
        if resolver not in ("auto", *RESOLVERS):
            raise ValueError(f"resolver must be 'auto', 'openat2' or 'walk', not {resolver!r}")
        if not isinstance(unconfined, bool):
            raise TypeError(f"unconfined must be bool, not {type(unconfined).__name__}")
        if isinstance(read_roots, str | bytes | os.PathLike):
            raise TypeError("read_roots must be an iterable of paths, not a single path")
        if named_roots is not None and not isinstance(named_roots, Mapping):
            raise TypeError("named_roots must be a mapping of name to path")
        has_openat2 = openat2_available()
        if resolver == "openat2" and not has_openat2:
            raise WorkspaceError(
                "openat2 is not available on this kernel",
                op="Workspace",
                path=None,
                reason=WorkspaceReason.UNSUPPORTED,
            )
        self._resolver = resolver if resolver != "auto" else ("openat2" if has_openat2 else "walk")
        self._opener = OPENERS["unconfined" if unconfined else self._resolver]
        self._regular_opener = REGULAR_OPENERS["unconfined" if unconfined else self._resolver]
        self._unconfined = unconfined
        try:
            self._main = self._add(open_root(root, argname="root", label="", writable=True))
            self._named: dict[bytes, Root] = {}
            for name, value in (named_roots or {}).items():
                key = self._check_name(name)
                target, writable = (
                    (value.path, value.writable) if isinstance(value, NamedRoot) else (value, False)
                )
                handle = open_root(
                    target, argname="named_roots", label="@" + name, writable=writable
                )
                self._named[key] = self._add(handle)
            for value in read_roots:
                self._add(open_root(value, argname="read_roots", label="", writable=False))
        except BaseException:
            self.close()
            raise
        self._by_parts = sorted(
            ((parts, handle) for handle in self._roots for parts in handle.parts),
            key=lambda item: len(item[0]),
            reverse=True,
        )

    def _add(self, handle: Root) -> Root:
        self._roots.append(handle)
        return handle

    @staticmethod
    def _check_name(name: object) -> bytes:
        if not isinstance(name, str) or not name or "/" in name or not name.isprintable():
            raise ValueError(
                f"named root names must be non-empty printable str without '/': {name!r}"
            )
        return os.fsencode(name)

    # -- properties and lifetime -------------------------------------------------------

    @property
    def root(self) -> pathlib.Path:
        """The main root directory as given (made absolute)."""
        return self._main.path

    @property
    def resolver(self) -> str:
        """The active resolver: ``"openat2"`` or ``"walk"``."""
        return self._resolver

    @property
    def unconfined(self) -> bool:
        """Whether this workspace was created with the ``unconfined=True`` hatch."""
        return self._unconfined

    def close(self) -> None:
        """Release the roots; every later call raises ``WorkspaceError(CLOSED)``. Idempotent."""
        with self._close_lock:  # two threads must not both read, then retire, one fd
            for handle in self._roots:
                fd = handle.fd
                if fd < 0:
                    continue
                handle.fd = -1
                os.dup2(self._dead, fd, inheritable=False)  # number stays taken: never reused
                self._retired.append(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
            for fd in self._retired:
                os.close(fd)
            self._retired.clear()
        except Exception:  # noqa: S110 - interpreter shutdown: nothing sensible to do
            pass

    def __repr__(self) -> str:
        return f"Workspace({str(self._main.path)!r}, resolver={self._resolver!r})"

    # -- path attribution and resolution ----------------------------------------------

    def _locate(self, path: object, op: str, *, write: bool = False) -> tuple[Root, bytes, str]:
        text = path if type(path) is str else as_text(path, "path")
        raw = encode_checked(text, op=op, display=text)
        first = raw[0]
        root = self._main
        if first == 0x2F:  # "/"
            root, raw = self._absolute(raw, op, text)
        elif first == 0x40:  # "@"
            name, _, rest = raw[1:].partition(b"/")
            found = self._named.get(name)
            if found is None:
                raise unknown_root(op, text)
            root, raw = found, (rest.lstrip(b"/") or b".")
        if write and not root.writable:
            raise err(op, text, WorkspaceReason.READ_ONLY, "root is read-only")
        return root, raw, text

    def _absolute(self, raw: bytes, op: str, text: str) -> tuple[Root, bytes]:
        parts = split_abs(raw)
        for prefix, handle in self._by_parts:
            if parts[: len(prefix)] == prefix:
                return handle, remainder(raw, len(prefix))
        if self._unconfined:
            return self._main, raw
        raise outside_roots(op, text)

    def _open(
        self,
        root: Root,
        rel: bytes,
        flags: int,
        mode: int = 0,
        *,
        follow: bool = True,
        op: str,
        display: str,
    ) -> int:
        fd = root.fd
        if fd < 0:
            raise err(op, display, WorkspaceReason.CLOSED, "workspace is closed")
        return self._opener(fd, rel, flags, mode, follow=follow, op=op, display=display)

    def _os_error(self, exc: OSError, root: Root, op: str, display: str) -> WorkspaceError:
        if root.fd < 0:
            return err(op, display, WorkspaceReason.CLOSED, "workspace is closed")
        return workspace_error_from_os(exc, op=op, path=display)

    def _mapped(self, root: Root, op: str, display: str) -> _Mapped:
        """A context manager translating an ``OSError`` raised inside it (see :meth:`_os_error`)."""
        return _Mapped(self, root, op, display)

    def _final(self, root: Root, rel: bytes, op: str, display: str) -> tuple[bytes, bytes, bool]:
        """Split *rel* into (parent, final name, trailing slash) for name-level operations.

        A trailing slash asks for the directory the name resolves to, following a final
        symlink: that resolution is checked here (beneath the root) so ``link/`` with
        ``link`` pointing outside is an escape, not an operation on ``link`` itself.
        ``trailing`` is then True only when the name resolves to a directory or does
        not exist.
        """
        parent, name, trailing = split_parent(rel)
        dots = name in (b".", b"..")
        if trailing or dots:
            try:
                os.close(self._open(root, rel, DIR, op=op, display=display))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise self._os_error(exc, root, op, display) from exc
        if dots:
            raise err(op, display, WorkspaceReason.BAD_NAME, "no final name to act on")
        return parent, name, trailing

    def _parent_fd(self, root: Root, parent: bytes, *, create: bool, op: str, display: str) -> int:
        """Open the parent directory beneath *root*, creating missing levels if asked.

        The deepest existing ancestor is found by bisection over the components (a
        prefix resolves only if every shorter prefix does): O(log n) lookups instead
        of n, which matters to the walk resolver (one ``openat`` per component). The
        missing levels are then created one by one relative to that fd and opened
        ``O_NOFOLLOW``: a symlink swapped in meanwhile fails the open, never followed.
        """
        try:
            return self._open(root, parent, DIR, op=op, display=display)
        except FileNotFoundError:
            if not create:
                raise
        parts = [part for part in parent.split(b"/") if part not in (b"", b".")]
        if len(parts) > _MAX_PARENT_DEPTH:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        # An absolute parent (only the unconfined hatch passes one) starts at "/", never
        # at the root: "/a/b" must not become "a/b" beneath the root.
        lead = b"/" if parent.startswith(b"/") else b""
        found, missing = 0, len(parts)  # parts[:found] resolves, parts[:missing] does not
        fd = self._open(root, lead or b".", DIR, op=op, display=display)
        try:
            while missing - found > 1:
                mid = (found + missing) // 2
                try:
                    nxt = self._open(
                        root, lead + b"/".join(parts[:mid]), DIR, op=op, display=display
                    )
                except FileNotFoundError:
                    missing = mid
                    continue
                os.close(fd)
                fd, found = nxt, mid
            if b".." in parts[found:]:  # never walk up out of a level it would create
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
            for name in parts[found:]:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
                nxt = os.open(name, DIR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- reads ------------------------------------------------------------------------

    def _open_regular(self, root: Root, rel: bytes, op: str, display: str) -> tuple[int, int]:
        """Open the regular file *rel* for reading: (fd, size). It is checked before it
        is opened (see ``_regular.py``): a device's driver ``open`` never runs
        (``/dev/watchdog`` arms on open), a FIFO never blocks. A directory raises
        ``EISDIR``, a FIFO, socket or device ``ENXIO`` (for the caller to map)."""
        rootfd = root.fd
        if rootfd < 0:
            raise err(op, display, WorkspaceReason.CLOSED, "workspace is closed")
        fd, st = self._regular_opener(rootfd, rel, READ, op=op, display=display)
        return fd, st.st_size
