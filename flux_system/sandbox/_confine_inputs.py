"""What both confinements check of their inputs before they are made.

The workspace's roots as ``(fd, physical path, writable)``; that no writable root is,
or contains, ``$HOME`` or ``/`` (unless allowed); that a profile file of the user's
does not lie inside a writable root (decision 0120); the profile's limits as
:class:`~flux_system.process.Limits`. Used by the bubblewrap and the Landlock-only
confinement alike. Each refusal is a :class:`SandboxUnavailableError` naming the path.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import typing

from flux_system._exceptions import SandboxReason, SandboxUnavailableError
from flux_system.process import Limits
from flux_system.sandbox._profile import profile_dirs

__all__ = ["check_home", "check_profile_file", "limits_of", "workspace_roots"]


def workspace_roots(ws: object) -> list[tuple[int, str, bool]]:
    """``(fd, physical path, writable)`` of every root of *ws* (a ``Workspace``)."""
    roots = getattr(ws, "_roots", None)
    if not isinstance(roots, list):
        raise TypeError("ws must be a Workspace")
    out = []
    for root in roots:
        fd = root.fd
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as exc:
            raise SandboxUnavailableError(
                f"a workspace root cannot be located: {exc.strerror}",
                op="confine",
                layer="bubblewrap",
                reason=SandboxReason.LAYER_UNAVAILABLE,
            ) from exc
        out.append((fd, path, bool(root.writable)))
    return out


def _homes() -> set[str]:
    homes = set()
    env_home = os.environ.get("HOME")
    if env_home and env_home.startswith("/"):
        homes.add(os.path.realpath(env_home))
    with contextlib.suppress(KeyError, OSError):
        homes.add(os.path.realpath(pwd.getpwuid(os.geteuid()).pw_dir))
    return homes


def check_home(roots: list[tuple[int, str, bool]], allowed: bool) -> None:
    """Refuse a writable root that is, or contains, ``$HOME`` or ``/`` (unless *allowed*).

    Raises:
        SandboxUnavailableError: ``WORKSPACE_COVERS_HOME``.
    """
    if allowed:
        return
    for _, path, writable in roots:
        if not writable:
            continue
        for home in {"/", *_homes()}:
            if home == path or home.startswith(path.rstrip("/") + "/") or path == "/":
                what = "/" if path == "/" else f"the home directory {home}"
                raise SandboxUnavailableError(
                    f"the writable path {path} is or contains {what}; a sandbox would expose it "
                    "(pass allow_home_workspace / --allow-home-workspace if this is meant)",
                    op="confine",
                    layer=path,
                    reason=SandboxReason.WORKSPACE_COVERS_HOME,
                )


def check_profile_file(profile: typing.Any, writable: typing.Iterable[str]) -> None:
    """Refuse a profile file of the user's that lies inside a writable path (decision 0120).

    A run could rewrite it, and the next sandbox made from it would be the run's
    choice. The built-in profiles are part of the installed package, judged with it.

    Raises:
        SandboxUnavailableError: ``BAD_PROFILE`` naming the file and the writable path.
    """
    real = os.path.realpath(profile.source)
    if os.path.dirname(real) in {str(d) for d in profile_dirs()}:
        return  # built in: the package's own file
    for path in writable:
        base = os.path.realpath(path)
        if real == base or real.startswith(base.rstrip("/") + "/"):
            raise SandboxUnavailableError(
                f"profile {profile.source} lies inside the writable path {base}: a run "
                "could rewrite it for the next; keep profile files outside every "
                "writable root",
                op="confine",
                layer=profile.source,
                reason=SandboxReason.BAD_PROFILE,
            )


def limits_of(profile: typing.Any) -> Limits | None:
    values = {
        "nproc": profile.processes,
        "open_files": profile.open_files,
        "cpu_s": profile.cpu_seconds,
        "file_size": profile.file_size,
        "address_space": profile.address_space,
    }
    if all(v is None for v in values.values()):
        return None
    return Limits(**values)
