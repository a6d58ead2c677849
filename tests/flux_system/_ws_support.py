"""Shared fixtures for the Workspace behaviour tests: every test runs on both resolvers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flux_system import Workspace
from flux_system._resolve import openat2_available
from tests._capabilities import require

RESOLVERS = ("openat2", "walk")


@pytest.fixture(params=RESOLVERS)
def resolver(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "openat2":
        require(openat2_available(), "openat2(2) (Linux >= 5.6)")
    return name


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the root holding a canary file."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "canary").write_bytes(b"CANARY")
    return out


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture
def ws(root: Path, resolver: str) -> Iterator[Workspace]:
    with Workspace(root, resolver=resolver) as w:
        yield w
