"""Error hygiene at the Workspace boundary: hostile caller objects cannot steer a guard.

A ``str`` subclass (given directly, returned by ``__str__`` or by ``__fspath__``) can
override ``encode``, ``isprintable`` and ``__contains__``; the path checks must judge
the text the kernel will actually be handed, so such an object is reduced to its plain
``str`` value before any check runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux_system import (
    ConfinementReason,
    InvalidPathError,
    ProcessReason,
    SpawnError,
    System,
    Workspace,
)


class _LyingStr(str):
    """Claims to be printable and encodes to something other than its text."""

    __slots__ = ()

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"evil\nname"

    def isprintable(self) -> bool:
        return True

    def __contains__(self, item: object) -> bool:
        return False


class _LyingPath:
    def __fspath__(self) -> str:
        return _LyingStr("plain")


class _StrReturnsLiar(str):
    __slots__ = ()

    def __str__(self) -> str:
        return _LyingStr("plain")


@pytest.mark.parametrize(
    "make", [_LyingPath, lambda: _LyingStr("plain"), lambda: _StrReturnsLiar("plain")]
)
def test_lying_str_subclass_cannot_smuggle_a_control_byte(tmp_path: Path, make: object) -> None:
    assert callable(make)
    with Workspace(tmp_path) as ws:
        ws.write_bytes(make(), b"x")
    assert os.listdir(tmp_path) == ["plain"]  # the text itself, never what encode() claims


def test_control_byte_in_fspath_str_subclass_is_refused(tmp_path: Path) -> None:
    with Workspace(tmp_path) as ws, pytest.raises(InvalidPathError) as info:
        ws.write_bytes(_LyingStr("a\nb"), b"x")
    assert info.value.reason is ConfinementReason.CONTROL_BYTE
    assert os.listdir(tmp_path) == []


class _HidesNul(str):
    """Denies holding any character: ``"\\0" in value`` and ``"=" in key`` say False."""

    __slots__ = ()

    def __contains__(self, item: object) -> bool:
        return False


@pytest.mark.parametrize(
    "env", [{"A": _HidesNul("v\x00w")}, {_HidesNul("A=B"): "v"}, {_HidesNul("A\x00"): "v"}]
)
def test_env_str_subclass_cannot_hide_an_invalid_pair(tmp_path: Path, env: object) -> None:
    with Workspace(tmp_path) as ws, System(ws) as system, pytest.raises(SpawnError) as info:
        system.run(["true"], env=env)  # type: ignore[arg-type]
    assert info.value.reason is ProcessReason.INVALID_ENV
