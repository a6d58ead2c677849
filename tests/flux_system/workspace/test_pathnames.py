"""Path-name bounds on both sides, and every branch of the parent split.

``PATH_MAX`` (4,096 bytes, the terminating NUL included) and ``NAME_MAX`` (255 bytes)
are byte limits: a path of 4,095 bytes and a component of 255 bytes are accepted and
really created, read and removed; one byte more is ``TOO_LONG`` before any syscall.
Multi-byte characters show that bytes are counted, not characters.
"""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from flux_system import ConfinementReason, InvalidPathError, Workspace
from flux_system.workspace._pathname import NAME_MAX, PATH_MAX, encode_checked, split_parent
from tests.flux_system.workspace._ws_support import resolver, root, ws  # noqa: F401


def _long_path(size: int, *, component: int = NAME_MAX) -> str:
    """A relative path of exactly *size* bytes: components of *component* bytes."""
    parts: list[str] = []
    used = 0
    while used < size:
        room = size - used - (1 if parts else 0)
        take = min(component, room)
        if 0 < room - take < 2:  # never leave a remainder too short for "/x"
            take -= 2
        parts.append(chr(ord("a") + len(parts) % 26) * take)
        used += take + (1 if len(parts) > 1 else 0)
    path = "/".join(parts)
    assert len(path.encode()) == size
    return path


def test_constants_are_the_linux_values() -> None:
    assert (PATH_MAX, NAME_MAX) == (4096, 255)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (_long_path(PATH_MAX - 1), True),
        (_long_path(PATH_MAX), False),
        ("x" * NAME_MAX, True),
        ("x" * (NAME_MAX + 1), False),
        ("d/" + "x" * NAME_MAX, True),
        ("d/" + "x" * (NAME_MAX + 1) + "/e", False),  # a middle component counts too
        ("€" * 85, True),  # 255 bytes in 85 characters
        ("€" * 86, False),  # 258 bytes in 86 characters
        (("é" * 100 + "/") * 20 + "a" * 75, True),  # 4,095 bytes in 2,095 characters
        (("é" * 100 + "/") * 20 + "a" * 76, False),  # 4,096 bytes
    ],
    ids=lambda v: f"{len(v.encode())}B" if isinstance(v, str) else str(v),
)
def test_byte_bounds_on_both_sides(text: str, ok: bool) -> None:
    if ok:
        assert encode_checked(text, op="t", display=text) == text.encode()
    else:
        with pytest.raises(InvalidPathError) as info:
            encode_checked(text, op="t", display=text)
        assert info.value.reason is ConfinementReason.TOO_LONG


def test_path_of_path_max_minus_one_bytes_is_created_read_and_removed(ws: Workspace) -> None:
    path = _long_path(PATH_MAX - 1)
    ws.write_bytes(path, b"deep")  # every parent created beneath the root
    assert ws.read_bytes(path) == b"deep"
    assert ws.exists(path)
    ws.append_bytes(path, b"+")
    assert ws.read_bytes(path) == b"deep+"
    ws.remove(path.split("/")[0], recursive=True)
    assert ws.list_dir(".") == []


def test_path_of_path_max_bytes_is_refused_before_any_syscall(ws: Workspace) -> None:
    path = _long_path(PATH_MAX)
    calls: list[Callable[[], object]] = [
        lambda: ws.write_bytes(path, b"x"),
        lambda: ws.read_bytes(path),
    ]
    for call in calls:
        with pytest.raises(InvalidPathError) as info:
            call()
        assert info.value.reason is ConfinementReason.TOO_LONG
    assert ws.list_dir(".") == []  # not even a parent was created


@pytest.mark.parametrize("name", ["x" * NAME_MAX, "€" * 85], ids=["ascii", "3-byte"])
def test_name_of_name_max_bytes_is_created(ws: Workspace, root: Path, name: str) -> None:
    ws.write_bytes(f"d/{name}", b"n")  # the atomic write's temp name must fit too
    ws.mkdir(name)
    assert sorted(ws.list_dir(".")) == sorted(["d", name])
    assert ws.read_bytes(f"d/{name}") == b"n"
    assert os.listdir(root / "d") == [name]  # no temp name left behind


@pytest.mark.parametrize("name", ["x" * (NAME_MAX + 1), "€" * 86], ids=["ascii", "3-byte"])
def test_name_over_name_max_bytes_is_refused(ws: Workspace, name: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: ws.write_bytes(f"d/{name}", b"x"),
        lambda: ws.mkdir(name),
    ]
    for call in calls:
        with pytest.raises(InvalidPathError) as info:
            call()
        assert info.value.reason is ConfinementReason.TOO_LONG
    assert ws.list_dir(".") == []


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        (b"", (b".", b".", False)),  # empty: nothing to split
        (b"/", (b"/", b".", True)),  # all slashes: the host root, no final name
        (b"///", (b"/", b".", True)),
        (b"x", (b".", b"x", False)),
        (b"x/", (b".", b"x", True)),
        (b"a/b", (b"a", b"b", False)),
        (b"a//b//", (b"a/", b"b", True)),
        (b"a/.", (b"a", b".", False)),
        (b"a/..", (b"a", b"..", False)),
        (b"/x", (b"/", b"x", False)),  # one absolute component: parent "/", never "."
        (b"//x", (b"/", b"x", False)),
        (b"/a/b", (b"/a", b"b", False)),
    ],
)
def test_split_parent_branches(rel: bytes, expected: tuple[bytes, bytes, bool]) -> None:
    assert split_parent(rel) == expected


@pytest.mark.parametrize("path", ["./", ".//", "d/.", "d/..", "@"])
def test_names_without_a_final_component_have_nothing_to_write(ws: Workspace, path: str) -> None:
    from flux_system import FluxSystemError

    ws.mkdir("d")
    with pytest.raises(FluxSystemError) as info:
        ws.write_bytes(path, b"x")
    assert info.value.reason.value in ("bad_name", "unknown_root")
    assert ws.walk(".") == ["d"]
