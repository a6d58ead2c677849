"""``SandboxReport``: each guarantee, enforced or not, by which layer, and why."""

from __future__ import annotations

import typing

from flux_system._values import record

__all__ = ["GUARANTEES", "Guarantee", "LayerStatus", "SandboxReport"]

GUARANTEES = (
    "filesystem_view",
    "file_metadata",
    "private_tmp",
    "pid_namespace",
    "process_tree",
    "net_namespace",
    "ipc_uts_namespaces",
    "user_namespaces_closed",
    "seccomp",
    "landlock",
    "protected_paths",
    "denial_reporting",
)


@typing.final
@record
class LayerStatus:
    """One layer: ``available`` on this host, ``active`` in this sandbox, and why not."""

    name: str
    available: bool
    active: bool
    required: bool
    reason: str = ""
    detail: str = ""


@typing.final
@record
class Guarantee:
    """One guarantee: ``enforced`` or not, the layer that enforces it, and why."""

    name: str
    enforced: bool
    by: str
    reason: str


@typing.final
@record
class SandboxReport:
    """What a resolved sandbox does here (``Sandbox.report()``).

    Attributes:
        mode, profile, backend, network: as resolved (``backend`` ``"none"`` when off).
        layers: every layer the project knows, with its status.
        guarantees: every guarantee of :data:`GUARANTEES`, in that order.
        missing: required layers that are not active (empty when the sandbox runs).
    """

    mode: str
    profile: str
    backend: str
    network: str
    layers: tuple[LayerStatus, ...]
    guarantees: tuple[Guarantee, ...]
    missing: tuple[str, ...]

    @property
    def active_layers(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers if layer.active)

    def guarantee(self, name: str) -> Guarantee:
        """The guarantee called *name* (``KeyError`` when there is none)."""
        for g in self.guarantees:
            if g.name == name:
                return g
        raise KeyError(name)

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {
            "mode": self.mode,
            "profile": self.profile,
            "backend": self.backend,
            "network": self.network,
            "active_layers": list(self.active_layers),
            "missing": list(self.missing),
            "layers": [
                {
                    "name": layer.name,
                    "available": layer.available,
                    "active": layer.active,
                    "required": layer.required,
                    "reason": layer.reason,
                    "detail": layer.detail,
                }
                for layer in self.layers
            ],
            "guarantees": [
                {"name": g.name, "enforced": g.enforced, "by": g.by, "reason": g.reason}
                for g in self.guarantees
            ],
        }
