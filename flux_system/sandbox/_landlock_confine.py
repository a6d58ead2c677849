"""The Landlock-only backend (a confined spawner thread per workspace)."""

from __future__ import annotations

import typing
from collections.abc import Mapping

from flux_system._exceptions import SandboxReason, SandboxUnavailableError
from flux_system.process import Limits
from flux_system.process._confine import Launch

if typing.TYPE_CHECKING:
    from flux_system.sandbox._sandbox import Sandbox

__all__ = ["LandlockConfinement"]


@typing.final
class LandlockConfinement:
    """Not wired yet: refuses (fails closed)."""

    def __init__(self, sandbox: Sandbox, ws: object) -> None:
        raise SandboxUnavailableError(
            "the Landlock-only backend is not wired yet",
            op="confine",
            layer="landlock",
            reason=SandboxReason.MISSING_BACKEND,
        )

    def launch(
        self, argv: tuple[str, ...], executable: str, env: Mapping[str, str], cwd_fd: int
    ) -> Launch:
        raise AssertionError("unreachable")

    def default_limits(self) -> Limits | None:
        return None

    def close(self) -> None:
        return None
