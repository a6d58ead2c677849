"""Harness for the Workspace escape table (tests/vectors/flux_system/paths.json).

It builds a real tree per (case, operation): ``base/ROOT`` is the workspace root,
``base/OUT``, ``base/ROOT-evil`` and ``base/canary`` sit outside it holding canary
content (``b"CANARY:<name>"``). Before the operation it snapshots everything outside
the root — kind, inode, mode, owner, size, mtime, content or link text, and the
*atime* of every file and directory after resetting it to 2001 (on a ``relatime``
mount any later ``read``/``getdents`` moves it, so a read outside is seen even when
its bytes never reach the caller). After the operation it compares, scans every
returned value and every file inside the root for canary bytes, and checks the
outcome against the case's expectation. Findings are returned, not raised, so the
negative controls can assert that the harness does report a wrong expectation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from flux_system import ConfinementError, ConfinementReason, FluxSystemError, InvalidPathError

CANARY = b"CANARY:"
OUTSIDE_NAMES = ("canary", "outside_only")
OLD_ATIME_NS = 978_307_200 * 1_000_000_000  # 2001-01-01: any later read moves it
WATCHDOG_SECONDS = 3.0  # unblocks a FIFO open that should never have blocked
DATA = b"written-by-test"
CHMOD_FROM, CHMOD_TO = 0o600, 0o640

READ_OPS = (
    "read_bytes",
    "read_text",
    "open_read",
    "copy_from",
    "stat",
    "exists",
    "is_dir",
    "list_dir",
    "walk",
    "resolve",
)
WRITE_OPS = (
    "write_bytes",
    "append_bytes",
    "copy_to",
    "mkdir",
    "remove",
    "remove_recursive",
    "rename_from",
    "rename_to",
    "chmod",
    "symlink",
)
OPS = READ_OPS + WRITE_OPS
READ_ONLY_OPS = frozenset(READ_OPS)
CONFINEMENT_REASONS = frozenset(r.value for r in ConfinementReason)
MUTATING_OPS = frozenset(WRITE_OPS) - {"chmod"}
NOFOLLOW_OPS = frozenset({"remove", "remove_recursive", "rename_from", "rename_to"})
# Operations whose path must name an existing file (every read but the listings, and
# the in-place or by-name writes of one file).
FILE_TARGET_OPS = (READ_ONLY_OPS - {"list_dir", "walk"}) | {
    "remove",
    "rename_from",
    "chmod",
    "append_bytes",
}
DIR_TARGET_OPS = frozenset({"list_dir", "walk", "remove_recursive"})


class WorkspaceLike(Protocol):
    """The slice of the Workspace API the harness drives (also met by _naive)."""

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes: ...
    def read_text(self, path: str, *, limit: int | None = None) -> str: ...
    def open_read(self, path: str) -> Any: ...
    def write_bytes(self, path: str, data: bytes, *, create_parents: bool = True) -> None: ...
    def append_bytes(self, path: str, data: bytes) -> None: ...
    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None: ...
    def remove(self, path: str, *, recursive: bool = False) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def list_dir(self, path: str = ".") -> list[str]: ...
    def walk(self, path: str = ".") -> list[str]: ...
    def stat(self, path: str) -> Any: ...
    def exists(self, path: str) -> bool: ...
    def is_dir(self, path: str) -> bool: ...
    def resolve(self, path: str) -> Path: ...
    def copy(self, src: str, dst: str) -> None: ...
    def symlink(self, target: str, path: str) -> None: ...
    def chmod(self, path: str, mode: int) -> None: ...
    def close(self) -> None: ...


MakeWorkspace = Callable[[str, Mapping[str, Any]], WorkspaceLike]
"""Called as ``make(root, options)``; options are Workspace keyword arguments."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the harness saw go wrong."""

    case: str
    op: str
    kind: str  # mismatch | outside | canary | guard | partial
    detail: str

    def __str__(self) -> str:
        return f"[{self.case} / {self.op}] {self.kind}: {self.detail}"


@dataclass
class Layout:
    base: Path
    root: Path
    out: Path
    vars: dict[str, str]
    roots: list[Path] = field(default_factory=list)  # writable roots: not "outside"
    read_roots: list[Path] = field(default_factory=list)  # snapshotted, atime ignored
    fds: list[int] = field(default_factory=list)

    def sub(self, text: str) -> str:
        for key in sorted(self.vars, key=len, reverse=True):
            text = text.replace(key, self.vars[key])
        return text

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


@contextlib.contextmanager
def scratch_dir(fallback: Path) -> Iterator[Path]:
    """A fresh directory on tmpfs when there is one (ten times faster to build trees
    on than a journaled disk), else *fallback*. Removed afterwards."""
    import shutil
    import tempfile

    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK | os.X_OK)):
        yield fallback
        return
    path = Path(tempfile.mkdtemp(prefix="flux-escapes-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- building trees -------------------------------------------------------------------


def make_entry(layout: Layout, top: Path, spec: str, prefix: bytes) -> None:
    """Create one Go-makefs-style entry under *top* (see the vector provenance)."""
    if " => " in spec:
        name, target = spec.split(" => ", 1)
        path = top / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(layout.sub(target), path)
    elif " == " in spec:
        name, target = spec.split(" == ", 1)
        path = top / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.link(layout.sub(target), path)
    elif " |" in spec:
        name, kind = spec.split(" |", 1)
        path = top / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "fifo":
            os.mkfifo(path, 0o600)
        elif kind == "socket":
            dfd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.bind(f"/proc/self/fd/{dfd}/{path.name}")
            finally:
                os.close(dfd)
        elif kind.startswith("chr:"):
            _, major, minor = kind.split(":")
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(int(major), int(minor)))
        else:
            raise ValueError(f"unknown special entry {spec!r}")
    elif spec.endswith("/"):
        (top / spec).mkdir(parents=True, exist_ok=True)
    else:
        path = top / spec
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(prefix + spec.encode("utf-8", "surrogateescape"))


def build_layout(where: Path, case: Mapping[str, Any]) -> Layout:
    """Build ``where/base`` with the fixed outside canaries and the case's tree."""
    base = where / "base"
    root = base / "ROOT"
    out = base / "OUT"
    for d in (root, out / "d", base / "ROOT-evil"):
        d.mkdir(parents=True)
    layout = Layout(
        base=base,
        root=root,
        out=out,
        vars={"$ROOT": str(root), "$OUT": str(out), "$BASE": str(base), "$BASENAME": base.name},
    )
    for rel in ("OUT/canary", "OUT/target", "OUT/d/canary", "OUT/d/outside_only"):
        make_entry(layout, base, rel, CANARY)
    for rel in ("ROOT-evil/canary", "ROOT-evil/target", "canary", "target"):
        make_entry(layout, base, rel, CANARY)
    for spec in case.get("outside_fs", ()):
        make_entry(layout, base, spec, CANARY)
    for spec in case.get("named_fs", ()):
        make_entry(layout, base, spec, b"inside:")
    for spec in case.get("fs", ()):
        make_entry(layout, root, spec, b"inside:")
    for spec in case.get("guard", ()):
        if not os.path.lexists(root / spec):
            make_entry(layout, root, spec, b"inside:")
    special = case.get("special_root")
    if special is not None:
        canary_fd = os.open(out / "canary", os.O_RDONLY)
        dir_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        layout.fds += [canary_fd, dir_fd]
        layout.vars["$CANARY_FD"] = str(canary_fd)
        layout.vars["$OUT_DIR_FD"] = str(dir_fd)
        layout.root = Path("/proc/self/fd" if special == "proc_self_fd" else "/proc/self")
    layout.roots = [root]
    for named in case.get("workspace", {}).get("named_roots", {}).values():
        layout.roots.append(Path(layout.sub(named)))
    for ro in case.get("workspace", {}).get("read_roots", ()):
        layout.read_roots.append(Path(layout.sub(ro)))
    return layout


def read_root_inodes(layout: Layout) -> frozenset[int]:
    """Inodes beneath the read roots: reading them is allowed (their atime may move)."""
    found: set[int] = set()
    for top in layout.read_roots:
        found.add(os.lstat(top).st_ino)
        for dirpath, dirs, files in os.walk(top):
            found |= {os.lstat(Path(dirpath) / n).st_ino for n in dirs + files}
    return frozenset(found)


def workspace_options(layout: Layout, case: Mapping[str, Any]) -> dict[str, Any]:
    """The case's Workspace keyword arguments with $VARS substituted."""
    opts = case.get("workspace", {})
    out: dict[str, Any] = {}
    if "named_roots" in opts:
        out["named_roots"] = {k: layout.sub(v) for k, v in opts["named_roots"].items()}
    if "read_roots" in opts:
        out["read_roots"] = tuple(layout.sub(v) for v in opts["read_roots"])
    return out


# --- snapshots of everything outside the root -----------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    kind: int
    ino: int
    mode: int
    uid: int
    gid: int
    size: int
    mtime_ns: int
    atime_ns: int | None  # files and directories only
    data: bytes | str | None  # file content, link text, or None


def _stat_entry(path: Path, st: os.stat_result, data: bytes | str | None) -> Entry:
    kind = stat.S_IFMT(st.st_mode)
    atime = st.st_atime_ns if kind in (stat.S_IFREG, stat.S_IFDIR) else None
    return Entry(
        kind, st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, atime, data
    )


def _walk_outside(base: Path, skip: frozenset[Path]) -> Iterator[Path]:
    yield base
    stack = [base]
    while stack:
        d = stack.pop()
        for child in sorted(os.listdir(d)):
            p = d / child
            if p in skip:
                continue
            yield p
            if stat.S_ISDIR(os.lstat(p).st_mode):
                stack.append(p)


def _read_data(path: Path, st: os.stat_result) -> bytes | str | None:
    if stat.S_ISREG(st.st_mode):
        return path.read_bytes()
    if stat.S_ISLNK(st.st_mode):
        return os.readlink(path)
    return None


class OutsideSnapshot:
    """Before/after view of everything under ``base`` except the configured roots."""

    def __init__(self, layout: Layout, *, ignore_atime: frozenset[int] = frozenset()) -> None:
        self.base = layout.base
        self.skip = frozenset(layout.roots)
        self.ignore_atime = ignore_atime
        paths = list(_walk_outside(self.base, self.skip))
        contents = {p: _read_data(p, os.lstat(p)) for p in paths}
        for p in paths:  # reset atimes only after our own reads and listings
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                os.utime(p, ns=(OLD_ATIME_NS, st.st_mtime_ns), follow_symlinks=False)
        self.before = {p: _stat_entry(p, os.lstat(p), contents[p]) for p in paths}

    def diff(self) -> list[str]:
        """What changed outside since construction (empty when nothing did)."""
        problems: list[str] = []
        after_stat: dict[Path, os.stat_result] = {}
        for p in self.before:  # lstat first: our own reads below must not mask an atime
            with contextlib.suppress(FileNotFoundError):
                after_stat[p] = os.lstat(p)
        current = set(_walk_outside(self.base, self.skip))
        for p, old in self.before.items():
            st = after_stat.get(p)
            if st is None:
                problems.append(f"deleted outside: {p}")
                continue
            new = _stat_entry(p, st, _read_data(p, st))
            if new.ino in self.ignore_atime:
                new = dataclasses.replace(new, atime_ns=old.atime_ns)
            if new != old:
                fields = [f for f in Entry.__slots__ if getattr(new, f) != getattr(old, f)]
                problems.append(f"changed outside: {p} ({', '.join(fields)})")
        problems += [f"created outside: {p}" for p in sorted(current - set(self.before))]
        return problems


def tree_names(root: Path) -> set[str]:
    """Every name under *root* with its kind, without following symlinks."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            out.add(f"{p.relative_to(root)}:{stat.S_IFMT(os.lstat(p).st_mode)}")
    return out


def canary_files_inside(root: Path) -> list[str]:
    hits = []
    for dirpath, _dirs, filenames in os.walk(root):
        for n in filenames:
            p = Path(dirpath) / n
            if stat.S_ISREG(os.lstat(p).st_mode) and CANARY in p.read_bytes():
                hits.append(str(p.relative_to(root)))
    return hits


# --- expectations ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Expect:
    """Allowed outcomes of one operation on one case."""

    ok: bool  # success allowed
    error: bool  # an error allowed
    reasons: frozenset[str] | None = None  # allowed reason values (None: any flux error)
    cls: type[Exception] = FluxSystemError
    ok_check: str = "follow"  # follow | link | lstat | lstat_or_follow | none
    bool_value: bool | None = None  # exists/is_dir: the one allowed value, if success


def expectation(case: Mapping[str, Any], op: str) -> Expect:
    kind: str = case["expect"]
    reasons = frozenset(case.get("reasons", ())) or None
    lt = case.get("ltarget") is not None
    override = case.get("op_expect", {}).get(op)
    if override == "ok":
        return Expect(ok=True, error=False)
    if override == "ok_or_error":
        return Expect(ok=True, error=True, ok_check="none")
    if override is not None and override.startswith("error:"):
        return Expect(ok=False, error=True, reasons=frozenset(override[6:].split(",")))
    if kind == "invalid":
        return Expect(ok=False, error=True, reasons=reasons, cls=InvalidPathError)
    if kind in ("escape", "error"):
        mixed = reasons is not None and not reasons <= CONFINEMENT_REASONS
        cls: type[Exception] = (
            ConfinementError if kind == "escape" and not mixed else FluxSystemError
        )
        if op == "resolve" and reasons == frozenset({"not_found"}):
            # resolve() names a missing final component by its resolved parent
            return Expect(ok=True, error=True, ok_check="none")
        if op in MUTATING_OPS and _final_is_dot(case["path"]):
            # a mutation whose last component is "." or ".." has nothing to act on: a
            # WorkspaceError(BAD_NAME) before resolution is as safe as the escape error
            return Expect(ok=False, error=True, reasons=_with(reasons, "bad_name", "exists"))
        if lt:
            if op in NOFOLLOW_OPS:
                return Expect(ok=True, error=False, ok_check="link")
            if op in ("mkdir", "symlink"):
                return Expect(ok=False, error=True, reasons=_with(reasons, "exists"))
            # write_bytes/copy_to follow a final link beneath the root: an escaping one
            # is refused like any other escape (DESIGN §2.2; decision 0016)
            if op == "stat":
                return Expect(ok=True, error=True, reasons=reasons, cls=cls, ok_check="lstat")
            if op == "walk":
                return Expect(ok=True, error=True, reasons=reasons, cls=cls, ok_check="none")
            if op == "exists":
                return Expect(ok=True, error=True, reasons=reasons, cls=cls, ok_check="none")
        if op in ("exists", "is_dir"):
            return Expect(ok=True, error=True, reasons=reasons, cls=cls, bool_value=False)
        return Expect(ok=False, error=True, reasons=reasons, cls=cls)
    # kind == "ok"
    if lt:
        if op in NOFOLLOW_OPS:
            return Expect(ok=True, error=False, ok_check="link")
        if op in ("mkdir", "symlink"):
            return Expect(ok=False, error=True, reasons=frozenset({"exists"}))
        if op == "stat":
            return Expect(ok=True, error=False, ok_check="lstat_or_follow")
    return Expect(ok=True, error=False)


def _with(reasons: frozenset[str] | None, *extra: str) -> frozenset[str] | None:
    return None if reasons is None else reasons | set(extra)


def _final_is_dot(path: str) -> bool:
    return path.rstrip("/").rsplit("/", 1)[-1] in (".", "..", "")


def effective(exp: Expect, case: Mapping[str, Any], op: str, prep: Prepared) -> Expect:
    """Adjust an "ok" expectation to the target's state before the op (as Go's
    TestRootMkdir does for a target that already exists)."""
    t = prep.target
    if case["expect"] != "ok" or not exp.ok or exp.error or t is None or exp.ok_check == "link":
        return exp
    if op in ("mkdir", "symlink") and os.path.lexists(t):
        return Expect(ok=False, error=True, reasons=frozenset({"exists", "bad_name"}))
    if op in ("list_dir", "walk") and os.path.isfile(t):
        return Expect(ok=False, error=True, reasons=frozenset({"not_a_directory"}))
    return exp


def applicable_ops(case: Mapping[str, Any]) -> list[str]:
    ops = list(case.get("ops", OPS))
    if case.get("host_target"):
        ops = [op for op in ops if op in READ_ONLY_OPS]
    return ops


# --- running one operation --------------------------------------------------------------


@dataclass
class Prepared:
    target: Path | None  # physical target inside the root (following), if any
    link: Path | None  # the final symlink's own location, if any
    pre: bytes | None  # target content before the op
    listing: list[str]


def _prepare(layout: Layout, case: Mapping[str, Any], op: str, exp: Expect) -> Prepared:
    root = layout.root
    tgt_rel = case.get("target")
    link = root / case["ltarget"] if case.get("ltarget") is not None else None
    override = case.get("op_expect", {}).get(op)
    wants_target = case["expect"] == "ok" or override in ("ok", "ok_or_error")
    target = (
        None if tgt_rel is None or not exp.ok or not wants_target else root / layout.sub(tgt_rel)
    )
    if tgt_rel == "":
        target = root
    listing = list(case.get("listing", ["found"]))
    if op == "copy_to":
        (root / "copy_src").write_bytes(b"inside:copy_src")
    if op == "rename_to":
        (root / "rename_src").write_bytes(b"inside:rename_src")
    follow_target = target is not None and exp.ok_check != "link"
    if follow_target and target is not None and target != root:
        if op in FILE_TARGET_OPS and not os.path.lexists(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"inside:" + str(tgt_rel).encode("utf-8", "surrogateescape"))
        if op in DIR_TARGET_OPS and not os.path.lexists(target):
            target.mkdir(parents=True)
            (target / "found").write_bytes(b"inside:found")
        if op in ("rename_to", "symlink"):  # these never create parents
            target.parent.mkdir(parents=True, exist_ok=True)
        if op == "chmod" and target.exists():
            os.chmod(target, CHMOD_FROM)
    pre = None
    if target is not None and os.path.isfile(target):
        pre = target.read_bytes()
    return Prepared(target=target, link=link, pre=pre, listing=listing)


@dataclass(frozen=True, slots=True)
class OpArgs:
    """What an operation runs with besides the path under test (names are in the root)."""

    data: bytes = DATA
    append: bytes = DATA
    copy_src: str = "copy_src"
    copy_dst: str = "copy_dst"
    rename_src: str = "rename_src"
    rename_dst: str = "renamed_dst"
    exist_ok: bool = False
    limit: int | None = None
    read_size: int = 1 << 16  # open_read reads this much (-1: all)


def call_op(ws: WorkspaceLike, op: str, path: str, target: str, args: OpArgs) -> Any:
    """Run *op* on *path* and return its result (*target*: the link text of ``symlink``)."""
    if op == "read_bytes":
        return ws.read_bytes(path, limit=args.limit)
    if op == "read_text":
        return ws.read_text(path, limit=args.limit)
    if op == "open_read":
        with ws.open_read(path) as f:
            data: bytes = f.read(args.read_size)
            return data
    if op == "copy_from":
        ws.copy(path, args.copy_dst)  # the controls' copy returns a path: never scanned
        return None
    if op == "stat":
        return ws.stat(path)
    if op == "exists":
        return ws.exists(path)
    if op == "is_dir":
        return ws.is_dir(path)
    if op == "list_dir":
        return ws.list_dir(path)
    if op == "walk":
        return ws.walk(path)
    if op == "resolve":
        return ws.resolve(path)
    if op == "write_bytes":
        return ws.write_bytes(path, args.data)
    if op == "append_bytes":
        return ws.append_bytes(path, args.append)
    if op == "copy_to":
        return ws.copy(args.copy_src, path)
    if op == "mkdir":
        return ws.mkdir(path, exist_ok=args.exist_ok)
    if op == "remove":
        return ws.remove(path)
    if op == "remove_recursive":
        return ws.remove(path, recursive=True)
    if op == "rename_from":
        return ws.rename(path, args.rename_dst)
    if op == "rename_to":
        return ws.rename(args.rename_src, path)
    if op == "chmod":
        return ws.chmod(path, CHMOD_TO)
    if op == "symlink":
        return ws.symlink(target, path)
    raise ValueError(op)


_TABLE_ARGS = OpArgs()
_SPECIAL_ARGS = OpArgs(limit=1 << 16)  # a device or special root: never read unbounded


def _call(ws: WorkspaceLike, op: str, path: str, layout: Layout, case: Mapping[str, Any]) -> Any:
    special = case.get("special_root") or "|chr" in str(case.get("fs"))
    target = layout.sub(case.get("link_target", "."))
    return call_op(ws, op, path, target, _SPECIAL_ARGS if special else _TABLE_ARGS)


@contextlib.contextmanager
def _fifo_watchdog(layout: Layout, case: Mapping[str, Any]) -> Iterator[None]:
    """If a FIFO open blocks (it must not), unblock it so the test fails, not hangs."""
    fifos = [layout.root / s.split(" |", 1)[0] for s in case.get("fs", ()) if s.endswith(" |fifo")]
    if not fifos:
        yield
        return

    def unblock() -> None:
        for f in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(f, os.O_RDWR | os.O_NONBLOCK))

    timer = threading.Timer(WATCHDOG_SECONDS, unblock)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _leaks(value: Any) -> bool:
    if isinstance(value, (bytes, bytearray)):
        return CANARY in value
    if isinstance(value, str):
        return "CANARY:" in value
    if isinstance(value, (list, tuple)):
        return any(_leaks(v) or any(n in str(v).split("/") for n in OUTSIDE_NAMES) for v in value)
    return False


def run_op(case: Mapping[str, Any], op: str, make_ws: MakeWorkspace, where: Path) -> list[Finding]:
    """Run *op* of *case* on a fresh tree under *where*; return what went wrong."""
    cid = case["id"]
    layout = build_layout(where, case)
    try:
        return _run_op(case, op, make_ws, layout, cid)
    finally:
        layout.close()


def _run_op(
    case: Mapping[str, Any], op: str, make_ws: MakeWorkspace, layout: Layout, cid: str
) -> list[Finding]:
    exp = expectation(case, op)
    prep = _prepare(layout, case, op, exp)
    exp = effective(exp, case, op, prep)
    path = layout.sub(case["path"])
    allow_canary = bool(case.get("allow_canary_read"))
    ignore_atime = read_root_inodes(layout) | (
        frozenset({os.stat(layout.out / "canary").st_ino}) if allow_canary else frozenset()
    )
    special = case.get("special_root") is not None
    guards = {
        g: (layout.root / g).read_bytes()
        for g in case.get("guard", ())
        if (layout.root / g).is_file()
    }
    inside_before = set() if special else tree_names(layout.root)
    snap = OutsideSnapshot(layout, ignore_atime=ignore_atime)
    found: list[Finding] = []

    def add(kind: str, detail: str) -> None:
        found.append(Finding(cid, op, kind, detail))

    result: Any = None
    error: BaseException | None = None
    ws = make_ws(str(layout.root), workspace_options(layout, case))
    try:
        with _fifo_watchdog(layout, case):
            result = _call(ws, op, path, layout, case)
    except Exception as exc:
        error = exc
    finally:
        ws.close()
    found += [Finding(cid, op, "outside", d) for d in snap.diff()]
    if not allow_canary and _leaks(result):
        add("canary", f"returned outside content: {result!r:.80}")
    if not special and not allow_canary:
        for hit in canary_files_inside(layout.root):
            add("canary", f"outside content copied inside: {hit}")
    for g, content in guards.items():
        gp = layout.root / g
        if not gp.is_file() or gp.read_bytes() != content:
            add("guard", f"inside file {g} was changed")
    if isinstance(result, Path) and not special:
        reals = [Path(os.path.realpath(r)) for r in layout.roots + layout.read_roots]
        if not any(result == r or r in result.parents for r in reals):
            add("outside", f"resolve returned a path outside the roots: {result}")
    if error is not None:
        _check_error(exp, error, add)
        if not special and tree_names(layout.root) != inside_before:
            new = tree_names(layout.root) ^ inside_before
            add("partial", f"failed op left the tree changed: {sorted(new)[:4]}")
    elif not exp.ok:
        add("mismatch", f"expected an error ({_describe(exp)}), got success {result!r:.60}")
    else:
        _check_ok(OpRun(case, op, exp, prep, layout, add), result)
    return found


def _describe(exp: Expect) -> str:
    return f"{exp.cls.__name__} reason in {sorted(exp.reasons) if exp.reasons else 'any'}"


def _check_error(exp: Expect, error: BaseException, add: Callable[[str, str], None]) -> None:
    if not exp.error:
        add("mismatch", f"expected success, got {error!r:.120}")
        return
    if not isinstance(error, exp.cls):
        add("mismatch", f"expected {_describe(exp)}, got {error!r:.120}")
        return
    reason = getattr(getattr(error, "reason", None), "value", None)
    if exp.reasons is not None and reason not in exp.reasons:
        add("mismatch", f"expected {_describe(exp)}, got reason {reason!r} ({error!r:.80})")


def _content(p: Path) -> bytes | None:
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None
    return p.read_bytes() if stat.S_ISREG(st.st_mode) else None


@dataclass(frozen=True, slots=True)
class OpRun:
    """Everything a success check needs about one (case, op) run."""

    case: Mapping[str, Any]
    op: str
    exp: Expect
    prep: Prepared
    layout: Layout
    add: Callable[[str, str], None]


def _check_ok(run: OpRun, result: Any) -> None:
    op, exp, prep, layout, add = run.op, run.exp, run.prep, run.layout, run.add
    root = layout.root
    if op in ("exists", "is_dir"):
        if exp.bool_value is not None and result is not exp.bool_value:
            add("mismatch", f"{op} returned {result!r}, expected {exp.bool_value!r} or an error")
        elif exp.bool_value is None and exp.ok_check != "none":
            want = os.path.isdir(prep.target) if op == "is_dir" and prep.target else True
            if result is not want:
                add("mismatch", f"{op} returned {result!r}, expected {want!r}")
        return
    if exp.ok_check == "none":
        return
    if exp.ok_check == "link":
        _check_link_op(op, prep, root, add)
        return
    if op == "stat":
        kind = getattr(getattr(result, "kind", None), "value", None)
        if exp.ok_check == "lstat":
            if kind != "symlink":
                add("mismatch", f"stat of an escaping link succeeded with kind {kind!r}")
            return
        if exp.ok_check == "lstat_or_follow" and kind == "symlink":
            return
        t = prep.target
        want_kind = "directory" if t is not None and t.is_dir() else "file"
        if kind != want_kind:
            add("mismatch", f"stat kind {kind!r}, expected {want_kind!r}")
        if want_kind == "file" and prep.pre is not None and result.size != len(prep.pre):
            add("mismatch", f"stat size {result.size}, expected {len(prep.pre)}")
        return
    t = prep.target
    if t is None:
        if op not in ("symlink",):
            add("mismatch", f"{op} succeeded but the case names no target")
        return
    _check_follow(run, t, result)


def _expected_written(op: str) -> bytes:
    return b"inside:copy_src" if op == "copy_to" else DATA


def _check_link_op(op: str, prep: Prepared, root: Path, add: Callable[[str, str], None]) -> None:
    link = prep.link
    assert link is not None
    if op in ("remove", "remove_recursive", "rename_from") and os.path.lexists(link):
        add("mismatch", f"{op} left the final symlink in place")
    if op == "rename_from" and not os.path.islink(root / "renamed_dst"):
        add("mismatch", "rename moved something other than the final symlink")
    if op == "rename_to" and _content(link) != b"inside:rename_src":
        add("mismatch", "rename onto a symlink did not replace the link")


def _check_follow(run: OpRun, t: Path, result: Any) -> None:
    case, op, prep, layout, add = run.case, run.op, run.prep, run.layout, run.add
    root = layout.root
    want = prep.pre
    if op in ("read_bytes", "open_read"):
        if result != want:
            add("mismatch", f"{op} returned {result!r:.60}, expected {want!r:.60}")
    elif op == "read_text":
        if want is None or result != want.decode("utf-8", "surrogateescape"):
            add("mismatch", f"read_text returned {result!r:.60}, expected {want!r:.60}")
    elif op == "copy_from":
        if _content(root / "copy_dst") != want:
            add("mismatch", "copy did not copy the target's content")
    elif op == "list_dir":
        if sorted(result) != sorted(prep.listing):
            add("mismatch", f"list_dir returned {sorted(result)}, expected {sorted(prep.listing)}")
    elif op == "walk":
        last = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in result}
        if not set(prep.listing) <= last:
            add("mismatch", f"walk returned {sorted(map(str, result))[:6]}, missing {prep.listing}")
    elif op == "resolve":
        real = Path(os.path.realpath(t))
        if Path(result) != real:
            add("mismatch", f"resolve returned {result}, expected {real}")
    elif op in ("write_bytes", "copy_to"):
        if _content(t) != _expected_written(op):
            add("mismatch", f"{op} did not leave the data at the target")
        if prep.link is not None and not os.path.islink(prep.link):
            add("mismatch", f"{op} replaced the final symlink instead of writing through it")
    elif op == "append_bytes":
        if _content(t) != (want or b"") + DATA:
            add("mismatch", f"append_bytes left {_content(t)!r:.60}")
    elif op == "mkdir":
        if not (os.path.isdir(t) and not os.path.islink(t)):
            add("mismatch", "mkdir did not create a directory at the target")
    elif op in ("remove", "remove_recursive"):
        if os.path.lexists(t):
            add("mismatch", f"{op} left the target in place")
    elif op == "rename_from":
        if os.path.lexists(t) or _content(root / "renamed_dst") != want:
            add("mismatch", "rename did not move the target")
    elif op == "rename_to":
        if _content(t) != b"inside:rename_src":
            add("mismatch", "rename did not put the source at the target")
    elif op == "chmod":
        if stat.S_IMODE(os.stat(t).st_mode) != CHMOD_TO:
            add("mismatch", f"chmod left mode {oct(stat.S_IMODE(os.stat(t).st_mode))}")
    elif op == "symlink" and (
        not os.path.islink(t) or os.readlink(t) != layout.sub(case.get("link_target", "."))
    ):
        add("mismatch", "symlink did not create the link at the target")


# --- host capabilities ------------------------------------------------------------------

SYS_OPENAT2 = 437  # same number on every architecture (new-style syscall table)
SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}
RENAME_EXCHANGE = 2


def have_openat2() -> bool:
    """Probe openat2(2) with RESOLVE_BENEATH on ".", as the resolver would use it."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    how = struct.pack("QQQ", os.O_RDONLY | os.O_DIRECTORY, 0, 0x08)
    buf = ctypes.create_string_buffer(how)
    fd = libc.syscall(SYS_OPENAT2, -100, b".", buf, len(how))
    if fd < 0:
        return False
    os.close(fd)
    return True


def renameat2_number() -> int | None:
    return SYS_RENAMEAT2.get(os.uname().machine)


def have_renameat2(where: Path) -> bool:
    """Probe renameat2(RENAME_EXCHANGE) on two fresh names under *where*."""
    import ctypes

    nr = renameat2_number()
    if nr is None:
        return False
    a, b = where / "probe-a", where / "probe-b"
    a.mkdir()
    os.symlink("probe-a", b)
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.syscall(nr, -100, bytes(a), -100, bytes(b), RENAME_EXCHANGE)
    ok = rc == 0 and os.path.islink(a) and os.path.isdir(b)
    os.unlink(a) if os.path.islink(a) else os.rmdir(a)
    os.unlink(b) if os.path.islink(b) else os.rmdir(b)
    return ok
