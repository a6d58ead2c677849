"""The sandbox of ``flux serve``: the options and resolution ``flux exec`` uses."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["confined_system"]


def confined_system(args: argparse.Namespace, ws: Any) -> tuple[Any, tuple[str, ...]]:
    """A System confined as *args* ask, and the layers it actually runs under.

    Raises:
        SandboxRefused: a bad option or profile, or (``require``) a missing layer.
    """
    from flux_runtime.cli._sandbox_opts import resolve_sandbox
    from flux_system import System

    sandbox = resolve_sandbox(args)
    return System(ws, sandbox=sandbox), tuple(sandbox.report().active_layers)
