"""Where a workspace path leads: the policy decides on the name given *and* on this.

A symlink is a second name for its target: ``notes.txt -> .env`` read as ``notes.txt``
reads ``.env``. The executor therefore asks the substrate where each path an operation
names resolves to, beneath the workspace root, and holds the operation to the policy
on that name too (``workspace/<resolved>``); both must be allowed. A directory link in
the middle (``link -> secrets``, ``read link/key``) resolves to ``secrets/key``.

A path the substrate says is reached through no link at all (``Workspace.link_free``:
one ``openat2`` with ``RESOLVE_NO_SYMLINKS``) leads to its own name and is not
resolved further. Otherwise, the substrate's confined resolution (``Workspace.resolve``: one
``openat2(RESOLVE_BENEATH)`` — or the ``O_NOFOLLOW`` walk — then the kernel's name of
the fd it opened), relative to the resolution of the path's own root. Nothing is
resolved by string manipulation on this side. Per path kind (:data:`Follow`):

- ``"target"`` (reads, ``write``, ``append``, ``edit``, ``patch``, ``file_stat``): the
  final symlink is followed, as the operation follows it. A path whose parent is
  missing (``write new/dir/f``) resolves its deepest existing ancestor and appends the
  rest; a *dangling* final symlink on a writing path is refused (its target cannot be
  decided on before the write would create it).
- ``"name"`` (``remove``): the parent is resolved and the final name kept (remove acts
  on a link itself, not on what it points to).

Guarantee: inside :meth:`Executor.dispatch`, no file operation runs unless the policy
allows it on the name given and on the name every given path resolves to at decision
time; the walking operations hold each file they look at to the same two checks.
Each root's own resolution is kept by the executor; a path resolving outside the kept
one resolves the root again before it is refused.
Not guaranteed: race-freedom against a *concurrent* writer of the workspace between
the decision and the operation (docs/decisions/0106-symlinks-decided-on-their-target.md:
the agent has none — no process it starts outlives its ``proc.run`` — but a third party
with write access to the workspace could swap a link in between).

Raises: :class:`EnvelopeError` (``OPERATION_FAILED``) for a substrate that cannot
resolve paths or a dangling link on a writing path; the substrate's own typed errors
(an escaping link is a ``PathEscapeError``).
"""

from __future__ import annotations

import os
import posixpath
import typing

from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_system import NotFoundError
from flux_system.workspace import FileKind

__all__ = ["Follow", "resolved_resource"]

Follow = typing.Literal["target", "name"]


def _fail(op: str, path: str, why: str) -> EnvelopeError:
    return EnvelopeError(why, op=op, reason=EnvelopeReason.OPERATION_FAILED, target=path[:200])


def _root_of(path: str) -> str:
    """The root a path is relative to: ``@name`` for ``@name/...``, else ``.``."""
    return path.split("/", 1)[0] if path.startswith("@") else "."


def _resolve(files: typing.Any, path: str) -> str:
    where: str = os.fspath(files.resolve(path))
    return where


def _existing(files: typing.Any, path: str) -> str:
    """The resolution of *path*, or of its deepest existing ancestor with the missing
    rest appended (a write creates missing parents)."""
    try:
        return _resolve(files, path)
    except NotFoundError:
        pass
    head, rest = path.rstrip("/"), list[str]()
    while True:
        head, tail = posixpath.split(head)
        rest.insert(0, tail)
        try:
            base = _resolve(files, head or ".")
        except NotFoundError:
            if not head:
                raise
            continue
        return posixpath.normpath(posixpath.join(base, *rest))


def _dangling(files: typing.Any, path: str) -> bool:
    try:
        if files.stat(path, follow_symlinks=False).kind is not FileKind.SYMLINK:
            return False
    except NotFoundError:
        return False
    return not files.exists(path)


def resolved_resource(
    files: typing.Any, op: str, path: str, follow: Follow, *, writes: bool, roots: dict[str, str]
) -> str:
    """The policy resource (``workspace/<name>``) of where *path* leads (module
    docstring). *roots* keeps each root's resolution (an executor keeps it across
    calls): a result outside the kept one resolves the root again before refusing, so
    a root moved meanwhile is followed, never decided on by a stale name."""
    if not callable(getattr(files, "resolve", None)):
        raise _fail(op, path, "the substrate cannot resolve paths (symlinks not decidable)")
    quick = getattr(files, "link_free", None)
    if quick is not None and quick(path):  # no link on the way: it leads to its own name
        # (and a final component that is no link is no dangling one)
        name = posixpath.normpath(path)
        return "workspace" if name == "." else f"workspace/{name}"
    root = _root_of(path)
    where = _where(files, op, path, follow, writes)
    base = roots.get(root)
    rel = None if base is None else _beneath(where, base)
    if rel is None:
        base = roots[root] = _resolve(files, root)
        rel = _beneath(where, base)
        if rel is None:
            raise _fail(op, path, "resolves outside its root")
    prefix = "workspace" if root == "." else f"workspace/{root}"
    return prefix if not rel else f"{prefix}/{rel}"


def _beneath(where: str, base: str) -> str | None:
    """*where* relative to *base* (``""`` for *base* itself), or ``None`` when outside."""
    if where == base:
        return ""
    head = base if base.endswith("/") else base + "/"
    return where[len(head) :] if where.startswith(head) else None


def _where(files: typing.Any, op: str, path: str, follow: Follow, writes: bool) -> str:
    if follow == "name":
        parent, name = posixpath.split(path.rstrip("/"))
        return posixpath.join(_existing(files, parent or "."), name)
    where = _existing(files, path)
    if writes and _dangling(files, path):
        raise _fail(op, path, "a dangling symlink: its target cannot be decided on")
    return where
