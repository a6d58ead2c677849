"""Sandbox benchmarks: the cost of confinement over its own floor (ratios, same run).

1. ``System(ws, sandbox=default).run(["/bin/true"])`` (network none) vs
   ``subprocess.run`` of the equivalent bare ``bwrap`` command line — the very options
   the backend builds (read from its ``--args`` memfd, seccomp program included), the
   same pipes — target <= 1.25x. ``strict`` (Landlock applied by the in-sandbox
   launcher) and ``net-proxy`` (a proxy and forwarder per run) against the same
   baseline, reported.
2. The Landlock-only backend vs an unsandboxed ``System.run`` (target <= 1.5x).
3. ``flux exec -- /bin/true`` (default profile), whole process, vs
   ``python3 -c pass`` plus the bare bwrap run (target <= 3x), when the ``flux``
   command of this checkout is found (``.venv/bin/flux``). The baseline interpreter is
   the one the ``flux`` script runs (its shebang), the packages byte-compiled first.

Run: ``python bench/bench_sandbox.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import compile_packages, interpreter_of, per_call, record, side_by_side
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from flux_system.sandbox._bwrap import memfd_with
from flux_system.sandbox._bwrap_init import reap_init

REPO = Path(__file__).resolve().parent.parent


def _bare_bwrap(
    system: System,
    *,
    wait_init: bool = False,
    edit: Callable[[list[bytes]], list[bytes]] | None = None,
) -> Callable[[], object]:
    """``subprocess.run`` of the bwrap command line the backend builds for /bin/true
    (passed through *edit* first, when given)."""
    confine = system._confine
    assert confine is not None
    rootfd = system._ws._open_dir_fd(".")
    try:
        launch = confine.launch(("/bin/true",), "/bin/true", {"PATH": "/usr/bin:/bin"}, rootfd)
    finally:
        os.close(rootfd)
    args_fd = int(launch.argv[2])
    data = os.pread(args_fd, 1 << 20, 0)
    opts = data.split(b"\0")[:-1]
    if b"--info-fd" in opts:  # plain bwrap use: nobody asks for its init's pid
        at = opts.index(b"--info-fd")
        del opts[at : at + 2]
    if edit is not None:
        opts = edit(opts)
    if wait_init:  # and this variant waits for the init's exit, as System does
        opts += [b"--info-fd", b"-1"]
        info_at = len(opts) - 1
    seccomp_at = opts.index(b"--seccomp") + 1
    seccomp_src = int(opts[seccomp_at])
    seccomp_copy = os.dup(seccomp_src)  # the memfd behind it, kept for the baseline
    keep = [fd for fd in launch.pass_fds if fd not in (args_fd, seccomp_src, *launch.owned_fds)]
    launch.close_fds()
    bwrap = launch.executable
    command = list(launch.argv[4:])

    def run() -> object:
        sfd = os.open(f"/proc/self/fd/{seccomp_copy}", os.O_RDONLY | os.O_CLOEXEC)
        opts[seccomp_at] = str(sfd).encode()
        extra: tuple[int, ...] = ()
        ir = iw = -1
        if wait_init:
            ir, iw = os.pipe2(os.O_CLOEXEC)
            opts[info_at] = str(iw).encode()
            extra = (iw,)
        afd = memfd_with("bench-args", b"".join(o + b"\0" for o in opts))
        try:
            done = subprocess.run(
                [bwrap, "--args", str(afd), "--", *command],
                capture_output=True,  # the same two pipes as System.run
                env={},
                pass_fds=(afd, sfd, *keep, *extra),
                check=True,
            )
            if wait_init:
                os.close(iw)
                iw = -1
                reap_init(ir, None)
            else:
                _reap_orphans()
            return done
        finally:
            os.close(afd)
            os.close(sfd)
            for fd in (ir, iw):
                if fd >= 0:
                    os.close(fd)

    return run


def _reap_orphans() -> None:
    """Reap the zombies re-parented to this process (bwrap's init, once bwrap exited).

    ``System`` makes this process a child subreaper, so the init of every bare run
    would pile up here as a zombie child — which a plain ``subprocess.run`` user, not a
    subreaper, never holds — and every later ``System.run``, which looks at this
    process's children for tree members, would pay for the pile: a baseline must not
    slow its candidate down. Only runs between calls, when no ``System`` child exists.
    """
    while True:
        try:
            found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            return
        if found is None:
            return


def _flux_exec() -> str | None:
    for candidate in (REPO / ".venv" / "bin" / "flux",):
        if candidate.exists():
            return str(candidate)
    return None


def main() -> None:
    figures: dict[str, object] = {}
    settings = {
        "default": SandboxSettings(mode="require", profile="default"),
        "strict": SandboxSettings(mode="require", profile="strict"),
        "net-proxy": SandboxSettings(mode="require", profile="net-proxy"),
        "landlock": SandboxSettings(mode="on", backend="landlock"),
    }
    boxes = {name: Sandbox.resolve(s) for name, s in settings.items()}
    with tempfile.TemporaryDirectory() as root, Workspace(root) as ws:
        systems = {name: System(ws, sandbox=box) for name, box in boxes.items()}
        plain = System(ws)
        try:
            bare = _bare_bwrap(systems["default"])
            for _ in range(10):  # warm up every path
                bare()
                plain.run(["/bin/true"])
                for s in systems.values():
                    s.run(["/bin/true"])
            for name in ("default", "strict", "net-proxy"):
                system = systems[name]
                got = side_by_side(
                    lambda system=system: system.run(["/bin/true"]),  # type: ignore[misc]
                    bare,
                    number=5,
                    rounds=15 if name == "default" else 7,
                )
                target = " (target <= 1.25x)" if name == "default" else ""
                print(
                    f"{name}: System.run {got['candidate_s'] * 1e3:.2f} ms, bare bwrap "
                    f"{got['baseline_s'] * 1e3:.2f} ms, ratio {got['ratio']:.2f}x{target}"
                )
                figures[f"{name}_vs_bare_bwrap"] = got
                if name == "default":
                    one = per_call(lambda: systems["default"].run(["/bin/true"]), bare, 150)
                    print(
                        f"  default, alternating single calls: {one['candidate_s'] * 1e3:.2f} vs "
                        f"{one['baseline_s'] * 1e3:.2f} ms, ratio {one['ratio']:.2f}x"
                    )
                    figures["default_vs_bare_bwrap_per_call"] = one
            bare_wait = _bare_bwrap(systems["default"], wait_init=True)
            got = side_by_side(
                lambda: systems["default"].run(["/bin/true"]), bare_wait, number=5, rounds=15
            )
            print(
                f"default vs bare bwrap that also waits for its init's exit (the sandbox's "
                f"teardown, as System does): {got['candidate_s'] * 1e3:.2f} vs "
                f"{got['baseline_s'] * 1e3:.2f} ms, ratio {got['ratio']:.2f}x"
            )
            figures["default_vs_bare_bwrap_waiting_for_init"] = got
            proc = side_by_side(
                lambda: plain.run(["/bin/true"]),
                lambda: subprocess.run(["/bin/true"], capture_output=True, check=False),
                number=10,
                rounds=15,
            )
            print(
                f"(process layer alone: System.run {proc['candidate_s'] * 1e3:.2f} ms, "
                f"subprocess.run {proc['baseline_s'] * 1e3:.2f} ms, ratio {proc['ratio']:.2f}x:"
                " the per-tree cgroup and drain that the bare bwrap baseline lacks)"
            )
            figures["process_layer_vs_subprocess"] = proc
            ll = side_by_side(
                lambda: systems["landlock"].run(["/bin/true"]),
                lambda: plain.run(["/bin/true"]),
                number=10,
                rounds=15,
            )
            print(
                f"landlock-only: System.run {ll['candidate_s'] * 1e3:.2f} ms, unsandboxed "
                f"{ll['baseline_s'] * 1e3:.2f} ms, ratio {ll['ratio']:.2f}x (target <= 1.5x)"
            )
            figures["landlock_vs_unsandboxed"] = ll
            flux = _flux_exec()
            if flux is not None:
                compile_packages()
                python = interpreter_of(flux)

                def baseline() -> None:
                    subprocess.run([python, "-c", "pass"], check=True)
                    bare()

                def flux_exec() -> None:
                    subprocess.run(
                        [flux, "exec", "--workspace", root, "--", "/bin/true"],
                        check=True,
                        stdout=subprocess.DEVNULL,
                    )

                fx = side_by_side(flux_exec, baseline, number=3, rounds=7)
                print(
                    f"flux exec -- /bin/true: {fx['candidate_s'] * 1e3:.1f} ms, python3 -c "
                    f"pass + bare bwrap {fx['baseline_s'] * 1e3:.1f} ms, ratio "
                    f"{fx['ratio']:.2f}x (target <= 3x)"
                )
                figures["flux_exec_vs_python_plus_bwrap"] = fx
            else:
                print("flux exec: no .venv/bin/flux in this checkout (skipped)")
        finally:
            for s in systems.values():
                s.close()
            plain.close()
    record("sandbox", figures)


if __name__ == "__main__":
    main()
