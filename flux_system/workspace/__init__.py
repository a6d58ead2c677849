"""Path confinement: a :class:`Workspace` and the values it returns.

Every operation resolves beneath an open directory fd of a root (``openat2`` with
``RESOLVE_BENEATH`` where the kernel has it, a per-component ``O_NOFOLLOW`` walk
elsewhere), so no ``..``, symlink or magic link takes it outside, even transiently.
The modules here are private; the public names are ``__all__`` and are re-exported by
:mod:`flux_system`. This subpackage imports only :mod:`flux_system._exceptions`.
"""

from __future__ import annotations

from flux_system.workspace._fileinfo import FileInfo, FileKind
from flux_system.workspace._roots import NamedRoot
from flux_system.workspace._workspace import Workspace

__all__ = ["FileInfo", "FileKind", "NamedRoot", "Workspace"]
