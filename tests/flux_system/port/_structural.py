"""Typed assignments that mypy must accept: the native classes satisfy the Protocols.

Checked by ``tests/flux_system/port/test_protocols.py`` (which runs mypy on this file)
and by ``scripts/check``. Never executed for its values.
"""

from __future__ import annotations

from flux_system import ManagedChild, System, Workspace
from flux_system.port import (
    ChildPort,
    FilesPort,
    HttpPort,
    IdentityPort,
    MetricsPort,
    ProcessPort,
    Unserved,
)


def native(ws: Workspace, system: System, child: ManagedChild) -> None:
    files: FilesPort = ws
    processes: ProcessPort = system
    started: ChildPort = child
    nothing = Unserved()
    unserved: tuple[FilesPort, ProcessPort, HttpPort, MetricsPort, IdentityPort] = (
        nothing,
        nothing,
        nothing,
        nothing,
        nothing,
    )
    del files, processes, started, unserved
