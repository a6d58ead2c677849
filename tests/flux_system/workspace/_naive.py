"""Deliberately unsafe workspaces, used only to prove that the tests can fail.

- :class:`PlainWorkspace` joins the caller's path onto the root and calls the OS: no
  confinement at all (the escape table's "alwaysFails" control, as Go's root_test).
- :class:`NaiveWorkspace` is the common "realpath, check the prefix, then open the
  path string" resolver. Every static escape in the table is refused by it, but the
  check and the open are two lookups: a directory swapped for a symlink in between
  sends the open outside (the TOCTOU race the race tests reproduce).

Neither class is, or should ever become, part of the product.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import BinaryIO

from flux_system import ConfinementReason, FileInfo, PathEscapeError

WALK_LIMIT = 1000  # bound a walk that escaped to "/" in a control run
_ROOT_OK = frozenset({"list_dir", "walk", "stat", "exists", "is_dir", "resolve"})


class PlainWorkspace:
    """Unconfined: ``os.path.join(root, path)`` then the plain OS call."""

    def __init__(self, root: str, **_options: object) -> None:
        self.root = root

    def _path(self, path: str, op: str) -> str:
        return os.path.join(self.root, path)

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes:
        with open(self._path(path, "read_bytes"), "rb") as f:
            return f.read() if limit is None else f.read(limit)

    def read_text(self, path: str, *, limit: int | None = None) -> str:
        return self.read_bytes(path, limit=limit).decode("utf-8", "surrogateescape")

    def open_read(self, path: str) -> BinaryIO:
        return open(self._path(path, "open_read"), "rb")

    def write_bytes(self, path: str, data: bytes, *, create_parents: bool = True) -> None:
        p = self._path(path, "write_bytes")
        if create_parents:
            os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)

    def append_bytes(self, path: str, data: bytes) -> None:
        with open(self._path(path, "append_bytes"), "ab") as f:
            f.write(data)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        p = self._path(path, "mkdir")
        if parents:
            os.makedirs(p, exist_ok=exist_ok)
        else:
            os.mkdir(p)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        p = self._path(path, "remove")
        if recursive and os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.isdir(p) and not os.path.islink(p):
            os.rmdir(p)
        else:
            os.unlink(p)

    def rename(self, src: str, dst: str) -> None:
        os.rename(self._path(src, "rename"), self._path(dst, "rename"))

    def list_dir(self, path: str = ".") -> list[str]:
        return sorted(os.listdir(self._path(path, "list_dir")))

    def walk(self, path: str = ".") -> list[str]:
        top = self._path(path, "walk")
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(top):
            for n in dirnames + filenames:
                out.append(os.path.relpath(os.path.join(dirpath, n), top))
                if len(out) >= WALK_LIMIT:
                    return out
        return out

    def stat(self, path: str) -> FileInfo:
        return FileInfo.from_stat(os.stat(self._path(path, "stat")))

    def exists(self, path: str) -> bool:
        return os.path.exists(self._path(path, "exists"))

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self._path(path, "is_dir"))

    def resolve(self, path: str) -> Path:
        return Path(os.path.realpath(self._path(path, "resolve")))

    def copy(self, src: str, dst: str) -> None:
        shutil.copyfile(self._path(src, "copy"), self._path(dst, "copy"))

    def symlink(self, target: str, path: str) -> None:
        os.symlink(target, self._path(path, "symlink"))

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._path(path, "chmod"), mode)

    def close(self) -> None:
        return None


class NaiveWorkspace(PlainWorkspace):
    """``realpath`` the joined path, check it is under the root, then use the string.

    Correct for a static tree (the separator is part of the prefix check, so the
    ``ROOT-evil`` sibling is refused too); racy by construction.
    """

    def __init__(self, root: str, **options: object) -> None:
        super().__init__(root, **options)
        self.real_root = os.path.realpath(root)

    def _path(self, path: str, op: str) -> str:
        real = os.path.realpath(os.path.join(self.root, path))
        is_root = real == self.real_root and op in _ROOT_OK
        if not is_root and not real.startswith(self.real_root + os.sep):
            raise PathEscapeError(
                f"{op}: outside the root", op=op, path=path, reason=ConfinementReason.ESCAPE
            )
        return real


class CheckThenJoinWorkspace(NaiveWorkspace):
    """``realpath`` check as :class:`NaiveWorkspace`, then use the *caller's* joined
    path, so the kernel re-resolves it, final symlink included: the common "validate,
    then open what was asked for" pattern. A final link exchanged between the check and
    the open sends a write outside."""

    def _path(self, path: str, op: str) -> str:
        super()._path(path, op)
        return os.path.join(self.root, path)
