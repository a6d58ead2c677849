"""Each package's ``__all__`` is sorted and is exactly its public surface."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = ["flux_system", "flux_policy", "flux_secret", "flux_evidence", "flux_runtime"]
SUBPACKAGES = [
    "flux_system.net",
    "flux_system.process",
    "flux_system.sandbox",
    "flux_system.workspace",
    "flux_system.lowlevel",
]


def _public_modules() -> list[str]:
    names = list(PACKAGES)
    for name in SUBPACKAGES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        names.append(name)
    return names


@pytest.mark.parametrize("name", _public_modules())
def test_all_is_exact_public_surface(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported), "__all__ must be sorted"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.{attr} is in __all__ but missing"
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, types.ModuleType)
        and attr not in {"annotations"}
    }
    assert public == set(exported)


# The names ``flux_system`` exported before its modules moved into subpackages
# (docs/decisions/0002): moving a file must never change what users import.
FLUX_SYSTEM_NAMES = frozenset(
    {
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
    }
)
# Names added since, each with the change that introduced it.
FLUX_SYSTEM_NAMES_ADDED = frozenset(
    {
        # streamed output and stdin of System.spawn (docs/decisions/0070)
        "ChildStdin",
        "OutputChunk",
        "OutputTotals",
        # the hook check of `flux exec --env-pass`
        "is_denied_hook",
    }
)


def test_flux_system_surface_is_unchanged() -> None:
    import flux_system

    assert set(flux_system.__all__) == FLUX_SYSTEM_NAMES | FLUX_SYSTEM_NAMES_ADDED


@pytest.mark.parametrize("sub", ["flux_system.process", "flux_system.workspace"])
def test_subpackage_names_are_reexported_at_the_top(sub: str) -> None:
    import flux_system

    module = importlib.import_module(sub)
    for name in module.__all__:
        assert getattr(flux_system, name) is getattr(module, name), name
