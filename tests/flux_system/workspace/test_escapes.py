"""The escape table (tests/vectors/flux_system/paths.json) against the Workspace.

Every case runs against every operation it applies to, on both resolvers, each on a
fresh real tree; the harness (``_escape_harness``) checks the outcome *and* that
nothing outside the root was read, created, changed or deleted (canary content,
full before/after snapshot with atimes). Two kinds of control prove the harness can
fail: the negative-control cases (a deliberately wrong expectation) and a run of
every escape case through an unconfined workspace (Go root_test's ``alwaysFails``
idea: an escape case whose path does not actually escape is not a test).
"""
# ruff: noqa: F811 - the resolver fixture imported from _ws_support is a parameter here

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from flux_system import InvalidPathError, Workspace, WorkspaceError, WorkspaceReason
from tests._vectors import load_vector_file, load_vectors
from tests.flux_system.workspace._escape_harness import (
    OPS,
    Finding,
    MakeWorkspace,
    OutsideSnapshot,
    WorkspaceLike,
    applicable_ops,
    build_layout,
    run_op,
    scratch_dir,
)
from tests.flux_system.workspace._naive import NaiveWorkspace, PlainWorkspace
from tests.flux_system.workspace._ws_support import RESOLVERS, resolver  # noqa: F401

CASES = load_vectors("flux_system", "paths")
REAL = [c for c in CASES if not c.get("negative_control")]
CONTROLS = [c for c in CASES if c.get("negative_control")]
ESCAPES = [c for c in REAL if c["expect"] == "escape" and not c.get("always_fails")]
# The control runs need only show that a case escapes: a read, a listing, a write, an
# in-place write and a recursive removal (other ops when a case restricts them).
CONTROL_OPS = frozenset(
    {"read_bytes", "list_dir", "write_bytes", "append_bytes", "remove_recursive", "stat"}
)


def _id(case: Mapping[str, Any]) -> str:
    return str(case["id"])


def workspace_factory(resolver: str) -> MakeWorkspace:
    def make(root: str, options: Mapping[str, Any]) -> WorkspaceLike:
        ws: WorkspaceLike = Workspace(root, resolver=resolver, **options)
        return ws

    return make


def control_factory(cls: type[PlainWorkspace]) -> MakeWorkspace:
    def make(root: str, options: Mapping[str, Any]) -> WorkspaceLike:
        return cls(root, **options)

    return make


def run_case(
    case: Mapping[str, Any], make: MakeWorkspace, tmp: Path, only: frozenset[str] | None = None
) -> list[Finding]:
    ops = applicable_ops(case)
    if only is not None and set(ops) & only:
        ops = [op for op in ops if op in only]
    findings: list[Finding] = []
    with scratch_dir(tmp) as where:
        for i, op in enumerate(ops):
            findings += run_op(case, op, make, where / f"{i}-{op}")
    return findings


def test_vector_file_shape() -> None:
    doc = load_vector_file("flux_system", "paths")
    assert {"description", "sources", "layout", "fs_syntax", "expect"} <= set(doc["provenance"])
    assert len(REAL) >= 80
    assert len(CONTROLS) >= 1
    sources = " ".join(c["source"] for c in CASES)
    for origin in ("root_test.go", "openat2", "cap-std", "CVE-2025-53109", "CVE-2022-21658"):
        assert origin in sources
    for c in CASES:
        assert c["expect"] in ("ok", "escape", "error", "invalid"), c["id"]
        assert set(c.get("ops", OPS)) <= set(OPS), c["id"]
        if c["expect"] in ("escape", "error", "invalid") and not c.get("negative_control"):
            assert c.get("reasons"), c["id"]
        if c["expect"] == "ok" and not c.get("negative_control"):
            assert "target" in c, c["id"]
    # the table exercises escapes on every operation, not only reads
    covered = {op for c in ESCAPES for op in applicable_ops(c)}
    assert covered == set(OPS)


@pytest.mark.parametrize("case", REAL, ids=_id)
def test_escape_table(case: Mapping[str, Any], resolver: str, tmp_path: Path) -> None:
    findings = run_case(case, workspace_factory(resolver), tmp_path)
    assert findings == [], "\n".join(map(str, findings))


@pytest.mark.parametrize("case", CONTROLS, ids=_id)
def test_negative_control_is_reported(
    case: Mapping[str, Any], resolver: str, tmp_path: Path
) -> None:
    findings = run_case(case, workspace_factory(resolver), tmp_path)
    assert any(f.kind == "mismatch" for f in findings), "harness missed a wrong expectation"


@pytest.mark.parametrize("case", ESCAPES, ids=_id)
def test_escape_case_really_escapes_without_confinement(
    case: Mapping[str, Any], tmp_path: Path
) -> None:
    """An unconfined workspace fails every escape case, and the canaries see it."""
    findings = run_case(case, control_factory(PlainWorkspace), tmp_path, CONTROL_OPS)
    assert any(f.kind == "mismatch" for f in findings), "case passes unconfined: not an escape"
    if _lands_outside(case, tmp_path / "probe") and not case.get("host_target"):
        assert any(f.kind in ("outside", "canary") for f in findings), (
            "unconfined run reached outside but no canary or snapshot check fired:\n"
            + "\n".join(map(str, findings))
        )


def _lands_outside(case: Mapping[str, Any], where: Path) -> bool:
    """Whether plain host resolution of the case's path ends outside its root."""
    layout = build_layout(where, case)
    try:
        real = os.path.realpath(os.path.join(layout.root, layout.sub(case["path"])))
        root = os.path.realpath(layout.root)
        return real != root and not real.startswith(root + os.sep)
    finally:
        layout.close()


@pytest.mark.parametrize("case", [c for c in ESCAPES if not c.get("host_target")], ids=_id)
def test_naive_resolver_holds_on_a_static_tree(case: Mapping[str, Any], tmp_path: Path) -> None:
    """The naive resolver stops static escapes from reaching outside: only a race beats
    it (test_workspace_races), which is why it is the baseline there."""
    findings = run_case(case, control_factory(NaiveWorkspace), tmp_path, CONTROL_OPS)
    assert not [f for f in findings if f.kind in ("outside", "canary")], "\n".join(
        map(str, findings)
    )


@pytest.mark.parametrize("bad", [b"file", None, 3, ["file"]], ids=repr)
def test_non_str_paths_are_refused(bad: object, resolver: str, tmp_path: Path) -> None:
    layout = build_layout(tmp_path, {"fs": ["file"]})
    with Workspace(str(layout.root), resolver=resolver) as ws:
        for call in (
            lambda: ws.read_bytes(bad),  # type: ignore[arg-type]
            lambda: ws.write_bytes(bad, b"x"),  # type: ignore[arg-type]
            lambda: ws.exists(bad),  # type: ignore[arg-type]
            lambda: ws.remove(bad, recursive=True),  # type: ignore[arg-type]
            lambda: ws.rename("file", bad),  # type: ignore[arg-type]
            lambda: ws.symlink(bad, "x"),  # type: ignore[arg-type]
        ):
            with pytest.raises((TypeError, InvalidPathError)):
                call()
    assert (layout.root / "file").read_bytes() == b"inside:file"
    assert sorted(p.name for p in layout.root.iterdir()) == ["file"]


def test_closed_workspace_refuses_everything(resolver: str, tmp_path: Path) -> None:
    layout = build_layout(tmp_path, {"fs": ["file"]})
    ws = Workspace(str(layout.root), resolver=resolver)
    ws.close()
    for call in (lambda: ws.read_bytes("file"), lambda: ws.write_bytes("new", b"x")):
        with pytest.raises(WorkspaceError) as info:
            call()
        assert info.value.reason is WorkspaceReason.CLOSED
    assert sorted(p.name for p in layout.root.iterdir()) == ["file"]


def test_snapshot_sees_a_bare_read_and_a_listing_outside(tmp_path: Path) -> None:
    """The "nothing outside was read" check does not depend on bytes reaching the
    caller: a read or a directory listing outside moves an atime the snapshot sees."""
    with scratch_dir(tmp_path) as where:
        layout = build_layout(where, {})
        assert OutsideSnapshot(layout).diff() == []  # (a diff is single-use: it reads)
        snap = OutsideSnapshot(layout)
        with open(layout.out / "canary", "rb") as f:
            f.read(1)
        os.listdir(layout.out / "d")
        problems = snap.diff()
        assert any("OUT/canary (atime_ns)" in p for p in problems), problems
        assert any("OUT/d (atime_ns)" in p for p in problems), problems
        assert len(problems) == 2, problems
        snap = OutsideSnapshot(layout)
        (layout.base / "canary").write_bytes(b"changed")
        os.unlink(layout.out / "target")
        os.mkdir(layout.base / "ROOT-evil" / "new")
        problems = snap.diff()
        assert any(p.startswith("deleted outside") and p.endswith("OUT/target") for p in problems)
        assert any(
            p.startswith("created outside") and p.endswith("ROOT-evil/new") for p in problems
        )
        assert any(p.endswith("/canary (size, mtime_ns, data)") for p in problems), problems


@pytest.mark.parametrize("value", ["false", "yes", 0, 1, None], ids=repr)
def test_unconfined_is_never_implied(value: object, tmp_path: Path) -> None:
    """Only the bool True opens the hatch: a truthy or falsy stand-in is a TypeError."""
    with pytest.raises(TypeError):
        Workspace(str(tmp_path), unconfined=value)  # type: ignore[arg-type]
