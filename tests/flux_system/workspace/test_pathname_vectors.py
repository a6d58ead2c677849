"""Path-name validation against fixed vectors: limits on both sides, every refusal's
reason, ``op``, ``path`` and message, the parent split, ``as_text`` and symlink targets.

Vectors: ``tests/vectors/flux_system/pathnames.json``.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Any

import pytest

from flux_system import ConfinementReason, InvalidPathError, PathEscapeError
from flux_system.workspace._pathname import as_text, check_target, encode_checked, split_parent
from tests._vectors import load_vector_file

FILE = load_vector_file("flux_system", "pathnames")
CASES: list[dict[str, Any]] = FILE["cases"]
SPLITS: list[dict[str, Any]] = FILE["splits"]


def _text(case: dict[str, Any]) -> str:
    return "".join(piece * count for piece, count in case["text"])


def test_vectors_cover_both_sides_of_each_limit() -> None:
    sizes = {c["id"]: len(os.fsencode(_text(c))) for c in CASES if c["id"] != "unencodable"}
    assert sizes["path-max-minus-1"] == 4095
    assert sizes["path-max"] == 4096
    assert sizes["path-max-multibyte"] == 4095
    assert sizes["path-max-multibyte-over"] == 4096
    assert max(len(p) for p in _text(CASES[5]).encode().split(b"/")) == 255
    assert all(c["why"] and c["source"] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_encode_checked_vector(case: dict[str, Any]) -> None:
    text = _text(case)
    display = "shown-" + case["id"]
    if case["expect"] == "accepted":
        expected = bytes.fromhex(case["bytes_hex"]) if "bytes_hex" in case else text.encode()
        assert encode_checked(text, op="mkdir", display=display) == expected
        return
    with pytest.raises(InvalidPathError) as info:
        encode_checked(text, op="mkdir", display=display)
    err = info.value
    assert err.reason is ConfinementReason[case["expect"]]
    assert (err.op, err.path) == ("mkdir", display)
    assert str(err) == f"mkdir: {case['message']} (path {display!r})"


@pytest.mark.parametrize("case", SPLITS, ids=[c["id"] for c in SPLITS])
def test_split_parent_vector(case: dict[str, Any]) -> None:
    parent, name, trailing = case["expect"]
    assert split_parent(case["rel"].encode()) == (parent.encode(), name.encode(), trailing)


class _Str(str):
    def __str__(self) -> str:
        return "decoy"

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        return b"decoy"


def test_as_text_returns_the_text_itself() -> None:
    assert as_text("a/b", "path") == "a/b"
    got = as_text(_Str("real"), "path")
    assert (got, type(got)) == ("real", str)
    assert as_text(PurePosixPath("a/b"), "path") == "a/b"
    got = as_text(type("P", (), {"__fspath__": lambda self: _Str("fs")})(), "path")
    assert (got, type(got)) == ("fs", str)  # an os.PathLike yielding a str subclass


@pytest.mark.parametrize(
    ("value", "kind"), [(b"a", "bytes"), (None, "NoneType"), (3, "int"), (PurePosixPath, "type")]
)
def test_as_text_refuses_other_types_naming_them(value: object, kind: str) -> None:
    with pytest.raises(TypeError) as info:
        as_text(value, "dest")
    assert str(info.value) == f"dest must be str or os.PathLike[str], not {kind}"


def test_as_text_refuses_a_pathlike_yielding_bytes() -> None:
    with pytest.raises(TypeError, match="not P"):
        as_text(type("P", (), {"__fspath__": lambda self: b"x"})(), "path")


def test_check_target() -> None:
    assert check_target("a/b", op="symlink") == b"a/b"
    assert check_target("../x", op="symlink") == b"../x"  # confinement is the resolver's
    with pytest.raises(PathEscapeError) as info:
        check_target("/etc/passwd", op="symlink")
    err = info.value
    assert err.reason is ConfinementReason.ABSOLUTE_SYMLINK
    assert (err.op, err.path) == ("symlink", "/etc/passwd")
    assert str(err) == "symlink: absolute symlink target (path '/etc/passwd')"
    with pytest.raises(InvalidPathError) as bad:
        check_target("a\nb", op="symlink")
    assert (bad.value.reason, bad.value.op, bad.value.path) == (
        ConfinementReason.CONTROL_BYTE,
        "symlink",
        "a\nb",
    )
    with pytest.raises(TypeError, match=r"^target must be"):
        check_target(b"x", op="symlink")
