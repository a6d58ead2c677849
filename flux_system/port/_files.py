"""The workspace-files capability: what a substrate offers for files beneath its root."""

from __future__ import annotations

import typing

from flux_system.workspace import FileInfo

__all__ = ["FilesPort"]


@typing.runtime_checkable
class FilesPort(typing.Protocol):
    """File operations beneath one workspace, relative names only.

    :class:`flux_system.Workspace` satisfies this structurally; so does a remote
    client. Guarantee (of every implementation that claims it): the confinement of
    DESIGN §2.2 holds on the side that performs the operation. Not guaranteed: that a
    remote side's confinement is what it claims — the client reports what it was told.

    Raises (every method): the :class:`~flux_system.WorkspaceError` and
    :class:`~flux_system.ConfinementError` families for refusals;
    :class:`~flux_system.UnservedError` where the substrate does not serve the
    operation (never a fabricated answer: ``exists`` does not default to ``False``).
    """

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes: ...

    def read_text(self, path: str, *, limit: int | None = None) -> str: ...

    def write_bytes(self, path: str, data: bytes, *, create_parents: bool = True) -> None: ...

    def append_bytes(self, path: str, data: bytes) -> None: ...

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None: ...

    def remove(self, path: str, *, recursive: bool = False) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def list_dir(self, path: str = ".") -> list[str]: ...

    def walk(self, path: str = ".", *, max_entries: int = ...) -> list[str]: ...

    def stat(self, path: str) -> FileInfo: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...
