"""Regressions from the adversarial review of System (docs/decisions/0022), real processes.

Each test is named after what it reproduces; each failed before its fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from flux_system import (
    FluxSystemError,
    Limits,
    Privileges,
    ProcessReason,
    ProcessTimeoutError,
    SpawnError,
    System,
)
from flux_system.process._cgroup import process_limit_available
from flux_system.process._reap import cgroup_available
from tests._capabilities import require
from tests.flux_system.process._process_support import PYTHON, REPO, make_ws

UNPRIVILEGED = 64998


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    with System(make_ws(tmp_path)) as s:
        yield s


def _nested(system: System, body: str, env: dict[str, str] | None = None) -> str:
    """Run *body* in a fresh interpreter that imports flux (for process-wide state)."""
    code = f"import sys\nsys.path.insert(0, {REPO!r})\n" + textwrap.dedent(body)
    result = system.run([PYTHON, "-c", code], timeout=60, env=env)
    assert result.exit_code == 0, result.stderr_text
    return result.stdout_text.strip()


# -- environment -------------------------------------------------------------------------


def test_env_value_not_encodable_is_typed_and_never_carries_the_value(system: System) -> None:
    secret = "sk-live-0123456789"
    with pytest.raises(SpawnError) as ei:
        system.run(["true"], env={"TOKEN": secret + "\ud800"})
    assert ei.value.reason is ProcessReason.INVALID_ENV
    chain: list[BaseException] = []
    exc: BaseException | None = ei.value
    while exc is not None and len(chain) < 10:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert all(secret not in repr(e) and secret not in str(e) for e in chain)


def test_env_name_with_equals_or_nul_is_invalid_env(system: System) -> None:
    for env in ({"A=B": "x"}, {"": "x"}, {"A\0": "x"}, {"A": "se\0cret"}):
        with pytest.raises(SpawnError) as ei:
            system.run(["true"], env=env)
        assert ei.value.reason is ProcessReason.INVALID_ENV
        assert "cret" not in str(ei.value)


def test_argv_not_encodable_is_invalid_argv(system: System) -> None:
    with pytest.raises(SpawnError) as ei:
        system.run(["echo", "\ud800"])
    assert ei.value.reason is ProcessReason.INVALID_ARGV


def test_parent_hook_case_variants_and_families_never_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = {
        "BASH_FUNC_flux_evil%%": "() {  echo pwned; }",
        "Ld_Preload": "/nonexistent/evil.so",
        "GLIBC_TUNABLES": "glibc.malloc.check=3",
        "PYTHONWARNINGS": "ignore::evil.Hook",
        "GIT_DIR": "/nonexistent/repo",
        "MALLOC_PERTURB_": "85",
        "OPENSSL_CONF": "/nonexistent/openssl.cnf",
    }
    for name, value in hooks.items():
        monkeypatch.setenv(name, value)
    allow = frozenset({"PATH", *hooks})  # refused even when the allow-list names them
    with System(make_ws(tmp_path), env_allowlist=allow) as s:
        listed = s.run(["env"]).stdout_text
        ran = s.run(["bash", "-c", "flux_evil"])
    names = {line.split("=", 1)[0] for line in listed.splitlines()}
    assert names.isdisjoint(hooks)
    assert b"pwned" not in ran.stdout and ran.exit_code == 127


def test_inherited_path_loses_relative_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = tmp_path / "flux-planted"
    planted.write_text("#!/bin/sh\necho planted-ran\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"::.:bin:{os.environ['PATH']}")
    with System(make_ws(tmp_path)) as s:
        path = s.run(["sh", "-c", 'printf %s "$PATH"']).stdout_text
        ran = s.run(["sh", "-c", "flux-planted"])
        # The caller's own env is applied as given (documented), but argv[0] is still
        # resolved on absolute entries only.
        with pytest.raises(SpawnError) as ei:
            s.run(["flux-planted"], env={"PATH": "."})
    assert all(entry.startswith("/") for entry in path.split(":"))
    assert b"planted-ran" not in ran.stdout
    assert ei.value.reason is ProcessReason.NOT_FOUND


def test_uid_drop_keeps_parent_environ_unreadable(system: System) -> None:
    # The environment guarantee covers what is handed over. A root child can read its
    # parent's /proc/PID/environ (the control); a dropped uid cannot. The parent here is
    # a nested flux process started with the secret in its environment.
    out = _nested(
        system,
        f"""
        import os, pathlib
        from flux_system import Privileges, System, Workspace
        argv = ['cat', f'/proc/{{os.getpid()}}/environ']
        with System(Workspace(pathlib.Path('.'))) as s:
            same = s.run(argv)
        priv = Privileges(uid={UNPRIVILEGED}, gid={UNPRIVILEGED}, no_new_privs=True)
        with System(Workspace(pathlib.Path('.')), privileges=priv) as s:
            dropped = s.run(argv)
        print(b's3cr3t-environ' in same.stdout, dropped.exit_code != 0,
              b's3cr3t-environ' in dropped.stdout)
        """,
        env={"FLUX_REVIEW_SECRET": "s3cr3t-environ"},
    )
    assert out.split() == ["True", "True", "False"]


def test_uid_without_gid_refused() -> None:
    with pytest.raises(ValueError, match="gid"):
        Privileges(uid=UNPRIVILEGED)


# -- fds, cwd, terminal ------------------------------------------------------------------


def test_timeout_with_fds_above_fd_setsize_is_a_timeout(system: System) -> None:
    fds = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(1100)]
    try:
        with pytest.raises(ProcessTimeoutError):
            system.run(["sleep", "30"], timeout=0.2)
    finally:
        for fd in fds:
            os.close(fd)


def test_no_fd_leaks_with_many_inheritable_fds_in_parent(system: System, tmp_path: Path) -> None:
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(50)]
    for fd in opened:
        os.set_inheritable(fd, True)
    high = os.dup2(opened[0], 4000, inheritable=True)
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    os.set_inheritable(dirfd, True)
    pidfd = os.pidfd_open(os.getpid())
    code = (  # the listing's own fd is closed again when the filter runs
        "import os\n"
        "def is_open(fd):\n"
        "    try: os.fstat(fd)\n"
        "    except OSError: return False\n"
        "    return True\n"
        "print(sorted(int(n) for n in os.listdir('/proc/self/fd') if is_open(int(n))))"
    )
    try:
        out = system.run([PYTHON, "-S", "-c", code]).stdout
    finally:
        for fd in (*opened, high, dirfd, pidfd):
            os.close(fd)
    assert out == b"[0, 1, 2]\n"


def test_parent_with_std_fds_closed_can_still_run(system: System, tmp_path: Path) -> None:
    # Closed 0-2 make the next open return them: the cwd fd must not be clobbered by
    # the child's dup2 of its stdio (it failed every run with BAD_CWD).
    out = _nested(
        system,
        """
        import os, pathlib
        from flux_system import System, Workspace
        s = System(Workspace(pathlib.Path('.')))
        s.run(['true'])  # the pool's fds are open now: the next open returns 0
        os.close(0)
        r = s.run(['cat'], stdin=b'through')
        os.write(1, r.stdout + b' ' + s.run(['pwd']).stdout)
        """,
    )
    assert out.split() == ["through", str(tmp_path)]


def test_child_has_no_controlling_terminal(system: System) -> None:
    # With a terminal, a child in the caller's session could read it or inject input
    # with TIOCSTI. The nested process takes a pty as its terminal, then runs a child.
    out = _nested(
        system,
        """
        import fcntl, os, pathlib, termios
        from flux_system import System, Workspace
        master, slave = os.openpty()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            os.close(os.open('/dev/tty', os.O_RDWR))  # control: we have a terminal
            s = System(Workspace(pathlib.Path('.')))
            probe = "import os\\ntry: os.open('/dev/tty', os.O_RDWR); print('tty')\\n"
            probe += "except OSError: print('none')"
            r = s.run([sys.executable, '-S', '-c', probe], stdin=None)
            os.write(1, r.stdout)
            s.close()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        """,
    )
    assert out == "none"


# -- timeouts and admission --------------------------------------------------------------


def test_huge_timeout_is_waited_not_overflowed(system: System) -> None:
    assert system.run(["true"], timeout=1e300).exit_code == 0
    assert asyncio.run(system.arun(["true"], timeout=1e300)).exit_code == 0
    child = system.spawn(["true"], timeout=1e300)
    assert child.join(30) and child.status().exit_code == 0
    with pytest.raises(ValueError):
        system.run(["true"], timeout=10**400)


def test_max_children_bool_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        System(make_ws(tmp_path), max_children=True)


def test_out_of_fds_is_a_typed_error(system: System) -> None:
    out = _nested(
        system,
        """
        import os, pathlib, resource
        from flux_system import System, Workspace, FluxSystemError
        s = System(Workspace(pathlib.Path('.')))
        s.run(['true'])
        n = len(os.listdir('/proc/self/fd'))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (n + 1, hard))
        try:
            s.run(['true'])
        except FluxSystemError as exc:
            print('typed', exc.reason.value)
        except OSError as exc:
            print('oserror', exc.errno)
        """,
    )
    assert out.startswith("typed"), out


# -- trees -------------------------------------------------------------------------------

# Each hop forks, the parent exits, the child leaves the session: every exited hop is
# re-parented to us as a zombie with a pgid and session no kill round ever saw.
CHAIN = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, b"fluxchain", 0, 0, 0)
for _ in range(int(sys.argv[1])):
    if os.fork():
        os._exit(0)
    os.setsid()
os.write(1, b"end\\n")
os.pause()
"""


def _chain_left() -> list[psutil.Process]:
    left = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.name() == "fluxchain":
                left.append(p)
    return left


def test_fork_and_exit_chain_leaves_no_zombie(system: System) -> None:
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    script = f'{PYTHON} -S -c "$0" 40; sleep 30'
    with pytest.raises(ProcessTimeoutError) as ei:
        limits = Limits(nproc=200) if process_limit_available() else None  # a bound only
        system.run(["sh", "-c", script, CHAIN], timeout=3.0, limits=limits)
    assert b"end" in ei.value.stdout  # the chain ran to its end before the timeout
    assert _chain_left() == []


def test_member_whose_main_thread_exited_is_killed(system: System) -> None:
    # Its /proc state is "Z" while its other thread runs: not to be taken for dead.
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    code = (
        "import ctypes, os, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,)).start()\n"
        "print(os.getpid(), flush=True)\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    lines: list[bytes] = []
    with pytest.raises(ProcessTimeoutError):
        system.run(
            ["sh", "-c", f'{PYTHON} -S -c "$0" & wait', code],
            timeout=2.0,
            observer=lambda stream, line: lines.append(line),
        )
    with pytest.raises(psutil.NoSuchProcess):
        psutil.Process(int(lines[0])).status()


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_leader_exit_with_uncontained_pipe_holder_does_not_hang(tmp_path: Path, mode: str) -> None:
    # Without a cgroup a setsid'd daemon survives (tree_contained False, documented) and
    # holds stdout: the run used to wait for it until the timeout, or forever.
    script = 'setsid sh -c "sleep 30 & echo \\$!"; echo done'
    holder = 0
    try:
        with System(make_ws(tmp_path), _contain=False) as s:
            if mode == "run":
                result = s.run(["sh", "-c", script], timeout=20)
            else:
                result = asyncio.run(s.arun(["sh", "-c", script], timeout=20))
        holder = int(result.stdout.split()[0])
        assert result.exit_code == 0 and not result.tree_contained
        assert result.stdout.split()[1] == b"done"
    finally:
        if holder:  # the survivor was adopted by us (subreaper): kill and reap it
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(holder, 0)


def test_typed_errors_are_flux_errors(system: System) -> None:
    # Guard for the list above: none of the refusals is a bare OSError.
    calls: list[Callable[[], object]] = [
        lambda: system.run(["true"], env={"A=": "v"}),
        lambda: system.run(["true"], cwd="missing-dir"),
        lambda: system.run(["./missing"]),
    ]
    for call in calls:
        with pytest.raises(FluxSystemError):
            call()
