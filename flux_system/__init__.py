"""flux_system — the guarded substrate: workspace, processes, network, sandbox, port.

Mechanism, no judgment: it does what it is handed, but only inside the guarantees
stated on each public name. The public surface is exactly ``__all__``.
"""

from __future__ import annotations

from flux_system._exceptions import (
    ConfinementError,
    ConfinementReason,
    EgressDeniedError,
    EgressReason,
    FluxSystemError,
    InvalidPathError,
    NotFoundError,
    PathEscapeError,
    PortError,
    PortReason,
    ProcessError,
    ProcessReason,
    ProcessTimeoutError,
    RefusedError,
    SandboxReason,
    SandboxUnavailableError,
    SpawnError,
    UnknownOutcomeError,
    UnreachableError,
    UnservedError,
    WorkspaceError,
    WorkspaceReason,
)

__all__ = [
    "ConfinementError",
    "ConfinementReason",
    "EgressDeniedError",
    "EgressReason",
    "FluxSystemError",
    "InvalidPathError",
    "NotFoundError",
    "PathEscapeError",
    "PortError",
    "PortReason",
    "ProcessError",
    "ProcessReason",
    "ProcessTimeoutError",
    "RefusedError",
    "SandboxReason",
    "SandboxUnavailableError",
    "SpawnError",
    "UnknownOutcomeError",
    "UnreachableError",
    "UnservedError",
    "WorkspaceError",
    "WorkspaceReason",
]
