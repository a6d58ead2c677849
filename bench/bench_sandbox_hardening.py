"""What the third review's bubblewrap options cost: bare bwrap with and without them.

Both sides are ``subprocess.run`` of the bwrap command line the backend builds for
``/bin/true`` (default profile, network none; read from its ``--args`` memfd, seccomp
program included, the same pipes), interleaved rounds, medians. The baseline is the
same line with this review's additions taken out — ``--remount-ro /dev --remount-ro
/`` (decision 0118), the three ``--size N`` (0118) and the six more ``/dev/null`` binds
over ``/proc`` files (0116, amendment) — so the ratio is their cost alone, on the
floor every sandboxed run pays.

Run: ``python bench/bench_sandbox_hardening.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record, side_by_side
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from flux_system.sandbox._bwrap import memfd_with

NEW_HIDDEN = ("kpageflags", "kpagecount", "kpagecgroup", "slabinfo", "pagetypeinfo", "vmallocinfo")


def _without_review(opts: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    i = 0
    while i < len(opts):
        o = opts[i]
        if o in (b"--remount-ro", b"--size"):
            i += 2
            continue
        if o == b"--ro-bind-try" and opts[i + 2].decode().removeprefix("/proc/") in NEW_HIDDEN:
            i += 3
            continue
        out.append(o)
        i += 1
    return out


def _runners(system: System) -> tuple[Callable[[], object], Callable[[], object]]:
    confine = system._confine
    assert confine is not None
    rootfd = system._ws._open_dir_fd(".")
    try:
        launch = confine.launch(("/bin/true",), "/bin/true", {"PATH": "/usr/bin:/bin"}, rootfd)
    finally:
        os.close(rootfd)
    args_fd = int(launch.argv[2])
    opts = os.pread(args_fd, 1 << 20, 0).split(b"\0")[:-1]
    if b"--info-fd" in opts:
        at = opts.index(b"--info-fd")
        del opts[at : at + 2]
    seccomp_src = int(opts[opts.index(b"--seccomp") + 1])
    seccomp_copy = os.dup(seccomp_src)
    keep = [fd for fd in launch.pass_fds if fd not in (args_fd, seccomp_src, *launch.owned_fds)]
    launch.close_fds()
    bwrap, command = launch.executable, list(launch.argv[4:])

    def runner(variant: list[bytes]) -> Callable[[], object]:
        at = variant.index(b"--seccomp") + 1

        def run() -> object:
            sfd = os.open(f"/proc/self/fd/{seccomp_copy}", os.O_RDONLY | os.O_CLOEXEC)
            variant[at] = str(sfd).encode()
            afd = memfd_with("bench-args", b"".join(o + b"\0" for o in variant))
            try:
                return subprocess.run(
                    [bwrap, "--args", str(afd), "--", *command],
                    capture_output=True,
                    env={},
                    pass_fds=(afd, sfd, *keep),
                    check=True,
                )
            finally:
                os.close(afd)
                os.close(sfd)
                _reap_orphans()

        return run

    stripped = _without_review(list(opts))
    assert len(stripped) < len(opts), "the review's options were not found"
    return runner(list(opts)), runner(stripped)


def _reap_orphans() -> None:
    while True:  # bwrap's inits, re-parented to this subreaper (see bench_sandbox.py)
        try:
            if os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG) is None:
                return
        except ChildProcessError:
            return


def main() -> None:
    box = Sandbox.resolve(SandboxSettings(mode="require", profile="default"))
    with tempfile.TemporaryDirectory() as root, Workspace(root) as ws, System(ws, sandbox=box) as s:
        with_review, without = _runners(s)
        for _ in range(10):
            with_review()
            without()
        got = side_by_side(with_review, without, number=5, rounds=15)
    load = os.getloadavg()[0]
    print(
        f"bare bwrap, default profile: {got['candidate_s'] * 1e3:.2f} ms with the review's "
        f"options, {got['baseline_s'] * 1e3:.2f} ms without, ratio {got['ratio']:.3f}x "
        f"(load {load:.2f})"
    )
    record("sandbox_hardening", {"bare_bwrap_with_vs_without": got, "load": load})


if __name__ == "__main__":
    main()
