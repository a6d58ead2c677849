"""Shared fixtures for the Workspace tests: every test runs on both resolvers.

The openat2 probe is the harness's own (independent of the product's), so a broken
product probe cannot turn the openat2 runs into skips.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flux_system import Workspace
from tests._capabilities import require
from tests.flux_system.workspace._escape_harness import have_openat2

RESOLVERS = ("openat2", "walk")


@pytest.fixture(params=RESOLVERS)
def resolver(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "openat2":
        require(have_openat2(), "openat2(2) (Linux >= 5.6)")
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


def in_child(fn: Callable[[], object]) -> object:
    """Run *fn* in a forked child (for process-wide state: rlimits, umask) and return its
    result, which must pickle. An exception in the child is returned, not raised."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            os.close(reader)
            try:
                result: object = fn()
            except BaseException as exc:  # reported to the parent as a value
                result = exc
            try:
                payload = pickle.dumps(result)
            except Exception as exc:
                payload = pickle.dumps(RuntimeError(f"unpicklable result: {exc!r}"))
            with os.fdopen(writer, "wb") as out:
                out.write(payload)
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as source:
        payload = source.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "child failed"
    return pickle.loads(payload)  # our own child's bytes
