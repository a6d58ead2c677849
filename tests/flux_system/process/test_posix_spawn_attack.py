"""An outside attack on the default spawn through ``posix_spawn`` (decision 0138).

The claim attacked: the ``posix_spawn`` child is exactly the child the ``Popen`` path
makes (fds, cwd, session, signal state, env, argv), failures are the same typed
``SpawnError`` and nothing is left behind. Each comparison runs both paths (the
``Popen`` one by making ``posix_spawn.available`` say no) and counts which path really
ran (the positive control). Real processes only; the spawn code itself is not mocked.

Three differences it found are fixed (each test failed before): an audit hook refusing
process creation did not stop the ``posix_spawn`` path (it now raises the
``os.posix_spawn`` event); glibc's own signal 32, ignored in a process started by a
glibc ``posix_spawn``, was forced to its default; and the child's signal mask was the
resident thread's (inherited from whoever made the cgroup), not the caller's, on both
paths. The other tests are attacks that held.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from flux_system import ProcessReason, SpawnError, System
from flux_system.process import _posix_spawn as posix_spawn
from tests.flux_system.process._process_support import PYTHON, REPO, count_spawn_paths, make_ws


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    (tmp_path / "sub").mkdir()
    with System(make_ws(tmp_path)) as s:
        s.run(["true"])  # warm: libc lookups, subreaper, the first cgroup
        yield s


def _both(monkeypatch: pytest.MonkeyPatch, probe: Callable[[], Any]) -> tuple[Any, Any]:
    """*probe* through posix_spawn, then through Popen; each path shown to have run."""
    calls = count_spawn_paths(monkeypatch)
    fast = probe()
    assert calls["posix_spawn"] >= 1 and calls["popen"] == 0
    calls.update(posix_spawn=0, popen=0)
    monkeypatch.setattr(posix_spawn, "available", lambda: False)
    slow = probe()
    assert calls["posix_spawn"] == 0 and calls["popen"] >= 1
    monkeypatch.undo()
    return fast, slow


def _sig_lines(system: System) -> dict[str, str]:
    """The signal state of a child that changes none (``cat``, not Python)."""
    result = system.run(["cat", "/proc/self/status"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    return dict(line.split(":\t", 1) for line in lines if line.startswith(("SigBlk", "SigIgn")))


def _our_fds() -> set[int]:
    """Our open fds, but the hand-off's eventfds: the resident thread closes its own
    copy of a job's eventfd just after waking the caller (decision 0028), so one may
    still be open for a moment when the spawn has returned."""
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") != "anon_inode:[eventfd]":
                fds.add(int(name))
        except FileNotFoundError:  # the listdir's own fd
            pass
    return fds


def _run_script(script: str, *, through_posix_spawn: bool = False) -> Any:
    """Run *script* in a fresh interpreter (state that cannot be undone in this one);
    it prints one JSON document."""
    env = {**os.environ, "PYTHONPATH": REPO}
    argv = [PYTHON, "-c", textwrap.dedent(script)]
    if through_posix_spawn:  # as GNU make or subprocess(close_fds=False) start us
        r, w = os.pipe()
        try:
            pid = os.posix_spawn(PYTHON, argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)])
        finally:
            os.close(w)
        with os.fdopen(r, "rb") as fh:
            out = fh.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, out
    else:
        done = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=30)
        assert done.returncode == 0, done.stderr
        out = done.stdout
    return json.loads(out)


_SCRIPT_HEAD = """
import json, os, subprocess, sys, tempfile
from flux_system import System, Workspace
from flux_system.process import _posix_spawn as posix_spawn
calls = {"posix_spawn": 0, "popen": 0}
real_spawn, real_fork_exec = posix_spawn.spawn, subprocess._fork_exec
def spawn(*a, **k):
    calls["posix_spawn"] += 1
    return real_spawn(*a, **k)
def fork_exec(*a, **k):
    calls["popen"] += 1
    return real_fork_exec(*a, **k)
posix_spawn.spawn, subprocess._fork_exec = spawn, fork_exec
real_available = posix_spawn.available
system = System(Workspace(tempfile.mkdtemp()))
"""


# -- differences found ------------------------------------------------------------------


def test_an_audit_hook_denying_process_creation_stops_the_default_spawn() -> None:
    # PEP 578: Popen raises the "subprocess.Popen" audit event before it forks, so a
    # host's audit hook can log or refuse every process created. The ctypes call into
    # posix_spawn raises no process-creation event at all (only "ctypes.call_function"
    # with a bare pointer): a hook that refuses process creation no longer stops a run.
    out = _run_script(
        _SCRIPT_HEAD
        + """
        deny = [False]
        def hook(event, args):
            if deny[0] and event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
                raise RuntimeError("process creation refused by the host's audit hook")
        sys.addaudithook(hook)
        system.run(["true"])  # warm, not denied
        deny[0] = True
        res = {}
        for path in ("posix_spawn", "popen"):
            posix_spawn.available = real_available if path == "posix_spawn" else (lambda: False)
            before = dict(calls)
            try:
                code = system.run(["true"]).exit_code
                res[path] = ["ran", code]
            except RuntimeError as exc:
                res[path] = ["refused", str(exc)]
            res[path + "_calls"] = {k: calls[k] - before[k] for k in calls}
        system.close()
        print(json.dumps(res))
        """.replace("\n        ", "\n")
    )
    # Positive control: the hook is live and refuses the Popen path's spawn.
    assert out["popen"][0] == "refused", out
    assert out["popen_calls"] == {"posix_spawn": 0, "popen": 0}  # refused before the fork
    # The posix_spawn path must be refused the same way (it is not: the child ran).
    assert out["posix_spawn"][0] == "refused", out


def test_a_signal_ignored_since_our_own_start_stays_ignored_as_with_popen() -> None:
    # A Flux process started by a glibc posix_spawn (GNU make >= 4.3, Python's
    # subprocess with close_fds=False, os.posix_spawn) has glibc's signal 32 ignored.
    # Exec keeps an ignored signal ignored: the Popen child has 32 ignored too. The
    # posix_spawn path forces 32 and 33 to their default unconditionally (its set-to-
    # default mask), so the two children differ in SigIgn.
    out = _run_script(
        _SCRIPT_HEAD
        + """
        def sig_ign():
            result = system.run(["cat", "/proc/self/status"])
            line = [l for l in result.stdout.decode().splitlines() if l.startswith("SigIgn")]
            return int(line[0].split()[1], 16)
        with open("/proc/self/status") as fh:
            ours = [l for l in fh.read().splitlines() if l.startswith("SigIgn")]
        res = {"parent": int(ours[0].split()[1], 16)}
        res["posix_spawn"] = sig_ign()
        res["posix_spawn_calls"] = dict(calls)
        posix_spawn.available = lambda: False
        res["popen"] = sig_ign()
        res["calls"] = dict(calls)
        system.close()
        print(json.dumps(res))
        """.replace("\n        ", "\n"),
        through_posix_spawn=True,
    )
    bit32 = 1 << 31
    assert out["parent"] & bit32, out  # positive control: the parent has 32 ignored
    assert out["posix_spawn_calls"] == {"posix_spawn": 1, "popen": 0}
    assert out["calls"] == {"posix_spawn": 1, "popen": 1}
    assert out["popen"] & bit32  # the Popen child inherits it, as exec does
    assert out["posix_spawn"] == out["popen"], out


def test_the_childs_signal_mask_is_the_calling_threads(tmp_path: Path) -> None:
    # The module docstring: the child gets "the calling thread's signal mask". On a v1
    # host the fork is done by the tree cgroup's resident thread, which got its mask
    # from whichever thread first made that (pooled, reused) cgroup: a SIGTERM blocked
    # there once is blocked in every later child, whatever the caller's mask is then.
    # (Both paths: the resident forks for Popen too; a plain Popen would not do it.)
    sigterm = 1 << (signal.SIGTERM - 1)
    with System(make_ws(tmp_path)) as system:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            blocked_then = int(_sig_lines(system)["SigBlk"], 16)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        calls = {"posix_spawn": 0}
        real_spawn = posix_spawn.spawn

        def spawn(*args: Any, **kwargs: Any) -> int:
            calls["posix_spawn"] += 1
            return real_spawn(*args, **kwargs)

        posix_spawn.spawn = spawn
        try:
            blocked_now = int(_sig_lines(system)["SigBlk"], 16)
        finally:
            posix_spawn.spawn = real_spawn
    assert blocked_then & sigterm  # positive control: the caller's mask reached a child
    assert calls["posix_spawn"] == 1
    assert not blocked_now & sigterm, f"SigBlk {blocked_now:x} with SIGTERM unblocked"


# -- attacks that held --------------------------------------------------------------------

_PROBE = r"""
import json, os, sys
print(json.dumps({
    "argv": [os.fsencode(a).hex() for a in sys.argv[1:]],
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "fd_kinds": [os.readlink(f"/proc/self/fd/{fd}").split(":")[0] for fd in "012"],
    "cwd": os.getcwd(),
    "sid": os.getsid(0) == os.getpid(),
    "pgrp": os.getpgrp() == os.getpid(),
    "env": {k.hex(): v.hex() for k, v in os.environb.items()},
}))
"""


def test_stray_fds_odd_argv_env_and_signal_state_are_the_same_on_both_paths(
    system: System, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    inheritable = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(inheritable, True)
    o_path = os.open(str(tmp_path), os.O_PATH)
    os.set_inheritable(o_path, True)
    high = os.dup2(o_path, 1500, inheritable=True)  # above FD_SETSIZE
    handled = signal.signal(signal.SIGUSR1, lambda *_: None)
    ignored = signal.signal(signal.SIGRTMAX, signal.SIG_IGN)
    argv = [PYTHON, "-c", _PROBE, "", "\udcff\udcfe raw", "é\n", "-" * 100_000, "x"]
    env = {"E": "", "RAW\udcff": "v\udcfe", "Ü": "ü=ü", "SPACE": " "}
    try:

        def probe() -> tuple[Any, dict[str, str]]:
            result = system.run(argv, env=env, cwd="sub")
            assert result.exit_code == 0, result.stderr
            return json.loads(result.stdout), _sig_lines(system)

        fast, slow = _both(monkeypatch, probe)
    finally:
        signal.signal(signal.SIGUSR1, handled)
        signal.signal(signal.SIGRTMAX, ignored)
        for fd in (inheritable, o_path, high):
            os.close(fd)
    assert fast == slow
    child, sigs = fast
    assert child["fds"] == [0, 1, 2, 3]  # 3: the probe's own listdir
    assert child["fd_kinds"] == ["/dev/null", "pipe", "pipe"]
    assert [bytes.fromhex(a) for a in child["argv"]] == [os.fsencode(a) for a in argv[3:]]
    assert child["env"][b"RAW\xff".hex()] == b"v\xfe".hex()
    assert child["cwd"] == str(tmp_path / "sub") and child["sid"] and child["pgrp"]
    assert int(sigs["SigIgn"], 16) & (1 << (signal.SIGRTMAX - 1))
    assert not int(sigs["SigIgn"], 16) & (1 << (signal.SIGUSR1 - 1))


def test_a_relative_executable_runs_from_the_pinned_cwd_and_a_named_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flux_system import Workspace

    (tmp_path / "main" / "sub").mkdir(parents=True)
    (tmp_path / "lib" / "d").mkdir(parents=True)
    for where in (tmp_path / "main" / "sub", tmp_path / "lib" / "d"):
        (where / "prog").write_text('#!/bin/sh\necho "$0 $PWD"\n')
        (where / "prog").chmod(0o755)
    (tmp_path / "main" / "prog").write_text("#!/bin/sh\necho WRONG\n")
    (tmp_path / "main" / "prog").chmod(0o755)
    ws = Workspace(tmp_path / "main", named_roots={"lib": str(tmp_path / "lib")})
    with System(ws) as system:

        def probe() -> list[bytes]:
            return [
                system.run(["./prog"], cwd="sub").stdout,
                system.run(["./prog"], cwd="@lib/d").stdout,
                system.run(["sub/prog"]).stdout,
            ]

        fast, slow = _both(monkeypatch, probe)
    assert fast == slow
    assert fast == [
        f"./prog {tmp_path}/main/sub\n".encode(),
        f"./prog {tmp_path}/lib/d\n".encode(),
        f"sub/prog {tmp_path}/main\n".encode(),
    ]


@pytest.mark.parametrize(
    "make",
    [
        "missing",
        "directory",
        "not_executable",
        "no_shebang",
        "empty_file",
        "missing_interpreter",
        "interpreter_is_a_directory",
        "too_many_args",
        "one_arg_too_long",
    ],
)
def test_a_failed_spawn_has_the_same_error_and_leaves_nothing(
    system: System, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, make: str
) -> None:
    target = tmp_path / "sub" / "prog"
    argv = ["./prog"]
    if make == "directory":
        target.mkdir()
    elif make == "not_executable":
        target.write_text("#!/bin/sh\n")
    elif make == "no_shebang":
        target.write_bytes(b"\x7fELF\x00 not a program\n")
    elif make == "empty_file":
        target.write_bytes(b"")
    elif make == "missing_interpreter":
        target.write_text("#!/nonexistent/sh\n")
    elif make == "interpreter_is_a_directory":
        target.write_text("#!/tmp\n")
    elif make == "too_many_args":
        argv = ["/bin/true", *(["y" * 4096] * 1024)]  # 4 MiB: above ARG_MAX
    elif make == "one_arg_too_long":
        argv = ["/bin/true", "z" * (200 * 1024)]  # above MAX_ARG_STRLEN
    if make not in ("directory", "not_executable", "missing") and target.exists():
        target.chmod(stat.S_IRWXU)
    fds_before = _our_fds()
    kids_before = {p.pid for p in psutil.Process().children()}

    def probe() -> tuple[object, str]:
        with pytest.raises(SpawnError) as info:
            system.run(argv, cwd="sub")
        return info.value.reason, str(info.value)

    calls = count_spawn_paths(monkeypatch)
    fast = probe()
    assert calls == {"posix_spawn": 1, "popen": 1}  # tried, then repeated to say why
    monkeypatch.setattr(posix_spawn, "available", lambda: False)
    slow = probe()
    assert calls == {"posix_spawn": 1, "popen": 2}
    monkeypatch.undo()
    assert fast == slow
    assert fast[0] in (
        ProcessReason.NOT_FOUND,
        ProcessReason.NOT_EXECUTABLE,
        ProcessReason.SPAWN_FAILED,
    )
    assert _our_fds() <= fds_before  # nothing new left open
    assert {p.pid for p in psutil.Process().children()} == kids_before
    assert system.run(["true"]).exit_code == 0


def test_many_threads_spawning_at_once_through_one_system(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_spawn_paths(monkeypatch)
    outs: dict[tuple[int, int], bytes] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            start.wait()
            for j in range(5):
                result = system.run(["sh", "-c", 'echo "$0 $1"; ls /proc/self/fd', str(i), str(j)])
                outs[i, j] = result.stdout
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert calls == {"posix_spawn": 40, "popen": 0}
    assert outs == {(i, j): f"{i} {j}\n0\n1\n2\n3\n".encode() for i in range(8) for j in range(5)}


@pytest.mark.parametrize("contain", [True, False], ids=["cgroup", "no_cgroup"])
def test_an_interrupt_right_after_the_c_call_leaves_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contain: bool
) -> None:
    # The KeyboardInterrupt lands inside spawn() once the C library returned the pid
    # (in its finally): the pid lives in the Leader's box, the child must be killed.
    with System(make_ws(tmp_path), _contain=contain) as system:
        system.run(["true"])
        assert posix_spawn._lib is not None
        lib = posix_spawn._lib
        real_destroy = lib.destroy
        leaders: list[posix_spawn.Leader] = []
        real_spawn = posix_spawn.spawn

        def spawn(leader: posix_spawn.Leader, *args: Any, **kwargs: Any) -> int:
            leaders.append(leader)
            return real_spawn(leader, *args, **kwargs)

        def destroy(actions: object) -> int:
            real_destroy(actions)
            monkeypatch.setattr(lib, "destroy", real_destroy)
            raise KeyboardInterrupt

        monkeypatch.setattr(posix_spawn, "spawn", spawn)
        monkeypatch.setattr(lib, "destroy", destroy)
        fds_before = _our_fds()
        with pytest.raises(KeyboardInterrupt):
            system.run(["sleep", "30"])
        monkeypatch.undo()
        assert len(leaders) == 1 and leaders[0].pid is not None  # the child was made
        with pytest.raises(psutil.NoSuchProcess):
            psutil.Process(leaders[0].pid).status()
        assert _our_fds() <= fds_before  # nothing new left open
        assert system.run(["echo", "ok"]).stdout == b"ok\n"


def test_a_parent_with_fds_0_to_2_closed_gives_the_same_child() -> None:
    out = _run_script(
        _SCRIPT_HEAD
        + """
        report = os.dup(1)
        system.run(["true"])
        for fd in (0, 1, 2):
            os.close(fd)
        res = {}
        script = "ls /proc/self/fd; readlink /proc/self/fd/0; echo err >&2; cat"
        for path in ("posix_spawn", "popen"):
            posix_spawn.available = real_available if path == "posix_spawn" else (lambda: False)
            piped = system.run(["sh", "-c", script], stdin=b"in")
            plain = system.run(["sh", "-c", script])
            res[path] = [
                piped.stdout.decode().split("\\n")[:4] + [piped.stdout.decode()[-2:]],
                piped.stderr.decode(),
                plain.stdout.decode().split("\\n")[:5],
                plain.stderr.decode(),
            ]
            res[path + "_calls"] = dict(calls)
        system.close()
        os.write(report, json.dumps(res).encode())
        """.replace("\n        ", "\n")
    )
    assert out["posix_spawn"] == out["popen"], out
    assert out["posix_spawn"][0][:4] == ["0", "1", "2", "3"]
    assert out["posix_spawn"][2] == ["0", "1", "2", "3", "/dev/null"]
    assert out["posix_spawn"][1] == out["posix_spawn"][3] == "err\n"
    assert out["posix_spawn_calls"]["posix_spawn"] >= 1  # the plain run took posix_spawn
    assert out["popen_calls"]["posix_spawn"] == out["posix_spawn_calls"]["posix_spawn"]
    assert out["popen_calls"]["popen"] > out["posix_spawn_calls"]["popen"]
