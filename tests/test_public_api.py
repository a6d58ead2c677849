"""Each package's ``__all__`` is sorted and is exactly its public surface."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = ["flux_system", "flux_policy", "flux_secret", "flux_evidence", "flux_runtime"]
SUBPACKAGES = ["flux_system.net", "flux_system.lowlevel"]


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
