"""TOCTOU races: an attacker *process* swaps a directory and a symlink to outside.

The attacker is a small Python child that calls ``renameat2(RENAME_EXCHANGE)`` on two
names inside the root in a tight loop, counting the swaps that succeeded (a thread
would rarely interleave under the GIL). While it runs, the workspace reads, writes,
creates, renames and recursively removes beneath the swapped name for a bounded time.
Afterwards nothing outside the root may have changed (full snapshot: content, mode,
mtime, atime, inode set) and no read may have returned canary content.

The same attacker beats the naive "realpath, check prefix, then open" resolver
(``_naive.NaiveWorkspace``) — shown by looping until its first escape — so these tests
can fail; both of our resolvers hold.
"""
# ruff: noqa: F811 - the resolver fixture imported from _ws_support is a parameter here

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from flux_system import FileInfo, FluxSystemError, Workspace
from tests._capabilities import require
from tests.flux_system.workspace._escape_harness import (
    CANARY,
    Layout,
    OutsideSnapshot,
    WorkspaceLike,
    build_layout,
    have_renameat2,
    renameat2_number,
    scratch_dir,
)
from tests.flux_system.workspace._naive import CheckThenJoinWorkspace, NaiveWorkspace
from tests.flux_system.workspace._ws_support import RESOLVERS, resolver  # noqa: F401

RACE_SECONDS = 1.0  # how long the workspace works under attack, per case
NAIVE_BOUND_SECONDS = 10.0  # generous bound for the naive resolver's first escape
ATTACKER_LIMIT_SECONDS = 30.0  # the child stops by itself even if never told to
CLOSE_DECOYS = 64  # outside-dir fds opened right after close() to grab freed numbers

# The attacker: swap argv[1] and argv[2] with renameat2(RENAME_EXCHANGE) until stdin
# closes (or its own time limit), then print how many swaps succeeded.
ATTACKER = r"""
import ctypes, select, sys, time
a, b = sys.argv[1].encode(), sys.argv[2].encode()
nr, limit = int(sys.argv[3]), float(sys.argv[4])
syscall = ctypes.CDLL(None, use_errno=True).syscall
args = (ctypes.c_long(nr), ctypes.c_long(-100), a, ctypes.c_long(-100), b, ctypes.c_uint(2))
deadline = time.monotonic() + limit
swaps = i = 0
sys.stdout.write("ready\n")
sys.stdout.flush()
while True:
    if syscall(*args) == 0:
        swaps += 1
    i += 1
    if i % 128 == 0 and (select.select([0], [], [], 0)[0] or time.monotonic() > deadline):
        break
sys.stdout.write(f"{swaps}\n")
sys.stdout.flush()
"""


@dataclass
class Attack:
    swaps: int = -1


@contextlib.contextmanager
def attacker(a: Path, b: Path) -> Iterator[Attack]:
    """Run the swapping child for the duration of the block; count its swaps."""
    nr = renameat2_number()
    assert nr is not None
    attack = Attack()
    child = subprocess.Popen(
        [sys.executable, "-c", ATTACKER, str(a), str(b), str(nr), str(ATTACKER_LIMIT_SECONDS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == b"ready\n"
        yield attack
    finally:
        try:
            out, _ = child.communicate(input=b"", timeout=10)  # EOF on stdin: stop
            attack.swaps = int(out.strip() or b"-1")
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()


@pytest.fixture
def where(tmp_path: Path) -> Iterator[Path]:
    require(have_renameat2(tmp_path), "renameat2(RENAME_EXCHANGE)")
    with scratch_dir(tmp_path) as path:
        yield path


# Inside, "sw" is a directory and "swlink" a symlink to ../OUT; the attacker exchanges
# the two names. OUT holds canaries under the same names the workspace works on.
# "swl" and "swnew" are final links *through* sw: writes follow them (decision 0016), so
# while sw is the link to OUT they would lead outside.
SW_TREE = [
    "sw/file",
    "sw/x",
    "sw/tree/a/b/leaf",
    "swlink => ../OUT",
    "swl => sw/file",
    "swnew => sw/brandnew",
]
OUT_TREE = ["OUT/file", "OUT/x", "OUT/tree/a/b/leaf", "OUT/new", "OUT/appended"]


def sw_layout(where: Path) -> Layout:
    return build_layout(where, {"fs": SW_TREE, "outside_fs": OUT_TREE})


OUTSIDE_ONLY = frozenset({"canary", "target", "d", "outside_only"})  # names only OUT has


@dataclass
class Tally:
    ok: int = 0
    refused: int = 0
    canary_reads: int = 0
    outside_inodes: frozenset[int] = frozenset()
    reasons: set[str] = dataclasses.field(default_factory=set)


def _attempt(tally: Tally, fn: Callable[[], object]) -> object:
    """Run one workspace call; a typed refusal is fine, anything else propagates.

    A result that could only come from outside counts as a canary read: canary bytes,
    a listing with a name only OUT holds, a FileInfo of an outside inode.
    """
    try:
        result = fn()
    except FluxSystemError as exc:
        tally.refused += 1
        tally.reasons.add(exc.reason.value)
        return None
    tally.ok += 1
    if isinstance(result, bytes) and CANARY in result:
        tally.canary_reads += 1
    if isinstance(result, list) and any(
        part in OUTSIDE_ONLY for entry in result for part in entry.split("/")
    ):
        tally.canary_reads += 1
    if isinstance(result, FileInfo) and result.inode in tally.outside_inodes:
        tally.canary_reads += 1
    return result


def _read(ws: WorkspaceLike, t: Tally, i: int) -> None:
    _attempt(t, lambda: ws.read_bytes("sw/file"))
    _attempt(t, lambda: ws.read_bytes("sw/tree/../file"))  # `..` under swaps (EAGAIN)
    _attempt(t, lambda: ws.read_bytes("sw/../sw/file"))
    with contextlib.suppress(FluxSystemError):
        with ws.open_read("sw/tree/a/b/leaf") as f:
            _attempt(t, lambda: f.read())
    _attempt(t, lambda: ws.list_dir("sw"))
    _attempt(t, lambda: ws.walk("sw"))
    _attempt(t, lambda: ws.stat("sw/x"))


def _write(ws: WorkspaceLike, t: Tally, i: int) -> None:
    _attempt(t, lambda: ws.write_bytes("sw/new", b"new %d" % i))
    _attempt(t, lambda: ws.write_bytes("sw/tree/a/b/leaf", b"leaf %d" % i))
    _attempt(t, lambda: ws.write_bytes(f"sw/made{i % 4}/deep/file", b"parents"))


def _create(ws: WorkspaceLike, t: Tally, i: int) -> None:
    _attempt(t, lambda: ws.mkdir("sw/made/deeper", exist_ok=True))
    _attempt(t, lambda: ws.append_bytes("sw/appended", b"."))
    _attempt(t, lambda: ws.copy("sw/file", "sw/copied"))
    _attempt(t, lambda: ws.chmod("sw/x", 0o600 if i % 2 else 0o640))
    _attempt(t, lambda: ws.symlink("file", "sw/ln"))
    _attempt(t, lambda: ws.remove("sw/ln"))


def _rename(ws: WorkspaceLike, t: Tally, i: int) -> None:
    _attempt(t, lambda: ws.rename("sw/x", "sw/y"))
    _attempt(t, lambda: ws.rename("sw/y", "sw/x"))


def _remove(ws: WorkspaceLike, t: Tally, i: int) -> None:
    _attempt(t, lambda: ws.remove("sw/tree", recursive=True))
    _attempt(t, lambda: ws.write_bytes("sw/tree/a/b/leaf", b"again"))
    _attempt(t, lambda: ws.remove("sw/x"))
    _attempt(t, lambda: ws.write_bytes("sw/x", b"x again"))


def _write_through(ws: WorkspaceLike, t: Tally, i: int) -> None:
    _attempt(t, lambda: ws.write_bytes("swl", b"through %d" % i))
    _attempt(t, lambda: ws.copy("sw/x", "swl"))
    _attempt(t, lambda: ws.append_bytes("swl", b"."))
    _attempt(t, lambda: ws.write_bytes("swnew", b"dangling made"))  # creates sw/brandnew
    _attempt(t, lambda: ws.remove("sw/brandnew"))  # dangling again for the next round


OPS: dict[str, Callable[[WorkspaceLike, Tally, int], None]] = {
    "read": _read,
    "write": _write,
    "write_through": _write_through,
    "create": _create,
    "rename": _rename,
    "remove_recursive": _remove,
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_swap_race_never_escapes(op: str, resolver: str, where: Path) -> None:
    layout = sw_layout(where)
    tally = Tally(outside_inodes=_inodes(layout.out))
    snap = OutsideSnapshot(layout)
    work = OPS[op]
    with Workspace(str(layout.root), resolver=resolver) as ws:
        with attacker(layout.root / "sw", layout.root / "swlink") as attack:
            deadline = time.monotonic() + RACE_SECONDS
            i = 0
            while time.monotonic() < deadline:
                work(ws, tally, i)
                i += 1
    assert attack.swaps > 0, "the attacker never swapped: the race was not real"
    assert tally.ok > 0, "no operation succeeded under attack: nothing was raced"
    assert tally.refused > 0, "the workspace never met the swapped-in symlink"
    assert tally.canary_reads == 0
    assert snap.diff() == []


def _inodes(top: Path) -> frozenset[int]:
    found = {os.lstat(top).st_ino}
    for dirpath, dirs, files in os.walk(top):
        found |= {os.lstat(Path(dirpath) / n).st_ino for n in dirs + files}
    return frozenset(found)


def _make_victim(root_fd: int) -> None:
    """victim/sub (a tree) and victim/sublink -> outside, created by fds beneath the
    root, sublink last (until it exists the attacker's exchange fails harmlessly)."""
    os.mkdir("victim", dir_fd=root_fd)
    vfd = os.open("victim", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    try:
        os.mkdir("sub", dir_fd=vfd)
        sfd = os.open("sub", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=vfd)
        try:
            for name in ("leaf", "leaf2", "leaf3"):
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=sfd)
                os.close(fd)
        finally:
            os.close(sfd)
        os.symlink("../../OUT/d", "sublink", dir_fd=vfd)
    finally:
        os.close(vfd)


@pytest.mark.parametrize("mode", ["remove", "walk"])
def test_symlink_swapped_in_mid_walk(mode: str, resolver: str, where: Path) -> None:
    """CVE-2022-21658: the attacker swaps a directory *inside* the tree being removed
    (or walked) with a symlink to an outside directory; neither the recursive removal
    nor the walk may ever descend into it."""
    layout = build_layout(where, {})
    tally = Tally(outside_inodes=_inodes(layout.out))
    snap = OutsideSnapshot(layout)
    completed = 0
    root_fd = os.open(layout.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _make_victim(root_fd)
        with Workspace(str(layout.root), resolver=resolver) as ws:
            victim = layout.root / "victim"
            with attacker(victim / "sub", victim / "sublink") as attack:
                deadline = time.monotonic() + RACE_SECONDS
                while time.monotonic() < deadline:
                    before = tally.ok
                    if mode == "remove":
                        _attempt(tally, lambda: ws.remove("victim", recursive=True))
                    else:
                        _attempt(tally, lambda: ws.walk("victim"))
                        _attempt(tally, lambda: ws.list_dir("victim/sub"))
                    if tally.ok > before:
                        completed += 1
                        if mode == "remove":
                            _make_victim(root_fd)
    finally:
        os.close(root_fd)
    assert attack.swaps > 0, "the attacker never swapped: the race was not real"
    assert completed > 0, f"no {mode} completed under attack"
    assert tally.canary_reads == 0
    assert snap.diff() == []


def _fingerprint(top: Path) -> list[tuple[str, int, int, int]]:
    """Names, inodes, modes and mtimes of *top* and beneath (no atime: cheap to repeat)."""
    st = os.lstat(top)
    out = [(str(top), st.st_ino, st.st_mode, st.st_mtime_ns)]
    for dirpath, dirs, files in os.walk(top):
        for n in sorted(dirs + files):
            st = os.lstat(Path(dirpath) / n)
            out.append((f"{dirpath}/{n}", st.st_ino, st.st_mode, st.st_mtime_ns))
    return out


@pytest.mark.parametrize("op", sorted(OPS))
def test_naive_resolver_escapes_in_every_race(op: str, where: Path) -> None:
    """Each operation group above, run through the naive resolver under the same
    attacker, reaches outside within a generous bound: every race case can fail."""
    layout = sw_layout(where)
    tally = Tally(outside_inodes=_inodes(layout.out))
    before = _fingerprint(layout.out)
    naive = NaiveWorkspace(str(layout.root))
    work = OPS[op]
    escaped = False
    with attacker(layout.root / "sw", layout.root / "swlink") as attack:
        deadline = time.monotonic() + NAIVE_BOUND_SECONDS
        i = 0
        while not escaped and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                work(naive, tally, i)
            i += 1
            escaped = tally.canary_reads > 0 or _fingerprint(layout.out) != before
    assert attack.swaps > 0
    assert escaped, f"naive {op} never escaped in {i} rounds"


def _naive_read_escapes(naive: NaiveWorkspace, layout: Layout) -> bool:
    return CANARY in naive.read_bytes("sw/file")


def _naive_write_escapes(naive: NaiveWorkspace, layout: Layout) -> bool:
    naive.write_bytes("sw/new", b"naive")
    return (layout.out / "new").read_bytes() == b"naive"


@pytest.mark.parametrize(
    "attempt", [_naive_read_escapes, _naive_write_escapes], ids=["read", "write"]
)
def test_naive_resolver_escapes_under_the_same_attack(
    attempt: Callable[[NaiveWorkspace, Layout], bool], where: Path
) -> None:
    """The control: "realpath, check prefix, then open" reads (or overwrites) the
    outside canary under the same attacker, so the race tests above can fail."""
    layout = sw_layout(where)
    naive = NaiveWorkspace(str(layout.root))
    escaped = False
    attempts = 0
    snap = OutsideSnapshot(layout)
    with attacker(layout.root / "sw", layout.root / "swlink") as attack:
        deadline = time.monotonic() + NAIVE_BOUND_SECONDS
        while not escaped and time.monotonic() < deadline:
            attempts += 1
            with contextlib.suppress(FluxSystemError, OSError):
                escaped = attempt(naive, layout)
    assert attack.swaps > 0
    assert escaped, f"no escape in {attempts} naive attempts"
    assert snap.diff() != []  # and the snapshot check used above would have seen it


def test_attacker_swaps_really_exchange(where: Path) -> None:
    """The harness's own check: after an odd number of swaps the names are exchanged."""
    layout = sw_layout(where)
    sw, swlink = layout.root / "sw", layout.root / "swlink"
    with attacker(sw, swlink) as attack:
        seen_link = seen_dir = False
        deadline = time.monotonic() + NAIVE_BOUND_SECONDS
        while not (seen_link and seen_dir) and time.monotonic() < deadline:
            if os.path.islink(sw):
                seen_link = True
            elif os.path.isdir(sw):
                seen_dir = True
            select.select([], [], [], 0.0005)
    assert attack.swaps > 0
    assert seen_link and seen_dir


def test_close_during_use_never_reuses_the_root_fd(resolver: str, where: Path) -> None:
    """close() racing reads in another thread: once the root fd is released, a new fd
    of an *outside* directory may get its number; a read still in flight must then
    fail, never resolve "secret" relative to the outside directory."""
    # "secret" exists on both sides: inside content in the root, canary content in OUT
    layout = build_layout(where, {"fs": ["secret"], "outside_fs": ["OUT/secret"]})
    snap = OutsideSnapshot(layout)
    tally = Tally()
    stop = threading.Event()
    ws = Workspace(str(layout.root), resolver=resolver)

    def reader() -> None:
        while not stop.is_set():
            _attempt(tally, lambda: ws.read_bytes("secret"))
            _attempt(tally, lambda: ws.list_dir("."))

    thread = threading.Thread(target=reader)
    thread.start()
    decoys: list[int] = []
    try:
        while tally.ok < 50:  # let the reader run before pulling the fd away
            time.sleep(0.001)
        ws.close()
        for _ in range(CLOSE_DECOYS):  # reuse every freed fd number for the outside dir
            decoys.append(os.open(layout.out, os.O_RDONLY | os.O_DIRECTORY))
        refused = tally.refused
        deadline = time.monotonic() + RACE_SECONDS / 4
        while tally.refused < refused + 50 and time.monotonic() < deadline:
            time.sleep(0.001)
    finally:
        stop.set()
        thread.join()
        for fd in decoys:
            os.close(fd)
    assert tally.canary_reads == 0
    assert snap.diff() == []
    assert tally.refused > 0, "no read ran after close()"


def test_hard_link_swapped_in_never_gets_written(resolver: str, where: Path) -> None:
    """The attacker exchanges an inside file with a hard link to an outside canary
    while the workspace appends, chmods, copies over and rewrites that name: the
    checks on the opened fd (``st_nlink > 1``) must hold, so the outside inode's content
    and mode never change (a rewrite replaces the name, never the shared inode)."""
    layout = build_layout(where, {"fs": ["hx"]})
    canary = layout.out / "canary"
    os.link(canary, layout.root / "hl")
    snap = OutsideSnapshot(layout, ignore_atime=frozenset({os.stat(canary).st_ino}))
    tally = Tally()
    with Workspace(str(layout.root), resolver=resolver) as ws:
        with attacker(layout.root / "hx", layout.root / "hl") as attack:
            deadline = time.monotonic() + RACE_SECONDS
            i = 0
            while time.monotonic() < deadline:
                _attempt(tally, lambda: ws.append_bytes("hx", b"+"))
                mode = 0o600 if i % 2 else 0o640
                _attempt(tally, lambda: ws.chmod("hx", mode))  # noqa: B023 - called at once
                if i % 8 == 0:  # a rewrite may replace the link's name: put one back
                    _attempt(tally, lambda: ws.write_bytes("hx", b"rewritten"))
                    _attempt(tally, lambda: ws.copy("hl", "hx"))
                    if os.stat(canary).st_nlink == 1:
                        with contextlib.suppress(OSError):
                            os.unlink(layout.root / "hl")
                        with contextlib.suppress(OSError):
                            os.link(canary, layout.root / "hl")
                i += 1
    assert attack.swaps > 0, "the attacker never swapped: the race was not real"
    assert tally.ok > 0, tally
    assert "hard_link" in tally.reasons, "the workspace never met the swapped-in hard link"
    assert snap.diff() == []


# The final component itself is exchanged: "fl" (what the workspace writes to) swaps
# with "flout", a link to an outside file, while "fl" is a link to a file inside, a
# plain file, or a dangling link inside. Each write follows "fl" when it is a link
# (decision 0016): looked at, read and resolved in separate steps, any of which the
# swap may fall between.
FINAL_SWAPS: dict[str, list[str]] = {
    "link_for_link": ["inside_t", "fl => inside_t", "flout => ../OUT/file"],
    "file_for_link": ["fl", "flout => ../OUT/file"],
    "dangling_for_link": ["fl => made", "flout => ../OUT/new"],
    "dir_link_for_link": ["d/t", "fl => d/t", "flout => ../OUT/d/canary"],
}


def _final_writes(ws: WorkspaceLike, t: Tally, i: int) -> None:
    _attempt(t, lambda: ws.write_bytes("fl", b"w %d" % i))
    _attempt(t, lambda: ws.copy("src", "fl"))
    _attempt(t, lambda: ws.append_bytes("fl", b"."))
    if i % 4 == 0:
        _attempt(t, lambda: ws.remove("made"))  # the dangling case dangles again


def _final_layout(where: Path, kind: str) -> Layout:
    return build_layout(
        where, {"fs": [*FINAL_SWAPS[kind], "src"], "outside_fs": ["OUT/file", "OUT/d/canary"]}
    )


@pytest.mark.parametrize("kind", sorted(FINAL_SWAPS))
def test_final_link_exchanged_never_writes_outside(kind: str, resolver: str, where: Path) -> None:
    layout = _final_layout(where, kind)
    tally = Tally()
    snap = OutsideSnapshot(layout)
    with Workspace(str(layout.root), resolver=resolver) as ws:
        with attacker(layout.root / "fl", layout.root / "flout") as attack:
            deadline = time.monotonic() + RACE_SECONDS
            i = 0
            while time.monotonic() < deadline:
                _final_writes(ws, tally, i)
                i += 1
    assert attack.swaps > 0, "the attacker never swapped: the race was not real"
    assert tally.ok > 0, "no write succeeded under attack: nothing was raced"
    assert tally.refused > 0, "the workspace never met the swapped-in link to outside"
    assert snap.diff() == []


@pytest.mark.parametrize("kind", sorted(FINAL_SWAPS))
def test_naive_write_through_escapes_under_the_final_swap(kind: str, where: Path) -> None:
    """The control: "realpath, check, then open the caller's path" writes outside under
    the same exchange, so the test above can fail."""
    layout = _final_layout(where, kind)
    before = _fingerprint(layout.out)
    naive = CheckThenJoinWorkspace(str(layout.root))
    tally = Tally()
    escaped = False
    with attacker(layout.root / "fl", layout.root / "flout") as attack:
        deadline = time.monotonic() + NAIVE_BOUND_SECONDS
        i = 0
        while not escaped and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                _final_writes(naive, tally, i)
            i += 1
            escaped = _fingerprint(layout.out) != before
    assert attack.swaps > 0
    assert escaped, f"naive write through {kind} never escaped in {i} rounds"
