"""The Landlock-only spawner thread is out of its children's reach (decision 0117).

The spawner is a thread of the host process, restricted with Landlock and seccomp, and
its children share its Landlock domain: Landlock lets a domain signal and
ptrace-access its own members. With the old code a child, as root and as uid 65534,
read the host process's environment through ``/proc/<flux>/task/<spawner>/environ``,
opened its memory, took its fds (the seccomp listener among them: answering its own
denials) with ``pidfd_getfd``, and killed the host process with ``tgkill``, with
``kill(tid)`` and with ``pidfd_send_signal`` on ``/proc/<tid>`` opened as a directory.

Each run below is a separate driver process (a successful kill must not take pytest
with it): first a plain ``System`` (the positive control: the same attack on a thread
of the driver works), then the Landlock-only backend, then a plain ``System`` again
(the process is dumpable again once the sandboxed ``System`` is closed).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.flux_system.sandbox._support import (
    SYSTEM_PYTHON,
    require_landlock,
    require_unprivileged,
    run_unprivileged,
    world_dir,
)

MARKER = "flux-spawner-secret-5f1c"

# Run inside the sandbox by the system interpreter: attack every non-leader thread of
# the parent, record what worked, then (sandboxed only) really SIGKILL the spawner.
ATTACK = r"""
import ctypes, json, os, signal, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
out_path, mode, marker = sys.argv[1], sys.argv[2], sys.argv[3][::-1].encode()
ppid = os.getppid()
def ok(r):
    return r >= 0
found = []
for tid in sorted(int(t) for t in os.listdir(f"/proc/{ppid}/task")):
    if tid == ppid:
        continue
    base = f"/proc/{ppid}/task/{tid}"
    got = {"tid": tid}
    try:
        status = open(base + "/status").read()
        got["seccomp"] = int(status.split("Seccomp:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        got["seccomp"] = -1
    try:
        got["environ"] = marker in open(base + "/environ", "rb").read()
    except OSError:
        got["environ"] = False
    try:
        os.close(os.open(base + "/mem", os.O_RDONLY))
        got["mem"] = True
    except OSError:
        got["mem"] = False
    pidfd = libc.syscall(434, tid, 0o200)  # pidfd_open(tid, PIDFD_THREAD)
    got["pidfd_thread"] = ok(pidfd)
    got["getfd"] = False
    if pidfd >= 0:
        for n in range(64):
            fd = libc.syscall(438, pidfd, n, 0)  # pidfd_getfd
            if fd >= 0:
                got["getfd"] = True
                os.close(fd)
                break
        os.close(pidfd)
    got["tgkill"] = ok(libc.syscall(234, ppid, tid, 0))  # signal 0: the permission check
    got["tkill"] = ok(libc.syscall(200, tid, 0))
    got["kill"] = ok(libc.syscall(62, tid, 0))  # kill(tid): the thread's whole process
    info = ctypes.create_string_buffer(128)
    struct.pack_into("iii", info, 0, 0, 0, -1)  # si_code SI_QUEUE
    got["tgsigqueueinfo"] = ok(libc.syscall(297, ppid, tid, 0, info))
    got["sigqueueinfo"] = ok(libc.syscall(129, tid, 0, info))
    try:  # /proc/<tid> opened as a directory is a pidfd naming the thread
        dirfd = os.open(f"/proc/{tid}", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        got["proc_pidfd"] = False
    else:
        got["proc_pidfd"] = ok(libc.syscall(424, dirfd, 0, None, 1))  # PIDFD_SIGNAL_THREAD
        os.close(dirfd)
    r, w = os.pipe()
    buf = ctypes.create_string_buffer(struct.pack("ii", 0, tid))  # F_OWNER_TID, tid
    got["setown_tid"] = ok(libc.fcntl(r, 15, buf))  # F_SETOWN_EX
    os.close(r)
    os.close(w)
    found.append(got)
with open(out_path, "w") as fh:
    json.dump({"threads": found}, fh)
if mode == "sandboxed":
    for got in found:
        if got["seccomp"] == 2:  # the real thing: each a SIGKILL of the host process
            tid = got["tid"]
            dirfd = os.open(f"/proc/{tid}", os.O_RDONLY | os.O_DIRECTORY)
            got["killed"] = [
                ok(libc.syscall(234, ppid, tid, signal.SIGKILL)),
                ok(libc.syscall(62, tid, signal.SIGKILL)),
                ok(libc.syscall(424, dirfd, signal.SIGKILL, None, 1)),
            ]
    with open(out_path, "w") as fh:
        json.dump({"threads": found, "survived": True}, fh)
"""

# The driver: a plain System, the Landlock-only one, a plain one again.
DRIVER = r"""
import json, os, sys, threading
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings

base, python, marker, work = sys.argv[1:5]
attack = os.path.join(base, "attack.py")
stop = threading.Event()
threading.Thread(target=stop.wait, name="control-target", daemon=True).start()

def run(name, sandbox):
    ws_dir = os.path.join(work, "ws-" + name)
    os.mkdir(ws_dir)
    out = os.path.join(ws_dir, "out.json")
    mode = "sandboxed" if sandbox is not None else "control"
    with Workspace(ws_dir) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run([python, attack, out, mode, marker], timeout=60)
    with open(out) as fh:
        got = json.load(fh)
    got["exit"] = r.exit_code
    got["stderr"] = r.stderr_text[-2000:]
    got["denials"] = [d.what for d in r.denials.records] if r.denials else []
    return got

result = {"before": run("before", None)}
sb = Sandbox.resolve(SandboxSettings(mode="on", backend="landlock", read_only=(base,)))
result["landlock"] = run("landlock", sb)
result["backend"] = sb.report().backend
result["after"] = run("after", None)
stop.set()
print(json.dumps(result))
"""

ATTACKS = (
    "environ",
    "mem",
    "pidfd_thread",
    "getfd",
    "tgkill",
    "tkill",
    "kill",
    "tgsigqueueinfo",
    "sigqueueinfo",
    "proc_pidfd",
    "setown_tid",
)


def _stage(base: Path) -> None:
    (base / "attack.py").write_text(ATTACK)
    (base / "attack.py").chmod(0o644)


@pytest.fixture(scope="module")
def as_root() -> Iterator[dict[str, object]]:
    require_landlock(6)
    require_unprivileged()  # the system interpreter runs the attack inside
    base = world_dir("flux-spawner-root-")
    try:
        _stage(base)
        driver = base / "driver.py"
        driver.write_text(DRIVER)
        proc = subprocess.run(
            [sys.executable, "-B", str(driver), str(base), SYSTEM_PYTHON, MARKER[::-1], str(base)],
            capture_output=True,
            timeout=180,
            check=False,
            env={"PATH": "/usr/bin:/bin", "FLUX_TEST_SECRET": MARKER, "PYTHONPATH": str(_repo())},
        )
        assert proc.returncode == 0, (proc.returncode, proc.stderr.decode(errors="replace"))
        yield dict(json.loads(proc.stdout.decode().splitlines()[-1]))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def as_unprivileged() -> Iterator[dict[str, object]]:
    require_landlock(6)
    require_unprivileged()
    base = world_dir("flux-spawner-user-")
    try:
        _stage(base)
        script = (
            f"import os, sys\nos.environ['FLUX_TEST_SECRET'] = {MARKER!r}\n"
            "os.execv(sys.executable, [sys.executable, '-B', "
            f"os.path.join({str(base)!r}, 'driver.py'), {str(base)!r}, "
            f"{SYSTEM_PYTHON!r}, {MARKER[::-1]!r}, {str(base / 'work')!r}])\n"
        )
        (base / "driver.py").write_text(DRIVER)
        (base / "driver.py").chmod(0o644)
        yield run_unprivileged(script, base, timeout=180)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _repo() -> Path:
    return Path(__file__).resolve().parents[3]


def _check(result: dict[str, object]) -> None:
    assert result["backend"] == "landlock"
    for phase in ("before", "after"):
        got = result[phase]
        assert isinstance(got, dict)
        assert got["exit"] == 0, got["stderr"]
        threads = got["threads"]
        # positive control: the attack works on a thread of an unconfined host process
        assert threads, "the control found no thread of its parent to attack"
        for attack in ATTACKS:
            assert any(t[attack] for t in threads), (phase, attack, threads)
    got = result["landlock"]
    assert isinstance(got, dict)
    assert got["exit"] == 0, got["stderr"]
    assert got.get("survived") is True
    threads = got["threads"]
    spawner = [t for t in threads if t["seccomp"] == 2]
    assert len(spawner) == 1, threads  # the attack saw the spawner thread
    assert spawner[0]["killed"] == [False, False, False]
    for t in threads:
        for attack in ATTACKS:
            assert t[attack] is False, (attack, t)
    # seccomp's refusals of the calls aimed at the spawner are evidence
    assert {
        "kill",
        "rt_sigqueueinfo",
        "tgkill",
        "tkill",
        "rt_tgsigqueueinfo",
        "pidfd_open",
        "fcntl",
    } <= set(got["denials"])


def test_spawner_thread_out_of_reach_as_root(as_root: dict[str, object]) -> None:
    _check(as_root)


def test_spawner_thread_out_of_reach_as_unprivileged(as_unprivileged: dict[str, object]) -> None:
    _check(as_unprivileged)


def test_undumpable_is_counted_and_restored() -> None:
    import ctypes

    from flux_system.sandbox import _undumpable

    libc = ctypes.CDLL(None, use_errno=True)

    def dumpable() -> int:
        return int(libc.prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE

    before = dumpable()  # 1, unless a Landlock-only System of another test is still open
    _undumpable.hold()
    _undumpable.hold()
    try:
        assert dumpable() == 0
        _undumpable.release()
        assert dumpable() == 0  # one holder left
    finally:
        _undumpable.release()
    assert dumpable() == before
    _undumpable.release()  # an extra release changes nothing
    assert dumpable() == before
