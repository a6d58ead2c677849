"""The OS sandbox (DESIGN §2.5): bubblewrap, seccomp and Landlock, from profiles.

``Sandbox.resolve(SandboxSettings(...))`` loads a profile, probes the host and picks
the backend and layers; ``System(ws, sandbox=sandbox)`` then confines every child the
same way (the one spawn builder applies it through the Protocol of
:mod:`flux_system.process._confine`; ``process`` never imports this package).
``sandbox.report()`` says, for each guarantee, whether it is enforced here and why.
This subpackage imports :mod:`flux_system.process`, :mod:`flux_system.net`,
:mod:`flux_system.workspace` and :mod:`flux_system._exceptions` only.
"""

from __future__ import annotations

import importlib
import typing

from flux_system.process._confine import Denial, Denials
from flux_system.sandbox._profile import BUILTIN_PROFILES, Profile, load_profile
from flux_system.sandbox._report import Guarantee, LayerStatus, SandboxReport
from flux_system.sandbox._sandbox import Sandbox
from flux_system.sandbox._settings import SandboxSettings

__all__ = [
    "AuditChange",
    "AuditRecord",
    "AuditReport",
    "BUILTIN_PROFILES",
    "Check",
    "Denial",
    "Denials",
    "Diagnosis",
    "Guarantee",
    "LayerStatus",
    "Profile",
    "ProtectedPathAudit",
    "Sandbox",
    "SandboxReport",
    "SandboxSettings",
    "audit_protected_paths",
    "diagnose",
    "load_profile",
]

if typing.TYPE_CHECKING:
    from flux_system.sandbox._audit import (
        AuditChange,
        AuditRecord,
        AuditReport,
        ProtectedPathAudit,
        audit_protected_paths,
    )
    from flux_system.sandbox._doctor import Check, Diagnosis, diagnose

# Imported on first use: a sandboxed run needs neither the audit (only with
# ``SandboxSettings(audit=True)`` or the Landlock backend) nor the doctor.
_LAZY = {
    **dict.fromkeys(
        ("AuditChange", "AuditRecord", "AuditReport", "ProtectedPathAudit"),
        "flux_system.sandbox._audit",
    ),
    "audit_protected_paths": "flux_system.sandbox._audit",
    **dict.fromkeys(("Check", "Diagnosis", "diagnose"), "flux_system.sandbox._doctor"),
}


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
