"""The identity capability: who and what serves this substrate."""

from __future__ import annotations

import os
import platform
import socket
import typing
from dataclasses import dataclass, replace

__all__ = ["Identity", "IdentityPort", "local_identity"]


@typing.final
@dataclass(frozen=True, slots=True)
class Identity:
    """What a substrate says about itself.

    ``remotely_reported`` is set by the *client*, never taken from the far side: every
    field of an identity that crossed a port is the far side's claim, unverified.
    ``sandbox`` names the active layers as the serving side reported them.
    """

    hostname: str
    system: str
    release: str
    machine: str
    uid: int
    pid: int
    flux_version: str
    sandbox: tuple[str, ...] = ()
    remotely_reported: bool = False

    def as_remote(self) -> Identity:
        """This identity marked as reported by a far side (what a client hands out)."""
        return replace(self, remotely_reported=True)


@typing.runtime_checkable
class IdentityPort(typing.Protocol):
    def identity(self) -> Identity: ...


def local_identity(sandbox: tuple[str, ...] = ()) -> Identity:
    """This process's own identity (``remotely_reported=False``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        flux_version = version("flux")
    except PackageNotFoundError:
        flux_version = "unknown"
    uname = platform.uname()
    return Identity(
        hostname=socket.gethostname(),
        system=uname.system,
        release=uname.release,
        machine=uname.machine,
        uid=os.getuid(),
        pid=os.getpid(),
        flux_version=flux_version,
        sandbox=sandbox,
    )
