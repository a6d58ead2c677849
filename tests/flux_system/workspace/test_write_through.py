"""Writes follow a final symlink beneath the root (DESIGN §2.2, decision 0016).

``write_bytes``, ``copy``'s destination and ``append_bytes`` write *through* a final
link whose target lies inside: the link is kept and the target gets the data (a write
to ``CLAUDE.md -> AGENTS.md`` used to replace the link). A link whose target leaves the
root — absolute, relative, dangling or not, through a chain — is ``PathEscapeError``
and nothing is created or changed, inside or outside. Every case runs on both
resolvers; outside state is compared as a full snapshot.
"""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from flux_system import (
    ConfinementReason,
    NamedRoot,
    NotFoundError,
    PathEscapeError,
    Workspace,
    WorkspaceError,
    WorkspaceReason,
)
from tests.flux_system.workspace._ws_support import outside, resolver, root, ws  # noqa: F401

Write = Callable[[Workspace, str], None]


def _write(w: Workspace, path: str) -> None:
    w.write_bytes(path, b"DATA")


def _copy(w: Workspace, path: str) -> None:
    w.copy("copy_src", path)


def _append(w: Workspace, path: str) -> None:
    w.append_bytes(path, b"DATA")


WRITES: dict[str, Write] = {"write_bytes": _write, "copy": _copy, "append_bytes": _append}


@pytest.fixture(params=sorted(WRITES))
def write(request: pytest.FixtureRequest, root: Path) -> Write:
    (root / "copy_src").write_bytes(b"DATA")
    return WRITES[str(request.param)]


def _expected(write: Write, before: bytes) -> bytes:
    return before + b"DATA" if write is _append else b"DATA"


def _snapshot(top: Path) -> dict[str, tuple[int, int, int, bytes | str | None]]:
    out: dict[str, tuple[int, int, int, bytes | str | None]] = {}
    for dirpath, dirs, files in os.walk(top):
        for n in [*dirs, *files]:
            p = Path(dirpath) / n
            st = os.lstat(p)
            body: bytes | str | None = None
            if stat.S_ISREG(st.st_mode):
                body = p.read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(p)
            out[str(p.relative_to(top))] = (st.st_ino, st.st_mode, st.st_mtime_ns, body)
    return out


# -- targets inside: written through, link kept -----------------------------------------

INSIDE = [
    # (link location, link text, where the data lands)
    ("CLAUDE.md", "AGENTS.md", "AGENTS.md"),
    ("sub/link", "../AGENTS.md", "AGENTS.md"),
    ("sub/link", "./deeper/../../AGENTS.md", "AGENTS.md"),
    ("link", "sub/file", "sub/file"),
    ("link", "dirlink/file", "sub/file"),  # through a linked directory
    ("sub/deeper/link", "../file", "sub/file"),
]


@pytest.mark.parametrize(("at", "text", "lands"), INSIDE)
def test_link_to_an_existing_file_inside_is_written_through(
    root: Path, resolver: str, write: Write, *, at: str, text: str, lands: str
) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "AGENTS.md").write_bytes(b"agents")
    (root / "sub" / "file").write_bytes(b"file")
    (root / "dirlink").symlink_to("sub")
    os.symlink(text, root / at)
    before = (root / lands).read_bytes()
    with Workspace(root, resolver=resolver) as w:
        write(w, at)
        assert w.read_bytes(at) == _expected(write, before)
    assert os.readlink(root / at) == text  # the link is kept
    assert (root / lands).read_bytes() == _expected(write, before)
    assert not [n for n in os.listdir(root / Path(lands).parent) if n.endswith(".flux-tmp")]


def test_dangling_link_inside_creates_its_target(root: Path, resolver: str, write: Write) -> None:
    (root / "sub").mkdir()
    os.symlink("sub/new", root / "link")
    os.symlink("link", root / "chain")  # a chain of two links
    with Workspace(root, resolver=resolver) as w:
        write(w, "chain")
    assert (root / "sub" / "new").read_bytes() == b"DATA"
    assert os.readlink(root / "link") == "sub/new" and os.readlink(root / "chain") == "link"


def test_dangling_link_into_a_missing_directory_creates_nothing(
    root: Path, resolver: str, write: Write
) -> None:
    os.symlink("missing/dir/new", root / "link")
    with Workspace(root, resolver=resolver) as w, pytest.raises(NotFoundError):
        write(w, "link")  # directories are never created from a link's text
    assert sorted(os.listdir(root)) == ["copy_src", "link"]


def test_write_through_keeps_mode_and_other_hard_link_names(root: Path, resolver: str) -> None:
    (root / "target").write_bytes(b"old")
    os.chmod(root / "target", 0o640)
    os.link(root / "target", root / "other")
    os.symlink("target", root / "link")
    with Workspace(root, resolver=resolver) as w:
        w.write_bytes("link", b"new")
    assert (root / "target").read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(root / "target").st_mode) == 0o640
    assert (root / "other").read_bytes() == b"old"  # the shared inode was not modified


def test_writable_named_root_writes_through_beneath_itself(
    root: Path, outside: Path, resolver: str
) -> None:
    named = outside / "named"
    named.mkdir()
    (named / "t").write_bytes(b"t")
    os.symlink("t", named / "in")
    os.symlink("../canary", named / "out")  # beside the named root: outside it
    with Workspace(
        root, named_roots={"n": NamedRoot(named, writable=True)}, resolver=resolver
    ) as w:
        w.write_bytes("@n/in", b"new")
        with pytest.raises(PathEscapeError):
            w.write_bytes("@n/out", b"new")
    assert (named / "t").read_bytes() == b"new"
    assert (outside / "canary").read_bytes() == b"CANARY"


# -- targets outside: refused, nothing created -----------------------------------------


def _escaping_links(root: Path, outside: Path) -> dict[str, ConfinementReason]:
    """Links planted in the root (by a child, say) and the reason each must give."""
    (root / "sub").mkdir()
    (root / "inside").write_bytes(b"inside")
    links = {
        "abs_out": (str(outside / "canary"), ConfinementReason.ABSOLUTE_SYMLINK),
        "abs_new": (str(outside / "new"), ConfinementReason.ABSOLUTE_SYMLINK),
        "abs_in": (str(root / "inside"), ConfinementReason.ABSOLUTE_SYMLINK),  # beneath
        "rel_out": ("../outside/canary", ConfinementReason.ESCAPE),
        "rel_new": ("../outside/new", ConfinementReason.ESCAPE),
        "sub/deep_out": ("../../outside/canary", ConfinementReason.ESCAPE),
        "back_in": (f"../{root.name}/inside", ConfinementReason.ESCAPE),  # out and back
        "chain": ("rel_out", ConfinementReason.ESCAPE),
        "via_dir": ("outdir/canary", ConfinementReason.ESCAPE),
        "outdir": ("../outside", ConfinementReason.ESCAPE),
        "loop_a": ("loop_b", ConfinementReason.SYMLINK_LOOP),
        "loop_b": ("loop_a", ConfinementReason.SYMLINK_LOOP),
    }
    for at, (text, _) in links.items():
        os.symlink(text, root / at)
    return {at: reason for at, (_, reason) in links.items()}


def test_links_leaving_the_root_are_refused_and_nothing_changes(
    root: Path, outside: Path, resolver: str, write: Write
) -> None:
    cases = _escaping_links(root, outside)
    inside, out = _snapshot(root), _snapshot(outside)
    seen: dict[str, ConfinementReason] = {}
    with Workspace(root, resolver=resolver) as w:
        for at in cases:
            with pytest.raises(PathEscapeError) as info:
                write(w, at)
            seen[at] = info.value.reason
            assert info.value.path == at
    assert seen == cases
    assert _snapshot(outside) == out
    assert _snapshot(root) == inside  # every link kept, no temp file, nothing created


def test_control_unconfined_follows_the_same_links_outside(
    root: Path, outside: Path, resolver: str
) -> None:
    """Positive control: with the hatch the same links really lead outside, so the
    refusals above are about confinement, not broken links."""
    _escaping_links(root, outside)
    with Workspace(root, unconfined=True, resolver=resolver) as w:
        w.write_bytes("abs_new", b"hatch")
        w.write_bytes("rel_out", b"hatch")
    assert (outside / "new").read_bytes() == b"hatch"
    assert (outside / "canary").read_bytes() == b"hatch"
    assert os.readlink(root / "rel_out") == "../outside/canary"


# -- what a write never replaces ---------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("d", WorkspaceReason.IS_A_DIRECTORY),
        ("link_to_dir", WorkspaceReason.IS_A_DIRECTORY),
        ("link_to_dotdot", WorkspaceReason.IS_A_DIRECTORY),
        ("link_to_slash", WorkspaceReason.IS_A_DIRECTORY),
        ("f/", WorkspaceReason.NOT_A_DIRECTORY),
        ("f/.", WorkspaceReason.NOT_A_DIRECTORY),
        ("link_to_f/", WorkspaceReason.NOT_A_DIRECTORY),
        ("link_to_f_slash", WorkspaceReason.NOT_A_DIRECTORY),
        ("{root}/f/", WorkspaceReason.NOT_A_DIRECTORY),
        ("missing/", WorkspaceReason.IS_A_DIRECTORY),
        ("d/", WorkspaceReason.IS_A_DIRECTORY),
    ],
)
def test_directories_and_trailing_slashes_are_never_replaced(
    root: Path, resolver: str, write: Write, path: str, reason: WorkspaceReason
) -> None:
    """As open(2) and Go's os.Root: a write onto a directory, or through a trailing
    slash onto something that is not one, refuses instead of renaming a file over it."""
    (root / "d").mkdir()
    (root / "d" / "keep").write_bytes(b"k")
    (root / "f").write_bytes(b"file")
    os.symlink("d", root / "link_to_dir")
    os.symlink("d/..", root / "link_to_dotdot")
    os.symlink("d/", root / "link_to_slash")
    os.symlink("f", root / "link_to_f")
    os.symlink("f/", root / "link_to_f_slash")
    before = _snapshot(root)
    with Workspace(root, resolver=resolver) as w, pytest.raises(WorkspaceError) as info:
        write(w, path.format(root=root))
    assert info.value.reason is reason
    assert _snapshot(root) == before
