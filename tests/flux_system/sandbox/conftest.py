"""Fixtures shared by the backend tests: a workspace and a System confined by the
module's own ``sandbox`` fixture (each backend's test module defines it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flux_system import System, Workspace
from flux_system.sandbox import Sandbox


@pytest.fixture
def ws_path(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def system(sandbox: Sandbox, ws_path: Path) -> Iterator[System]:
    with Workspace(ws_path) as ws, System(ws, sandbox=sandbox) as s:
        yield s
