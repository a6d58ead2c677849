"""A symlink is decided on where it leads as well as on its name (an outside attack).

``notes.txt -> .env`` with a deny on ``.env``: every file operation used to judge the
link's name only, so ``read notes.txt`` read the denied file. Each test first shows the
link works (the substrate itself follows it: the attack is real), then that the
envelope refuses it, and that an allowed link still works.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_runtime import Call, Context, EnvelopeError, EnvelopeReason, ScriptedApprover
from flux_system.remote import connect
from tests.flux_runtime._runtime import Rig, rig
from tests.flux_system.remote._harness import served

SECRET = "API_TOKEN=zq8-link-secret-4411"

NO_SECRETS = """
version = 1
[[grant]]
id = "all"
subjects = ["**"]
actions = ["**"]
resources = ["workspace", "workspace/**"]
[[deny]]
id = "no-dotenv"
subjects = ["**"]
actions = ["**"]
resources = ["workspace/.env", "workspace/**/.env", "workspace/secrets", "workspace/secrets/**"]
"""


def _ctx() -> Context:
    return Context("s1", "agent", approver=ScriptedApprover([True] * 10))


def _seed(root: Path) -> None:
    (root / ".env").write_text(SECRET + "\n")
    (root / "secrets").mkdir()
    (root / "secrets" / "key").write_text(SECRET + "\n")
    (root / "real.txt").write_text("plain text\n")
    os.symlink(".env", root / "notes.txt")
    os.symlink("secrets", root / "link")
    os.symlink("real.txt", root / "fine.txt")


def _denied(r: Rig, op: str, inp: dict[str, object]) -> None:
    out = r.executor.dispatch(Call(op, inp), _ctx())
    assert not out.ok and out.reason is EnvelopeReason.POLICY_DENIED, (op, inp, out)
    assert "link-secret" not in out.view
    assert not r.executor.admissible(Call(op, inp), _ctx())


CASES = [
    ("read", {"path": "notes.txt"}),
    ("read", {"path": "link/key"}),
    ("read_many", {"paths": ["real.txt", "notes.txt"]}),
    ("read_many", {"paths": ["link/key"]}),
    ("file_stat", {"path": "notes.txt"}),
    ("file_stat", {"path": "link/key"}),
    ("path_exists", {"path": "link/key"}),
    ("grep", {"pattern": ".", "path": "link"}),
    ("glob", {"pattern": "*", "path": "link"}),
    ("edit", {"path": "notes.txt", "old": "API", "new": "XX"}),
    ("patch", {"path": "link/key", "edits": [{"old": "API", "new": "XX"}]}),
    ("write", {"path": "notes.txt", "content": "overwritten"}),
    ("write", {"path": "link/new", "content": "planted"}),
    ("append", {"path": "notes.txt", "content": "more"}),
    ("append", {"path": "link/key", "content": "more"}),
]


@pytest.mark.parametrize(("op", "inp"), CASES, ids=[f"{o}-{i}" for i, (o, _) in enumerate(CASES)])
def test_a_link_to_a_denied_file_is_denied(tmp_path: Path, op: str, inp: dict[str, object]) -> None:
    with rig(tmp_path, policy=NO_SECRETS) as r:
        _seed(r.root)
        # Positive control: the substrate follows both links to the secret.
        assert SECRET in r.substrate.files.read_text("notes.txt")
        assert SECRET in r.substrate.files.read_text("link/key")
        _denied(r, op, inp)
        assert (r.root / ".env").read_text() == SECRET + "\n"
        assert (r.root / "secrets" / "key").read_text() == SECRET + "\n"
        assert not (r.root / "secrets" / "new").exists()
        assert "link-secret" not in r.log_path.read_text()


def test_walks_skip_a_link_to_a_denied_file(tmp_path: Path) -> None:
    with rig(tmp_path, policy=NO_SECRETS) as r:
        _seed(r.root)
        grep = r.executor.dispatch(Call("grep", {"pattern": "."}), _ctx())
        assert grep.ok and "real.txt:1:plain text" in grep.view  # positive control
        assert "fine.txt:1:plain text" in grep.view  # an allowed link is read
        assert "link-secret" not in grep.view and "notes.txt" not in grep.view
        glob = r.executor.dispatch(Call("glob", {"pattern": "*"}), _ctx())
        assert glob.ok and "real.txt" in glob.view and "fine.txt" in glob.view
        assert "notes.txt" not in glob.view and "link/key" not in glob.view


def test_an_allowed_link_still_works(tmp_path: Path) -> None:
    with rig(tmp_path, policy=NO_SECRETS) as r:
        _seed(r.root)
        read = r.executor.dispatch(Call("read", {"path": "fine.txt"}), _ctx())
        assert read.ok and "plain text" in read.view
        edit = Call("edit", {"path": "fine.txt", "old": "plain", "new": "edited"})
        assert r.executor.dispatch(edit, _ctx()).ok
        assert (r.root / "real.txt").read_text() == "edited text\n"
        assert os.path.islink(r.root / "fine.txt")
        made = r.executor.dispatch(Call("write", {"path": "new/dir/f.txt", "content": "x"}), _ctx())
        assert made.ok and (r.root / "new" / "dir" / "f.txt").read_text() == "x"


def test_a_dangling_link_is_not_written_through(tmp_path: Path) -> None:
    with rig(tmp_path, policy=NO_SECRETS) as r:
        os.symlink(".env", r.root / "notes.txt")  # .env does not exist yet
        os.symlink("made-by-probe", r.root / "probe-link")
        # Positive control: the substrate writes through a dangling link, creating its target.
        r.substrate.files.write_bytes("probe-link", b"1")
        assert (r.root / "made-by-probe").exists()
        for op in ("write", "append"):
            out = r.executor.dispatch(Call(op, {"path": "notes.txt", "content": "X=1"}), _ctx())
            assert not out.ok and out.reason is EnvelopeReason.OPERATION_FAILED, out
            assert "dangling" in out.view
        assert not (r.root / ".env").exists()


def test_remove_acts_on_the_link_itself(tmp_path: Path) -> None:
    with rig(tmp_path, policy=NO_SECRETS) as r:
        _seed(r.root)
        out = r.executor.dispatch(Call("remove", {"path": "notes.txt"}), _ctx())
        assert out.ok, out
        assert not os.path.lexists(r.root / "notes.txt")
        assert (r.root / ".env").read_text() == SECRET + "\n"
        _denied(r, "remove", {"path": "link/key"})
        assert (r.root / "secrets" / "key").exists()


def test_a_link_is_decided_on_its_target_on_a_remote_substrate(tmp_path: Path) -> None:
    root = tmp_path / "remote-ws"
    root.mkdir()
    _seed(root)
    with (
        served(root) as srv,
        connect(srv.target) as sub,
        rig(tmp_path, substrate=sub, policy=NO_SECRETS) as r,
    ):
        assert SECRET in sub.files.read_text("notes.txt")  # positive control
        _denied(r, "read", {"path": "notes.txt"})
        _denied(r, "read", {"path": "link/key"})
        ok = r.executor.dispatch(Call("read", {"path": "fine.txt"}), _ctx())
        assert ok.ok and "plain text" in ok.view
        grep = r.executor.dispatch(Call("grep", {"pattern": "."}), _ctx())
        assert grep.ok and "real.txt" in grep.view and "link-secret" not in grep.view


NAMES = ["a", "b", "c", ".env"]


@st.composite
def _trees(draw: st.DrawFn) -> tuple[list[tuple[str, str]], list[str]]:
    """Directories and files two levels deep, and relative links among them (to
    existing entries or not, some through ``..``), then paths to look up."""
    entries: list[tuple[str, str]] = []
    for d in draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True)):
        entries.append(("dir", d))
        for f in draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True)):
            entries.append(("file", f"{d}/{f}"))
    taken = {name for _, name in entries}
    for _ in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(["", *[n for k, n in entries if k == "dir"]]))
        name = (where + "/" if where else "") + draw(st.sampled_from(["l1", "l2", "l3"]))
        if name in taken:
            continue
        up = "../" * where.count("/") + ("../" if where else "")
        known = [n.split("\0")[0] for _, n in entries]
        target = up + draw(st.sampled_from([*NAMES, *known, "nope"]))
        entries.append(("link", f"{name}\0{target}"))
        taken.add(name)
    parts = st.sampled_from([*NAMES, "l1", "l2", "l3", "..", "nope"])
    paths = draw(st.lists(st.lists(parts, min_size=1, max_size=3).map("/".join), max_size=6))
    return entries, paths


@settings(max_examples=100, deadline=None)
@given(tree=_trees())
def test_the_resolved_name_is_the_one_the_kernel_reaches(tree: Any) -> None:
    # Differential: where resolved_resource says a path leads, against the host's own
    # realpath of the same tree (links stay beneath the root: realpath's answer is the
    # confined one whenever the lookup does not leave it).
    import tempfile

    from flux_runtime._targets import resolved_resource
    from flux_system import FluxSystemError, Workspace

    entries, paths = tree
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.realpath(tmp)
        for kind, name in entries:
            if kind == "dir":
                os.makedirs(os.path.join(root, name), exist_ok=True)
            elif kind == "file":
                with open(os.path.join(root, name), "w") as fh:
                    fh.write("x")
            else:
                link, target = name.split("\0")
                os.symlink(target, os.path.join(root, link))
        ws = Workspace(root)
        try:
            for path in paths:
                full = os.path.join(root, path)
                real = os.path.realpath(full)
                inside = real == root or real.startswith(root + "/")
                parts = path.split("/")
                prefixes = [os.path.join(root, *parts[:i]) for i in range(1, len(parts) + 1)]
                # realpath goes on lexically through a dangling link; the kernel stops
                # there (and the workspace writes nothing through one): not compared.
                dangling = any(os.path.islink(p) and not os.path.exists(p) for p in prefixes)
                through_file = any(os.path.isfile(p) for p in prefixes[:-1])  # ENOTDIR
                try:
                    got = resolved_resource(ws, "read", path, "target", writes=False, roots={})
                except (FluxSystemError, EnvelopeError):
                    assert not inside or ".." in parts or dangling or through_file, (path, real)
                    continue
                assert inside, (path, real, got)
                if dangling:
                    continue
                rel = os.path.relpath(real, root)
                assert got == ("workspace" if rel == "." else f"workspace/{rel}"), (path, got)
        finally:
            ws.close()
