"""``Workspace.link_free``: True exactly when a path exists and no component is a link.

Checked against the slow answer (``resolve`` equal to the root joined with the
normalized name) on generated trees, and on the cases by hand.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_system import PathEscapeError, Workspace, WorkspaceError
from flux_system.workspace._resolve import openat2_available
from tests._capabilities import require


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    require(openat2_available(), "openat2 (Linux >= 5.6) for the one-syscall check")
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f.txt").write_text("x")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key").write_text("k")
    (tmp_path / "link").symlink_to("secrets")
    (tmp_path / "d" / "to-key").symlink_to("../secrets/key")
    (tmp_path / "dangling").symlink_to("nowhere")
    (tmp_path / "out").symlink_to("/etc")
    (tmp_path / "top.txt").write_text("t")
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("d/e/f.txt", True),
        ("d/./e//f.txt", True),
        ("d/e/../e/f.txt", True),
        (".", True),
        ("d", True),
        ("link/key", False),  # a directory link in the middle
        ("link", False),
        ("d/to-key", False),  # a final link
        ("dangling", False),
        ("missing", False),
        ("d/missing/f", False),
        ("d/e/f.txt/", False),  # a trailing slash on a file
        ("out/passwd", False),  # leaves the root through a link
        # one name in the root's own directory (answered by one lstat)
        ("top.txt", True),
        ("secrets", True),
        ("fifo", True),  # exists, no link (reading it is another check's business)
        ("out", False),  # a link to outside
        ("..", False),  # the root's parent is not beneath it
        ("top.txt/", False),
        ("./top.txt", True),
    ],
)
def test_link_free_cases(tree: Path, path: str, expected: bool) -> None:
    with Workspace(tree) as ws:
        assert ws.link_free(path) is expected
        if expected:  # the slow answer agrees: it resolves to its own name
            assert str(ws.resolve(path)) == posixpath.normpath(os.path.join(tree, path))


def test_link_free_refuses_what_the_workspace_refuses(tree: Path) -> None:
    with Workspace(tree) as ws:
        with pytest.raises(PathEscapeError):
            ws.link_free("/etc/passwd")
    with pytest.raises(WorkspaceError):
        ws.link_free("d")  # closed


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.booleans()), min_size=1, max_size=4),
    st.lists(st.sampled_from(["a", "b", "c", ".", ".."]), min_size=1, max_size=5),
)
def test_link_free_agrees_with_resolve(
    tmp_path_factory: pytest.TempPathFactory,
    layout: list[tuple[str, bool]],
    probe: list[str],
) -> None:
    require(openat2_available(), "openat2 (Linux >= 5.6) for the one-syscall check")
    root = tmp_path_factory.mktemp("lf")
    here = root
    for name, as_link in layout:  # a chain of directories, some of them reached by links
        target = here / f"{name}-real"
        target.mkdir(exist_ok=True)
        entry = here / name
        if not entry.exists() and not entry.is_symlink():
            if as_link:
                entry.symlink_to(f"{name}-real")
            else:
                target.rename(entry)
        here = entry if entry.is_dir() else target
    path = "/".join(probe)
    with Workspace(root) as ws:
        fast = ws.link_free(path)
        try:
            slow = str(ws.resolve(path))
        except (PathEscapeError, WorkspaceError):
            slow = None
        if fast:  # never claims link-free for a path that resolves elsewhere
            assert slow == posixpath.normpath(os.path.join(root, path))
