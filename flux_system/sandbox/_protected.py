"""Protected paths inside writable roots: found by fd, never by following a link.

The built-in list (DESIGN §2.5) plus the profile's, plus — in each root — what makes
git run code or look elsewhere in every git directory below ``.git/modules``
(submodules, nested ones too, names with slashes) and ``.git/worktrees`` (linked
worktrees): :data:`GIT_DIR_PROTECTED` in each (:func:`git_dir_paths`). One list for
every user: the bubblewrap binds, the Landlock backend's audit, the opt-in audit
(``DEFAULT_PROTECTED_PATHS``) and the Seatbelt profile all start from
:data:`BUILTIN_PROTECTED`.

For each writable root the existing ones are opened ``O_PATH|O_NOFOLLOW`` one
component at a time beneath the root's fd, so a symlink planted by an earlier run
(``.git -> /home/me/.ssh``) is never followed: a component that is a symlink is skipped
and reported, as is anything that is neither a directory nor a regular file.

Guarantee: every fd returned refers to an object beneath the root, reached without
following any symlink; the caller owns the fds (``O_CLOEXEC``).
Not guaranteed: that the path is still there when bwrap binds it (bwrap compares the
fd's identity with the mount and aborts on a mismatch).
"""

from __future__ import annotations

import contextlib
import os
import stat
import typing

from flux_system._values import record

__all__ = [
    "BUILTIN_PROTECTED",
    "GIT_DIR_PROTECTED",
    "MAX_GIT_DIRS",
    "Found",
    "GitDirs",
    "find_protected",
    "git_dir_paths",
]

#: In a git directory, what makes git run code (hooks; ``core.hooksPath``,
#: ``core.fsmonitor`` and the like in config; the ``exec`` lines of an interrupted
#: rebase's todo list in ``rebase-merge``/``rebase-apply``, run by the next
#: ``git rebase --continue``) or read its config and hooks from elsewhere
#: (``commondir``; ``config.worktree`` with ``extensions.worktreeConfig``).
GIT_DIR_PROTECTED: tuple[str, ...] = (
    "hooks",
    "config",
    "config.worktree",
    "commondir",
    "rebase-merge",
    "rebase-apply",
)

BUILTIN_PROTECTED: tuple[str, ...] = (
    *(f".git/{name}" for name in GIT_DIR_PROTECTED),
    ".vscode",
    ".idea",
    ".envrc",
    ".mcp.json",
    ".claude",
    # Run on the host by tools outside the sandbox (decision 0114): a dev container's
    # initializeCommand, the pre-commit framework's hooks on the next git commit.
    ".devcontainer",
    ".devcontainer.json",
    ".pre-commit-config.yaml",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".cshrc",
    ".tcshrc",
    ".kshrc",
    ".inputrc",
)
_MAX_DEPTH = 16  # components of one protected path (profile entries are short)
MAX_GIT_DIRS = 512  # directories examined below .git/modules and .git/worktrees per root
_GIT_NESTED = ("modules", "worktrees")  # below a git directory: more git directories
# Below .git/modules, what is never a submodule's git directory and is not entered (a
# submodule's own data, possibly large); hooks is protected as a whole anyway.
_GIT_DATA = frozenset(
    {"objects", "refs", "logs", "hooks", "info", "lfs", "rr-cache", "rebase-merge", "rebase-apply"}
)


@typing.final
@record
class Found:
    """One protected path of a root: its relative name, fd (or why none), its parents."""

    rel: str
    fd: int | None
    parents: tuple[tuple[str, int], ...]  # (relative dir, O_PATH fd) below the root
    skipped: str = ""  # why it is not bound ("" when it is, "absent" when missing)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _open_one(root_fd: int, rel: str) -> Found:
    parts = [p for p in rel.split("/") if p and p != "."]
    if not parts or ".." in parts or len(parts) > _MAX_DEPTH:
        return Found(rel, None, (), "invalid")
    opened: list[int] = []
    parents: list[tuple[str, int]] = []
    at = root_fd
    try:
        for i, name in enumerate(parts):
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
            except FileNotFoundError:
                _close(opened)
                return Found(rel, None, (), "absent")
            except NotADirectoryError:
                _close(opened)
                return Found(rel, None, (), "a parent is not a directory")
            opened.append(fd)
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                _close(opened)
                return Found(rel, None, (), "a symlink (not followed)")
            last = i == len(parts) - 1
            if not last:
                if not stat.S_ISDIR(mode):
                    _close(opened)
                    return Found(rel, None, (), "a parent is not a directory")
                parents.append(("/".join(parts[: i + 1]), fd))
            elif not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                _close(opened)
                return Found(rel, None, (), "not a file or directory")
            at = fd
        return Found("/".join(parts), opened[-1], tuple(parents))
    except OSError as exc:
        _close(opened)
        return Found(rel, None, (), f"cannot be opened: {exc.strerror}")


@typing.final
@record
class GitDirs:
    """:data:`GIT_DIR_PROTECTED` of the git directories below a root's ``.git``.

    ``complete`` is False when more than :data:`MAX_GIT_DIRS` directories were there
    (``paths`` then holds those of the first ones).
    """

    paths: tuple[str, ...]
    complete: bool = True


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _walk_git(
    dirfd: int, rel: str, deeper: bool, depth: int, *, out: list[str], left: list[int]
) -> bool:
    """Each directory in *dirfd* is a git directory: its protected names go to *out*;
    with *deeper* (below ``.git/modules``) its own directories are walked too, except
    a git directory's data. False when over the bound (the rest is not examined)."""
    names = []
    with os.scandir(dirfd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and not (depth and entry.name in _GIT_DATA):
                names.append(entry.name)
                if len(names) > left[0]:
                    return False
    for name in sorted(names):
        left[0] -= 1
        if left[0] < 0 or depth >= _MAX_DEPTH:
            return False
        path = f"{rel}/{name}"
        out.extend(f"{path}/{protected}" for protected in GIT_DIR_PROTECTED)
        if not deeper:
            continue
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dirfd)
        except OSError:
            continue  # replaced meanwhile: nothing below it to protect
        try:
            if not _walk_git(fd, path, deeper, depth + 1, out=out, left=left):
                return False
        finally:
            os.close(fd)
    return True


def git_dir_paths(root_fd: int) -> GitDirs:
    """Every git directory below ``.git/modules`` and ``.git/worktrees`` of the root,
    as :data:`GIT_DIR_PROTECTED` paths relative to the root (existing or not).

    Below ``.git/worktrees`` each entry is a linked worktree's git directory (its
    ``config.worktree`` and ``commondir`` say where its hooks and config come from).
    Below ``.git/modules`` a submodule's git directory may sit at any depth (a name
    such as ``libs/foo`` is ``.git/modules/libs/foo``; a nested submodule is
    ``.git/modules/a/modules/b``): every directory there counts, except a git
    directory's own data (``objects``, ``refs``, ...), which is not entered.

    Guarantee: no symlink is followed (each directory opened ``O_NOFOLLOW`` beneath
    its parent's fd); at most :data:`MAX_GIT_DIRS` directories are counted and one fd
    per level is open at a time.
    Not guaranteed: a git directory elsewhere in the workspace (a submodule's
    checkout holds a ``.git`` file naming its git directory, and a run may rewrite it
    to name one of its own): those are not protected paths.
    """
    out: list[str] = []
    left = [MAX_GIT_DIRS]
    complete = True
    try:
        git = os.open(".git", _DIR_FLAGS, dir_fd=root_fd)
    except OSError:
        return GitDirs(())
    try:
        for nested in _GIT_NESTED:
            try:
                fd = os.open(nested, _DIR_FLAGS, dir_fd=git)
            except OSError:
                continue
            try:
                complete = _walk_git(
                    fd, f".git/{nested}", nested == "modules", 0, out=out, left=left
                )
            except OSError:
                pass  # unreadable: nothing found below it (the audit reports the parent)
            finally:
                os.close(fd)
            if not complete:
                break
    finally:
        os.close(git)
    return GitDirs(tuple(out), complete)


def find_protected(root_fd: int, names: tuple[str, ...]) -> list[Found]:
    """Open each of *names*, and each of :func:`git_dir_paths`, beneath *root_fd* (see
    the module docstring); the absent ones are returned with ``skipped="absent"``.

    A ``.git`` that is a regular file (a linked worktree's or a submodule checkout's
    ``gitdir:`` pointer) is one too: rewritten, it would point the host's git at a
    git directory of the run's choosing, with its hooks and config.
    """
    extra = git_dir_paths(root_fd).paths
    found = [_open_one(root_fd, rel) for rel in (*names, *extra)]
    try:
        git = os.stat(".git", dir_fd=root_fd, follow_symlinks=False)
    except OSError:
        return found
    if stat.S_ISREG(git.st_mode):
        found.append(_open_one(root_fd, ".git"))
    return found
