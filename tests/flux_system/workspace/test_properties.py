"""Hypothesis: generated trees and paths never let the Workspace touch the outside.

Trees hold directories, files and symlinks whose targets are absolute (into the root,
into OUT, through ``/proc/self/root``), relative, dangling, chained, self-referencing
and looping, plus an outside link back into the root. Generated sequences of operations
with generated paths then run on both resolvers. Properties:

- nothing outside the root is read, created, changed or deleted (full snapshot with
  atimes, as in the escape table);
- every successful read returns the content of a file that was inside the root just
  before the read (never a canary);
- the two resolvers agree on every read-only operation over the same tree.

Safety of the test itself: generated ``..`` runs are bounded (at most
``MAX_COMPONENTS`` per path or target) and the tree sits ``NEST`` directories deep in
a scratch directory, so even a broken implementation that followed everything could
not climb out of the scratch area.
"""
# ruff: noqa: F811 - the resolver fixture imported from _ws_support is a parameter here

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from flux_system import ConfinementError, FluxSystemError, Workspace, WorkspaceError
from tests._capabilities import require
from tests.flux_system.workspace._escape_harness import (
    CANARY,
    Layout,
    OpArgs,
    OutsideSnapshot,
    build_layout,
    call_op,
    have_openat2,
    scratch_dir,
)
from tests.flux_system.workspace._naive import PlainWorkspace
from tests.flux_system.workspace._ws_support import RESOLVERS, resolver  # noqa: F401

NAMES = ("a", "b", "c")
COMPONENTS = ("a", "b", "c", ".", "..", "OUT", "canary", "d", "back", "ROOT", "ROOT-evil")
MAX_COMPONENTS = 4  # bounds the `..` run of any generated path or target
MAX_DEPTH = 3
NEST = 8  # scratch/n0/.../n7/base: deeper than any generated `..` run can climb
OUTSIDE_EXTRA = ["OUT/back => ../ROOT", "OUT/loop => loop"]
# Names only the outside holds: no generated path can create them inside.
OUTSIDE_ONLY = frozenset({"outside_only", "target", "loop"}) - set(COMPONENTS)

rel_paths = st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=MAX_COMPONENTS).map("/".join)
targets = st.one_of(
    rel_paths,
    rel_paths.map(lambda p: "$ROOT/" + p),
    rel_paths.map(lambda p: "$OUT/" + p),
    rel_paths.map(lambda p: "/proc/self/root$ROOT/" + p),
    st.sampled_from(
        [
            "$ROOT",
            "$OUT",
            "$OUT/canary",
            "$OUT/d",
            "../OUT",
            "../OUT/back",
            "../OUT/loop",
            "..",
            ".",
            "a",
            "a/b",
            "/proc/self/root$OUT/canary",
        ]
    ),
)
paths = st.one_of(
    rel_paths,
    rel_paths.map(lambda p: p + "/"),
    rel_paths.map(lambda p: "$ROOT/" + p),
    st.sampled_from(["$OUT/canary", "$BASE/ROOT-evil/canary", ".", "a/b/c"]),
)


def _nodes(depth: int) -> st.SearchStrategy[Any]:
    leaf = st.one_of(st.just(("file",)), targets.map(lambda t: ("link", t)))
    if depth == 0:
        return leaf
    return st.one_of(
        leaf,
        st.dictionaries(st.sampled_from(NAMES), _nodes(depth - 1), max_size=3).map(
            lambda d: ("dir", d)
        ),
    )


trees = st.dictionaries(st.sampled_from(NAMES), _nodes(MAX_DEPTH - 1), max_size=3)


def tree_specs(tree: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """The generated tree as makefs entries (see the escape harness)."""
    for name, node in sorted(tree.items()):
        path = prefix + name
        if node[0] == "file":
            yield path
        elif node[0] == "link":
            yield f"{path} => {node[1]}"
        else:
            yield path + "/"
            yield from tree_specs(node[1], path + "/")


READ_OPS = ("read_bytes", "open_read", "stat", "exists", "is_dir", "list_dir", "walk", "resolve")
WRITE_OPS = (
    "write_bytes",
    "append_bytes",
    "mkdir",
    "remove",
    "remove_recursive",
    "rename_to",
    "rename_from",
    "copy_from",
    "copy_to",
    "chmod",
    "symlink",
)
steps = st.lists(
    st.tuples(st.sampled_from(READ_OPS + WRITE_OPS), paths, targets), min_size=1, max_size=8
)


def _layout(scratch: Path, tree: Mapping[str, Any], n: int) -> Layout:
    where = scratch / str(n)
    for i in range(NEST):
        where = where / f"n{i}"
    return build_layout(where, {"fs": list(tree_specs(tree)), "outside_fs": OUTSIDE_EXTRA})


def inside_contents(root: Path) -> set[bytes]:
    """Contents of every regular file beneath *root* (symlinks not followed)."""
    out: set[bytes] = set()
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if stat.S_ISREG(os.lstat(p).st_mode):
                out.add(p.read_bytes())
    return out


# What the generated steps run with (kept from before the dispatch was shared).
STEP_ARGS = OpArgs(
    data=b"generated",
    append=b"+",
    copy_src="a",
    copy_dst="copied",
    rename_src="a",
    rename_dst="moved",
    exist_ok=True,
    read_size=-1,
)


def run_step(ws: Workspace, op: str, path: str, target: str) -> Any:
    return call_op(ws, op, path, target, STEP_ARGS)


@dataclass(frozen=True)
class Outcome:
    kind: str  # ok | confinement | workspace
    value: object


def outcome(ws: Workspace, op: str, path: str) -> Outcome:
    try:
        result = run_step(ws, op, path, ".")
    except ConfinementError:
        return Outcome("confinement", None)
    except WorkspaceError as exc:
        return Outcome("workspace", exc.reason)
    if op in ("list_dir", "walk"):
        result = sorted(result)
    return Outcome("ok", result)


def check_sequence(
    make: Callable[[str], Any],
    tree: Mapping[str, Any],
    sequence: list[tuple[str, str, str]],
    scratch: Path,
    refusals: tuple[type[Exception], ...] = (FluxSystemError,),
) -> list[str]:
    """Run *sequence* on a fresh tree; return every property violation seen."""
    layout = _layout(scratch, tree, 0)
    snap = OutsideSnapshot(layout)
    problems: list[str] = []
    ws = make(str(layout.root))
    try:
        for op, raw_path, raw_target in sequence:
            path, target = layout.sub(raw_path), layout.sub(raw_target)
            legit = inside_contents(layout.root) if op in ("read_bytes", "open_read") else set()
            try:
                result = run_step(ws, op, path, target)
            except refusals:
                continue
            if op in ("read_bytes", "open_read") and result not in legit:
                problems.append(f"{op}({path!r}) returned {result!r:.60}: not an inside file")
            if op in ("list_dir", "walk") and any(
                n in OUTSIDE_ONLY for e in result for n in e.split("/")
            ):
                problems.append(f"{op}({path!r}) listed outside names: {result}")
            if op == "resolve":
                real_root = Path(os.path.realpath(layout.root))
                if result != real_root and real_root not in result.parents:
                    problems.append(f"resolve({path!r}) = {result}: outside the root")
    finally:
        ws.close()
    problems += snap.diff()
    problems += [  # regular files only: a renamed link to outside is not a copy
        f"canary copied inside: {p}"
        for p in (layout.root / n for n in ("copied", "moved"))
        if os.path.lexists(p) and stat.S_ISREG(os.lstat(p).st_mode) and CANARY in p.read_bytes()
    ]
    return problems


@given(tree=trees, sequence=steps)
def test_generated_operations_never_touch_outside(
    tree: Mapping[str, Any], sequence: list[tuple[str, str, str]], resolver: str, tmp_path: Path
) -> None:
    with scratch_dir(tmp_path / "h") as scratch:
        problems = check_sequence(
            lambda root: Workspace(root, resolver=resolver), tree, sequence, scratch
        )
    assert problems == [], f"tree={list(tree_specs(tree))}\n" + "\n".join(problems)


def test_generated_inputs_do_reach_outside_without_confinement(tmp_path: Path) -> None:
    """Control: the same generators and checks catch an unconfined workspace, so the
    property above is not vacuous."""
    with scratch_dir(tmp_path / "h") as scratch:
        counter = iter(range(10**6))

        def escapes(example: tuple[Mapping[str, Any], list[tuple[str, str, str]]]) -> bool:
            tree, sequence = example
            return bool(
                check_sequence(
                    PlainWorkspace,
                    tree,
                    sequence,
                    scratch / str(next(counter)),
                    (FluxSystemError, OSError),
                )
            )

        found = find(
            st.tuples(trees, steps),
            escapes,
            settings=settings(
                max_examples=500, database=None, derandomize=True, phases=[Phase.generate]
            ),
        )
    assert found is not None


@given(tree=trees, probes=st.lists(st.tuples(st.sampled_from(READ_OPS), paths), max_size=8))
def test_resolvers_agree_on_reads(
    tree: Mapping[str, Any], probes: list[tuple[str, str]], tmp_path: Path
) -> None:
    """openat2 and the per-component walk give the same answer on the same tree."""
    require(have_openat2(), "openat2(2)")
    with scratch_dir(tmp_path / "h") as scratch:
        layout = _layout(scratch, tree, 0)
        snap = OutsideSnapshot(layout)
        with (
            Workspace(str(layout.root), resolver="openat2") as fast,
            Workspace(str(layout.root), resolver="walk") as slow,
        ):
            for op, raw in probes:
                path = layout.sub(raw)
                a, b = outcome(fast, op, path), outcome(slow, op, path)
                assert a == b, f"{op}({path!r}) openat2={a} walk={b} tree={list(tree_specs(tree))}"
        assert snap.diff() == []


def inside_state(root: Path, base: Path) -> dict[str, object]:
    """Names, kinds, link texts (with *base* spelled $BASE) and file contents beneath
    *root*, nothing followed."""
    state: dict[str, object] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(p).replace(str(base), "$BASE"))
            elif stat.S_ISREG(st.st_mode):
                state[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
            else:
                state[rel] = ("dir",)
    return state


@given(tree=trees, sequence=steps)
def test_resolvers_agree_on_mutations(
    tree: Mapping[str, Any], sequence: list[tuple[str, str, str]], tmp_path: Path
) -> None:
    """The same operations on two copies of one tree: same outcomes, same final tree."""
    require(have_openat2(), "openat2(2)")
    with scratch_dir(tmp_path / "h") as scratch:
        results = []
        for n, resolver in enumerate(RESOLVERS):
            layout = _layout(scratch, tree, n)
            outcomes = []
            with Workspace(str(layout.root), resolver=resolver) as ws:
                for op, raw_path, raw_target in sequence:
                    path, target = layout.sub(raw_path), layout.sub(raw_target)
                    try:
                        value = run_step(ws, op, path, target)
                    except ConfinementError:
                        outcomes.append((op, raw_path, "confinement"))
                        continue
                    except WorkspaceError as exc:
                        outcomes.append((op, raw_path, exc.reason.value))
                        continue
                    if op in ("list_dir", "walk"):  # walk joins the path as given
                        value = sorted(e.replace(str(layout.base), "$BASE") for e in value)
                    if op == "resolve":
                        value = value.relative_to(os.path.realpath(layout.root))
                    if op == "stat":
                        value = (value.kind, value.size)
                    outcomes.append((op, raw_path, value))
            results.append((outcomes, inside_state(layout.root, layout.base)))
        (steps_a, state_a), (steps_b, state_b) = results
        assert steps_a == steps_b, f"tree={list(tree_specs(tree))}"
        assert state_a == state_b, f"tree={list(tree_specs(tree))}"
