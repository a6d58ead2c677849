"""The sandbox of ``flux serve`` (wired to flux_system.sandbox when it is present)."""

from __future__ import annotations

import argparse
from typing import Any

from flux_system import SandboxReason, SandboxUnavailableError

__all__ = ["confined_system"]


def confined_system(args: argparse.Namespace, ws: Any) -> tuple[Any, tuple[str, ...]]:
    raise SandboxUnavailableError(
        f"--sandbox {args.sandbox}: no sandbox backend is wired into flux serve yet",
        op="serve",
        layer="sandbox",
        reason=SandboxReason.MISSING_BACKEND,
    )
