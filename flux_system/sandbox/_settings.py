"""``SandboxSettings``: what a caller asks of the sandbox (a plain frozen value)."""

from __future__ import annotations

import os
import typing

from flux_system._values import record

__all__ = ["BACKENDS", "MODES", "SandboxSettings"]

MODES = ("off", "on", "require")
BACKENDS = ("auto", "bwrap", "landlock")
_NETWORKS = ("host", "none", "proxy")


def _paths(name: str, value: object, *, absolute: bool) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise TypeError(f"{name} must be a sequence of str")
    out = []
    for v in value:
        text = os.fspath(v) if isinstance(v, os.PathLike) else v
        if not isinstance(text, str) or not text or "\0" in text:
            raise TypeError(f"{name} must be a sequence of non-empty str")
        if absolute and not text.startswith("/"):
            raise ValueError(f"{name}: {text!r} is not an absolute path")
        out.append(text)
    return tuple(out)


@typing.final
@record
class SandboxSettings:
    """What to confine with; resolved against the host by ``Sandbox.resolve``.

    Attributes:
        mode: ``"off"`` (no sandbox), ``"on"`` (every layer this host has; the missing
            ones reported), ``"require"`` (refuse when a layer the profile requires is
            missing, naming it).
        profile: a built-in profile name (``default``, ``strict``, ``net-proxy``) or
            the path of a profile file.
        backend: ``"auto"`` (bubblewrap; Landlock only where the profile admits it),
            ``"bwrap"`` or ``"landlock"``.
        network: ``None`` (the profile's), ``"none"``, ``"proxy"`` or ``"host"``.
        allow_hosts: host patterns the proxy may reach (lifts the internal-name
            refusal for them, as ``PrivateNetAllow`` hosts).
        allow_private: blocked CIDRs the proxy may reach (as ``PrivateNetAllow`` cidrs).
        read_only: extra absolute paths visible read-only.
        read_write: extra absolute paths bound read-write.
        allow_home_workspace: the workspace may be, or contain, ``$HOME`` or ``/``
            (otherwise refused: the fresh ``$HOME`` would be moot).
        audit: snapshot the protected paths before each run and compare after (and,
            with the profile's ``restore``, undo what changed). Off for a plain
            ``System``; ``flux exec`` and the runtime turn it on.

    Raises:
        TypeError, ValueError: a field has the wrong type or value.
    """

    mode: str = "require"
    profile: str = "default"
    backend: str = "auto"
    network: str | None = None
    allow_hosts: tuple[str, ...] = ()
    allow_private: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ()
    allow_home_workspace: bool = False
    audit: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}")
        if self.network is not None and self.network not in _NETWORKS:
            raise ValueError(f"network must be None or one of {', '.join(_NETWORKS)}")
        profile = os.fspath(self.profile) if isinstance(self.profile, os.PathLike) else self.profile
        if not isinstance(profile, str) or not profile:
            raise TypeError("profile must be a profile name or path")
        object.__setattr__(self, "profile", profile)
        for name in ("allow_hosts", "allow_private"):
            object.__setattr__(self, name, _paths(name, getattr(self, name), absolute=False))
        for name in ("read_only", "read_write"):
            object.__setattr__(self, name, _paths(name, getattr(self, name), absolute=True))
        for name in ("allow_home_workspace", "audit"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool")
