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
from flux_system.process import (
    DEFAULT_ENV_ALLOWLIST,
    DEFAULT_OUTPUT_CAP,
    ChildOutput,
    ChildStatus,
    Limits,
    LineObserver,
    ManagedChild,
    Privileges,
    RunResult,
    System,
)
from flux_system.workspace import FileInfo, FileKind, NamedRoot, Workspace

__all__ = [
    "ChildOutput",
    "ChildStatus",
    "ConfinementError",
    "ConfinementReason",
    "DEFAULT_ENV_ALLOWLIST",
    "DEFAULT_OUTPUT_CAP",
    "EgressDeniedError",
    "EgressReason",
    "FileInfo",
    "FileKind",
    "FluxSystemError",
    "InvalidPathError",
    "Limits",
    "LineObserver",
    "ManagedChild",
    "NamedRoot",
    "NotFoundError",
    "PathEscapeError",
    "PortError",
    "PortReason",
    "Privileges",
    "ProcessError",
    "ProcessReason",
    "ProcessTimeoutError",
    "RefusedError",
    "RunResult",
    "SandboxReason",
    "SandboxUnavailableError",
    "SpawnError",
    "System",
    "UnknownOutcomeError",
    "UnreachableError",
    "UnservedError",
    "Workspace",
    "WorkspaceError",
    "WorkspaceReason",
]
