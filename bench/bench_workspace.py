"""Workspace benchmarks: confined reads and resolution against their baselines.

Ratios, measured side by side in one run (interleaved rounds, medians):

1. confined small-file read (``ws.read_bytes``) vs plain ``open(path, "rb").read()``
   (target <= 1.5x), for each resolver;
2. confined read vs the naive "realpath, check prefix, then open" (target < 1.0x);
3. resolution of a 20-component path (``ws.stat``, one open + fstat) vs
   ``os.path.realpath`` of the same path;
4. atomic write of 512 bytes (``ws.write_bytes``: temp file, fsync, rename, fsync of
   the directory) vs the same steps done plainly without the directory fsync (what
   ``write_bytes`` did before decision 0014) and with it (the confinement's own cost);
5. the same write through a final symlink (``link -> target``, written through as
   decision 0016 says) vs the write to ``target`` itself: the cost of following it
   (one ``readlinkat`` and one beneath-resolution of the target's directory).

Run: ``python bench/bench_workspace.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record, side_by_side
from flux_system import Workspace
from flux_system.workspace._resolve import openat2_available

NUMBER = 3000
WRITES = 150  # per round: each write waits for two fsyncs
DEPTH = 20


def _naive_read(root: str, rel: str) -> bytes:
    real = os.path.realpath(os.path.join(root, rel))
    if not real.startswith(root + os.sep):
        raise PermissionError(rel)
    with open(real, "rb") as fh:
        return fh.read()


def _plain_write(dirfd: int, data: bytes, *, sync_dir: bool) -> None:
    fd = os.open("w.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666, dir_fd=dirfd)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename("w.tmp", "plain.txt", src_dir_fd=dirfd, dst_dir_fd=dirfd)
    if sync_dir:
        os.fsync(dirfd)


def _writes(name: str, ws: Workspace, root: str, figures: dict[str, float]) -> None:
    data = b"w" * 512
    dirfd = os.open(os.path.join(root, "src"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        r4 = side_by_side(
            lambda: ws.write_bytes("src/confined.txt", data),
            lambda: _plain_write(dirfd, data, sync_dir=False),
            number=WRITES,
        )
        r5 = side_by_side(
            lambda: ws.write_bytes("src/confined.txt", data),
            lambda: _plain_write(dirfd, data, sync_dir=True),
            number=WRITES,
        )
    finally:
        os.close(dirfd)
    figures[f"{name}.write_vs_plain_nodirsync"] = r4["ratio"]
    figures[f"{name}.write_vs_plain_dirsync"] = r5["ratio"]
    figures[f"{name}.write_us"] = r5["candidate_s"] * 1e6
    figures[f"{name}.plain_write_nodirsync_us"] = r4["baseline_s"] * 1e6
    figures[f"{name}.plain_write_dirsync_us"] = r5["baseline_s"] * 1e6
    print(
        f"{name:8s} atomic write vs plain (no dir fsync): {r4['ratio']:.2f}x  "
        f"vs plain (dir fsync): {r5['ratio']:.2f}x  "
        f"({r5['candidate_s'] * 1e6:.0f} us vs {r4['baseline_s'] * 1e6:.0f} / "
        f"{r5['baseline_s'] * 1e6:.0f} us)"
    )


def _link_writes(name: str, figures: dict[str, float]) -> None:
    """On tmpfs where there is one (fsync nearly free there), so the disk's noise does
    not drown the cost of following the link; both sides on the same file system."""
    data = b"w" * 512
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        os.mkdir(os.path.join(tmp, "src"))
        os.symlink("target.txt", os.path.join(tmp, "src", "link.txt"))
        with Workspace(tmp, resolver=name) as ws:
            r = side_by_side(
                lambda: ws.write_bytes("src/link.txt", data),
                lambda: ws.write_bytes("src/target.txt", data),
                number=WRITES * 10,
            )
    figures[f"{name}.write_through_link_vs_direct"] = r["ratio"]
    figures[f"{name}.write_through_link_us"] = r["candidate_s"] * 1e6
    print(
        f"{name:8s} write through a final link vs the target itself "
        f"({'tmpfs' if shm else 'tmp dir'}): {r['ratio']:.2f}x "
        f"({r['candidate_s'] * 1e6:.1f} us vs {r['baseline_s'] * 1e6:.1f} us)"
    )


def main() -> None:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.realpath(tmp)
        small = os.path.join(root, "src", "small.txt")
        os.makedirs(os.path.dirname(small))
        with open(small, "wb") as fh:
            fh.write(b"x" * 512)
        deep_rel = "/".join(f"d{i}" for i in range(DEPTH - 1)) + "/leaf"
        os.makedirs(os.path.join(root, os.path.dirname(deep_rel)))
        with open(os.path.join(root, deep_rel), "wb") as fh:
            fh.write(b"leaf")
        deep_abs = os.path.join(root, deep_rel)
        resolvers = ["openat2", "walk"] if openat2_available() else ["walk"]
        for name in resolvers:
            with Workspace(root, resolver=name) as ws:

                def plain() -> bytes:
                    with open(small, "rb") as fh:
                        return fh.read()

                def confined(ws: Workspace = ws) -> bytes:
                    return ws.read_bytes("src/small.txt")

                def naive() -> bytes:
                    return _naive_read(root, "src/small.txt")

                assert confined() == plain() == naive()
                r1 = side_by_side(confined, plain, number=NUMBER)
                r2 = side_by_side(confined, naive, number=NUMBER)

                def deep(ws: Workspace = ws) -> object:
                    return ws.stat(deep_rel)

                r3 = side_by_side(
                    deep,
                    lambda: os.path.realpath(deep_abs),
                    number=NUMBER // 3,
                )
                figures[f"{name}.read_vs_open"] = r1["ratio"]
                figures[f"{name}.read_us"] = r1["candidate_s"] * 1e6
                figures[f"{name}.open_us"] = r1["baseline_s"] * 1e6
                figures[f"{name}.read_vs_naive"] = r2["ratio"]
                figures[f"{name}.naive_us"] = r2["baseline_s"] * 1e6
                figures[f"{name}.resolve20_vs_realpath"] = r3["ratio"]
                figures[f"{name}.resolve20_us"] = r3["candidate_s"] * 1e6
                figures[f"{name}.realpath20_us"] = r3["baseline_s"] * 1e6
                print(
                    f"{name:8s} read vs open(): {r1['ratio']:.2f}x "
                    f"({r1['candidate_s'] * 1e6:.1f} us vs {r1['baseline_s'] * 1e6:.1f} us)  "
                    f"read vs naive realpath+open: {r2['ratio']:.2f}x "
                    f"({r2['baseline_s'] * 1e6:.1f} us)  "
                    f"20-deep resolve vs realpath: {r3['ratio']:.2f}x "
                    f"({r3['candidate_s'] * 1e6:.1f} us vs {r3['baseline_s'] * 1e6:.1f} us)"
                )
                _writes(name, ws, root, figures)
                _link_writes(name, figures)
    record("workspace", figures)


if __name__ == "__main__":
    main()
