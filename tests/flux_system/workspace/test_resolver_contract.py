"""The resolvers' contract, called directly: every refusal's fields, flags, modes, faults.

Each opener (``openat2`` and ``walk``) is called on real trees with real symlinks. The
refusals are checked whole (type, ``reason``, ``op``, ``path`` and message), the fd
returned is checked for the flags and the mode asked for, and the kernel answers
that a tree cannot produce on demand (``EAGAIN`` from a rename race, ``ENOSYS`` from
an old kernel or a container's filter, a failing ``fstatfs``) are produced by a real
seccomp filter loaded in a forked child, the way a sandbox around the process would
answer. Mutation testing of flux_system/workspace/_resolve.py (docs/mutation.md) uses
this file.
"""
# ruff: noqa: F811 - pytest fixtures imported from _ws_support are parameters here

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flux_system import PathEscapeError, Workspace, WorkspaceError, WorkspaceReason
from flux_system.sandbox import _libseccomp
from flux_system.workspace import _resolve
from flux_system.workspace._resolve import _MAX_STEPS, _MAX_SYMLINKS, OPENERS
from tests._capabilities import require
from tests.flux_system.workspace._escape_harness import have_openat2
from tests.flux_system.workspace._ws_support import in_child, resolver, root  # noqa: F401

OP = "vector_op"
SHOWN = "shown/path"
# What a refusal reports: (type, reason name, op, path, message) or (OSError, errno, text).
Outcome = tuple[object, ...]


def _outcome(call: Callable[[], int]) -> Outcome:
    try:
        fd = call()
    except PathEscapeError as exc:
        return ("PathEscapeError", exc.reason.name, exc.op, exc.path, exc.message)
    except OSError as exc:
        return ("OSError", exc.errno, exc.strerror)
    os.close(fd)
    return ("opened",)


def _refused(reason: str, what: str) -> Outcome:
    return ("PathEscapeError", reason, OP, SHOWN, f"{OP}: {what}")


def _os_error(code: int) -> Outcome:
    return ("OSError", code, os.strerror(code))


@pytest.fixture
def rootfd(root: Path) -> Iterator[int]:
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    yield fd
    os.close(fd)


@pytest.fixture(params=["openat2", "walk", "unconfined"])
def opener(request: pytest.FixtureRequest) -> str:
    """The two resolvers and the hatch (``unconfined``: flags and modes as asked too)."""
    name: str = request.param
    if name == "openat2":
        require(have_openat2(), "openat2(2) (Linux >= 5.6)")
    return name


def _open(
    name: str,
    rootfd: int,
    path: bytes,
    flags: int = os.O_RDONLY,
    mode: int = 0,
    *,
    follow: bool = True,
) -> int:
    return OPENERS[name](rootfd, path, flags, mode, follow=follow, op=OP, display=SHOWN)


def _tree(root: Path) -> None:
    (root / "f").write_bytes(b"F")
    (root / "d").mkdir()
    (root / "d" / "g").write_bytes(b"G")
    os.symlink("b", root / "a")  # a -> b -> a: a loop
    os.symlink("a", root / "b")
    os.symlink(str(root / "f"), root / "abs")  # absolute, although it points inside
    os.symlink("f", root / "rel")


REFUSALS = [
    ("dotdot above the root", b"../x", os.O_RDONLY, True, "ESCAPE", "'..' above the root"),
    (
        "dotdot transiently above",
        b"d/../../r/f",
        os.O_RDONLY,
        True,
        "ESCAPE",
        "'..' above the root",
    ),
    ("absolute symlink", b"abs", os.O_RDONLY, True, "ABSOLUTE_SYMLINK", "absolute symlink target"),
    (
        "absolute symlink, O_PATH",
        b"abs",
        os.O_PATH,
        True,
        "ABSOLUTE_SYMLINK",
        "absolute symlink target",
    ),
    ("loop, followed", b"a", os.O_RDONLY, True, "SYMLINK_LOOP", "too many symlinks"),
    ("loop mid-path, not followed", b"a/x", os.O_PATH, False, "SYMLINK_LOOP", "too many symlinks"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[case[0] for case in REFUSALS])
def test_every_refusal_reports_op_path_reason_and_text(
    resolver: str, root: Path, rootfd: int, case: tuple[str, bytes, int, bool, str, str]
) -> None:
    _, path, flags, follow, reason, what = case
    _tree(root)
    got = _outcome(lambda: _open(resolver, rootfd, path, flags, follow=follow))
    assert got == _refused(reason, what)


@pytest.mark.parametrize("path", ["root/etc", "fd/{pipe}", "ns/net", "exe"])
def test_magic_link_refusal_fields(resolver: str, path: str) -> None:
    """``ns/net`` and a pipe's ``fd/N`` read as relative texts (``net:[...]``,
    ``pipe:[...]``): the colon on procfs is what marks them."""
    reader, writer = os.pipe()
    proc = os.open("/proc/self", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        raw = path.format(pipe=reader).encode()
        got = _outcome(lambda: _open(resolver, proc, raw, os.O_RDONLY))
        assert got == _refused("MAGIC_LINK", "magic link")
    finally:
        for fd in (proc, reader, writer):
            os.close(fd)


def test_openat2_refusal_the_walk_cannot_name_keeps_the_generic_reason(
    root: Path, rootfd: int
) -> None:
    """``/f`` (absolute: never passed by the Workspace, which refuses it first) leaves the
    root for the kernel; the walk's replay finds nothing specific, so the refusal
    stands with the generic reason."""
    require(have_openat2(), "openat2(2) (Linux >= 5.6)")
    _tree(root)
    got = _outcome(lambda: _open("openat2", rootfd, b"/f"))
    assert got == _refused("ESCAPE", "path leaves the root")


def test_other_errors_are_oserror_with_their_text(resolver: str, root: Path, rootfd: int) -> None:
    _tree(root)
    assert _outcome(lambda: _open(resolver, rootfd, b"missing")) == _os_error(errno.ENOENT)
    assert _outcome(lambda: _open(resolver, rootfd, b"f/x")) == _os_error(errno.ENOTDIR)
    # A final symlink, not followed and not O_PATH: the kernel's ELOOP, for the caller.
    got = _outcome(lambda: _open(resolver, rootfd, b"rel", os.O_RDONLY, follow=False))
    assert got == _os_error(errno.ELOOP)


def _flags(fd: int) -> tuple[int, bool]:
    return fcntl.fcntl(fd, fcntl.F_GETFL), bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)


@pytest.mark.parametrize("follow", [True, False])
def test_the_fd_has_the_flags_asked_for_and_cloexec(
    opener: str, root: Path, rootfd: int, follow: bool
) -> None:
    _tree(root)
    cases = [
        (b"f", os.O_WRONLY, os.O_WRONLY),
        (b"f", os.O_RDONLY, os.O_RDONLY),
        (b"d/g", os.O_RDWR, os.O_RDWR),
        (b"d/.", os.O_PATH | os.O_DIRECTORY, os.O_PATH),
        (b"d/", os.O_PATH, os.O_PATH),
    ]
    for path, flags, expect in cases:
        fd = _open(opener, rootfd, path, flags, follow=follow)
        try:
            got, cloexec = _flags(fd)
            assert cloexec, path
            if expect == os.O_PATH:
                assert got & os.O_PATH, path
            else:
                assert got & (os.O_ACCMODE | os.O_PATH) == expect, path
        finally:
            os.close(fd)


def test_o_path_without_follow_returns_the_link_itself(
    opener: str, root: Path, rootfd: int
) -> None:
    _tree(root)
    for path in (b"rel", b"abs", b"a"):  # relative, absolute, looping: none is followed
        fd = _open(opener, rootfd, path, os.O_PATH, follow=False)
        try:
            assert stat.S_ISLNK(os.fstat(fd).st_mode), path
        finally:
            os.close(fd)
    fd = _open(opener, rootfd, b"rel", os.O_PATH, follow=True)  # control: followed
    try:
        assert stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def test_dot_and_empty_components_are_no_steps(resolver: str, root: Path, rootfd: int) -> None:
    _tree(root)
    for path in (b"d/./../f", b"d//../f", b".//d/./.././f", b"d/./../d/.//../f"):
        fd = _open(resolver, rootfd, path)
        try:
            assert os.read(fd, 8) == b"F", path
        finally:
            os.close(fd)


def _umasked(mode: int) -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mode & ~mask


@pytest.mark.parametrize("mode", [0o640, 0o600])
def test_create_modes_reach_the_kernel(opener: str, root: Path, rootfd: int, mode: int) -> None:
    _tree(root)
    fd = _open(opener, rootfd, b"d/new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        assert stat.S_IMODE(os.fstat(fd).st_mode) == _umasked(mode)
    finally:
        os.close(fd)
    for path in (b"d", b"d/."):  # an unnamed file in d, with the mode asked for
        fd = _open(opener, rootfd, path, os.O_TMPFILE | os.O_WRONLY, mode)
        try:
            assert stat.S_IMODE(os.fstat(fd).st_mode) == _umasked(mode), path
        finally:
            os.close(fd)
    # A mode without O_CREAT/O_TMPFILE is ignored, as open(2) ignores it (openat2
    # itself refuses a non-zero mode there: the resolver must not pass it on).
    fd = _open(opener, rootfd, b"f", os.O_RDONLY, 0o644)
    os.close(fd)


def test_an_fd_numbered_zero_is_a_success(resolver: str, root: Path, rootfd: int) -> None:
    _tree(root)

    def child() -> object:
        os.close(0)
        fd = _open(resolver, rootfd, b"f")
        return fd, os.read(fd, 8)

    os.close(_open(resolver, rootfd, b"f"))  # control, in this process
    assert in_child(child) == (0, b"F")


def _worst_case_tree(root: Path) -> bytes:
    """40 links (the budget), each text and the path itself 4,095 bytes of mostly
    empty components (``.////...////next``): the longest lookup the kernel accepts."""
    (root / "t").write_bytes(b"T")

    def spelled(name: str) -> str:
        return "." + "/" * (4095 - 1 - len(name)) + name

    for i in range(_MAX_SYMLINKS):
        nxt = f"l{i + 1}" if i + 1 < _MAX_SYMLINKS else "t"
        os.symlink(spelled(nxt), root / f"l{i}")
    return spelled("l0").encode()


def test_the_longest_valid_lookup_resolves_on_both(resolver: str, root: Path) -> None:
    """Regression: the walk's step guard counted at most 2,048 components per text,
    but 4,095 bytes split into up to 4,096 (empty components), so the walk refused
    (``lookup too long``) a lookup the kernel resolves."""
    path = _worst_case_tree(root)
    assert len(path) == 4095 and len(path.split(b"/")) > 4000
    with Workspace(root, resolver=resolver) as ws:
        assert ws.read_bytes(path.decode()) == b"T"


def test_the_walk_step_guard_is_exact(rootfd: int) -> None:
    """Raw input only (no valid path has this many components): N empty components
    take N + 1 steps; the guard allows exactly _MAX_STEPS."""
    fd = _open("walk", rootfd, b"/" * (_MAX_STEPS - 2), os.O_PATH)  # _MAX_STEPS - 1 pieces
    os.close(fd)
    got = _outcome(lambda: _open("walk", rootfd, b"/" * (_MAX_STEPS - 1), os.O_PATH))
    assert got == _refused("SYMLINK_LOOP", "lookup too long")


# --- Kernel answers produced by a real seccomp filter, in a forked child -------------


def _deny(syscall: str, code: int) -> None:
    """Load a filter making *syscall* fail with *code* in this (forked) process."""
    lib = _libseccomp.load()
    assert lib is not None
    nr = lib.resolve(syscall)
    assert nr is not None, syscall
    ctx = lib.init(_libseccomp.ACT_ALLOW)
    try:
        lib.rule(ctx, _libseccomp.act_errno(code), nr)
        lib.load_ctx(ctx)
    finally:
        lib.release(ctx)


def _faulted(syscall: str, code: int, call: Callable[[], object]) -> tuple[object, object]:
    """*call*'s result here (the control: no filter) and in a child under the filter.

    The control also runs the code under test in the test's own process, where
    coverage-based test selection (mutation testing) sees it."""

    def child() -> object:
        _deny(syscall, code)
        return call()

    return call(), in_child(child)


@pytest.fixture
def seccomp() -> None:
    require(_libseccomp.load() is not None, "libseccomp")


@pytest.fixture
def openat2(seccomp: None) -> None:
    require(have_openat2(), "openat2(2) (Linux >= 5.6)")


@pytest.mark.parametrize("code", [errno.EAGAIN, errno.EINTR])
def test_openat2_gives_up_on_an_endless_race(
    openat2: None, root: Path, rootfd: int, code: int
) -> None:
    _tree(root)
    got = _faulted("openat2", code, lambda: _outcome(lambda: _open("openat2", rootfd, b"f")))
    assert got == (("opened",), _refused("RACE", "concurrent rename during lookup"))


@pytest.mark.parametrize("path", [b"f", b"missing"])
def test_openat2_exdev_the_walk_cannot_explain(
    openat2: None, root: Path, rootfd: int, path: bytes
) -> None:
    """The kernel's refusal stands even when the replay opens the path (``f``: the tree
    changed back) or fails otherwise (``missing``)."""
    _tree(root)
    got = _faulted("openat2", errno.EXDEV, lambda: _outcome(lambda: _open("openat2", rootfd, path)))
    control = ("opened",) if path == b"f" else _os_error(errno.ENOENT)
    assert got == (control, _refused("ESCAPE", "path leaves the root"))


def test_openat2_eloop_is_a_loop_unless_a_final_link_was_refused(
    openat2: None, root: Path, rootfd: int
) -> None:
    _tree(root)

    def calls() -> object:
        return [
            _outcome(lambda: _open("openat2", rootfd, b"f", os.O_RDONLY, follow=True)),
            _outcome(lambda: _open("openat2", rootfd, b"f", os.O_PATH, follow=False)),
            _outcome(lambda: _open("openat2", rootfd, b"f", os.O_RDONLY, follow=False)),
        ]

    loop = _refused("SYMLINK_LOOP", "too many symlinks")
    control = [("opened",)] * 3
    assert _faulted("openat2", errno.ELOOP, calls) == (
        control,
        [loop, loop, _os_error(errno.ELOOP)],
    )


def test_openat2_other_errnos_pass_through(openat2: None, root: Path, rootfd: int) -> None:
    _tree(root)
    got = _faulted("openat2", errno.EPERM, lambda: _outcome(lambda: _open("openat2", rootfd, b"f")))
    assert got == (("opened",), _os_error(errno.EPERM))


def test_the_probe_answers_what_the_kernel_does(openat2: None, root: Path) -> None:
    """Without openat2 (ENOSYS: an old kernel, or a container's seccomp profile) the
    probe says so, ``auto`` picks the walk and a forced ``openat2`` is refused."""
    (root / "f").write_bytes(b"F")

    def probe(broken: bool) -> object:
        if broken:
            _deny("openat2", errno.ENOSYS)
        _resolve._openat2_state.clear()  # this child's own first probe
        answer = _resolve.openat2_available()
        with Workspace(root) as ws:
            picked, data = ws.resolver, ws.read_bytes("f")
        try:
            Workspace(root, resolver="openat2").close()
            forced: object = "opened"
        except WorkspaceError as exc:
            forced = (exc.reason, exc.op)
        return answer, _resolve.openat2_available(), picked, data, forced

    assert _resolve.openat2_available() is True  # this process's probe (and the harness's)
    assert in_child(lambda: probe(False)) == (True, True, "openat2", b"F", "opened")
    unsupported = (WorkspaceReason.UNSUPPORTED, "Workspace")
    assert in_child(lambda: probe(True)) == (False, False, "walk", b"F", unsupported)


def test_the_probe_holds_no_fd(openat2: None) -> None:
    def child() -> object:
        _resolve._openat2_state.clear()
        before = sorted(os.listdir("/proc/self/fd"))
        _resolve.openat2_available()
        return before, sorted(os.listdir("/proc/self/fd"))

    assert _resolve.openat2_available() is True
    result = in_child(child)
    assert isinstance(result, tuple)
    before, after = result
    assert after == before


def test_fstatfs_failing_counts_as_procfs(seccomp: None, root: Path, rootfd: int) -> None:
    """The walk cannot tell whether an absolute link lives on procfs: it refuses it as
    a magic link (fail closed), not as the ordinary absolute link it may be."""
    _tree(root)
    control = _outcome(lambda: _open("walk", rootfd, b"abs"))
    assert control == _refused("ABSOLUTE_SYMLINK", "absolute symlink target")
    got = _faulted("fstatfs", errno.EPERM, lambda: _outcome(lambda: _open("walk", rootfd, b"abs")))
    assert got == (control, _refused("MAGIC_LINK", "magic link"))


@pytest.mark.parametrize(("system", "machine"), [("Linux", "mips64"), ("Darwin", "x86_64")])
def test_the_probe_trusts_syscall_437_only_where_it_is_openat2(
    openat2: None, monkeypatch: pytest.MonkeyPatch, root: Path, system: str, machine: str
) -> None:
    """437 is openat2 in the unified syscall table only; elsewhere (mips, alpha, ia64,
    or not Linux) the probe must not call it and answers no. The kernel's answer to
    uname(2) is the one input replaced here."""
    monkeypatch.setattr(_resolve, "_openat2_state", [])
    assert _resolve.openat2_available() is True  # control: this host
    monkeypatch.setattr(_resolve, "_openat2_state", [])
    real = os.uname()
    fake = os.uname_result((system, real.nodename, real.release, real.version, machine))
    monkeypatch.setattr(os, "uname", lambda: fake)
    assert _resolve.openat2_available() is False
    with Workspace(root) as ws:
        assert ws.resolver == "walk"


def test_the_probe_needs_no_read_permission_on_the_root(openat2: None, tmp_path: Path) -> None:
    """The probe opens ``/`` and ``.`` as O_PATH handles, which need no read permission:
    under a root directory only searchable (mode 0711, an unprivileged user), openat2
    is still found."""
    require(os.geteuid() == 0, "root (chroot(2) and setuid in a forked child)")
    top = tmp_path / "top"
    top.mkdir()
    top.chmod(0o711)

    def child() -> object:
        _resolve._openat2_state.clear()
        os.chroot(top)
        os.chdir("/")
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        try:
            os.listdir("/")
            readable = True
        except PermissionError:
            readable = False
        return readable, _resolve.openat2_available()

    assert _resolve.openat2_available() is True  # control, in this process
    assert in_child(child) == (False, True)  # the root is not readable; openat2 found
