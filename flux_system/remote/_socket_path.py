"""Where a Unix socket may be made: outside the served workspace, in directories
nobody else can rearrange.

Guarantee: :func:`check_socket_outside` refuses a socket inside a root of the served
workspace (decision 0097): the peer check admits this server's uid, which every command
run there has, so one could drive the server past its own sandbox.
:func:`check_socket_dir` refuses a socket path when the directory that holds it, or any
directory above it, can be written by a user other than this one or root — a group- or
world-writable directory without the sticky bit, or one owned by another user — since
whoever can write there can replace the socket with one of their own after it is made,
and clients would talk (and hand their token) to them. This is ssh's ``StrictModes``
rule. Not guaranteed: anything about a directory that changes after the check, or
about who else is in a group the directory belongs to when it is not group-writable.
"""

from __future__ import annotations

import os
import stat

from flux_system._exceptions import PortError, PortReason

__all__ = ["check_socket_dir", "check_socket_outside"]


def check_socket_dir(path: str) -> None:
    """Refuse *path* when a directory on its way can be rearranged by someone else.

    Raises:
        PortError: ``PROTOCOL`` naming the directory and why.
    """
    me = os.geteuid()
    where = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            st = os.stat(where)
        except OSError as exc:
            raise PortError(
                f"cannot inspect {where}: {exc.strerror}",
                op="serve",
                target=path,
                reason=PortReason.PROTOCOL,
            ) from exc
        why = ""
        if st.st_uid not in (me, 0):
            why = f"is owned by uid {st.st_uid}"
        elif st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            why = "is writable by group or others (and not sticky)"
        if why:
            raise PortError(
                f"{where} {why}: a socket in it could be replaced by someone else",
                op="serve",
                target=path,
                reason=PortReason.PROTOCOL,
            )
        parent = os.path.dirname(where)
        if parent == where:
            return
        where = parent


def check_socket_outside(path: str, ws: object) -> None:
    """Refuse *path* when its real directory lies inside a root of *ws* (a Workspace).

    Raises:
        PortError: ``AUTH`` naming the path and the root.
    """
    inside = _inside_roots(path, ws)
    if inside is not None:
        raise PortError(
            f"{path} is inside the served workspace root {inside}: a command run there"
            " (sandboxed or not) could connect to it with this server's uid and use"
            " its workspace, processes and egress; put the socket elsewhere",
            op="serve",
            target=path,
            reason=PortReason.AUTH,
        )


def _inside_roots(path: str, ws: object) -> str | None:
    """The physical root of *ws* that the socket *path* (its real directory) lies in.

    A Unix socket's peer check admits our own uid, which every command the served
    workspace's runs start with (a sandbox maps it back to ours): one of them could
    reach a socket in the directories it sees and drive this server, past its own
    sandbox's network and filesystem limits. ``None`` when no root holds it.
    """
    where = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    for root in getattr(ws, "_roots", ()):
        try:
            base = os.readlink(f"/proc/self/fd/{root.fd}")
        except OSError:
            continue
        if where == base or where.startswith(base.rstrip("/") + "/"):
            return base
    return None
