"""Coverage-guided fuzzing of Workspace path resolution (atheris).

Run: ``python fuzz/fuzz_workspace_paths.py [corpus_dir] -max_total_time=60``.

One fixed hostile tree is built once: a root holding files, directories and symlinks of
every kind (relative inside, relative escaping, absolute, dangling, chained, looping,
magic links), beside an ``outside`` directory holding a canary. Every input is decoded
to a path and run through read and write operations on both resolvers (``openat2`` and
the per-component walk). Properties (any other outcome is a crash):

- an operation either succeeds or raises a ``FluxSystemError`` (``InvalidPathError`` is
  also a ``ValueError``); never an ``OSError`` or another exception for ``str`` input;
- no read ever returns the canary, and no write ever changes what is outside the root;
- both resolvers agree: the same outcome class and, on success, the same bytes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

CANARY = b"CANARY-outside-the-root-4f1c"
SEEDS = (
    "a.txt",
    "dir/b.txt",
    "../outside/canary",
    "dir/../a.txt",
    "esc/canary",
    "abs",
    "chain1",
    "loop1/x",
    "dangling",
    "proc/self/root/etc/hostname",
    "fdlink",
    "@named/a.txt",
    "dir/./sub/../b.txt",
    "dir//b.txt/",
    "inside_rel",
)


def build_tree(base: Path) -> tuple[Path, Path]:
    """Create the hostile tree under *base*; return (root, outside)."""
    root, outside = base / "root", base / "outside"
    (root / "dir" / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "canary").write_bytes(CANARY)
    (root / "a.txt").write_bytes(b"inside a\n")
    (root / "dir" / "b.txt").write_bytes(b"inside b\n")
    links = {
        "esc": "../outside",
        "abs": str(outside / "canary"),
        "abs_inside": str(root / "a.txt"),
        "chain1": "chain2",
        "chain2": "dir/../esc/canary",
        "loop1": "loop2",
        "loop2": "loop1",
        "dangling": "nowhere/at/all",
        "inside_rel": "dir/b.txt",
        "proc": "/proc",
        "fdlink": "/proc/self/fd/0",
        "dir/sub/up": "../../..",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    return root, outside


def _outside_state(outside: Path) -> tuple[tuple[str, ...], bytes]:
    return tuple(sorted(os.listdir(outside))), (outside / "canary").read_bytes()


class Harness:
    """The tree and both workspaces, built once and reused for every input."""

    def __init__(self) -> None:
        from flux_system import Workspace

        self._tmp = tempfile.TemporaryDirectory(prefix="flux-fuzz-paths-")
        base = Path(self._tmp.name)
        self.root, self.outside = build_tree(base)
        self.before = _outside_state(self.outside)
        named = {"named": self.root / "dir"}
        self.workspaces = {
            kind: Workspace(self.root, named_roots=named, resolver=kind)
            for kind in ("openat2", "walk")
        }

    def close(self) -> None:
        for ws in self.workspaces.values():
            ws.close()
        self._tmp.cleanup()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def outcome(self, kind: str, op: str, path: str) -> tuple[str, Any]:
        from flux_system import FluxSystemError

        ws = self.workspaces[kind]
        try:
            if op == "read":
                value: Any = ws.read_bytes(path, limit=1 << 16)
            elif op == "stat":
                value = ws.stat(path).kind
            elif op == "list":
                value = sorted(ws.list_dir(path))
            else:
                raise AssertionError(op)
        except FluxSystemError as exc:
            return ("error", type(exc).__name__)
        return ("ok", value)

    def check_path(self, path: str) -> None:
        for op in ("read", "stat", "list"):
            results = {kind: self.outcome(kind, op, path) for kind in self.workspaces}
            first, second = results["openat2"], results["walk"]
            assert first[0] == second[0], f"{op} {path!r}: resolvers disagree {results}"
            if first[0] == "ok":
                assert first == second, f"{op} {path!r}: different results {results}"
                if op == "read":
                    assert CANARY not in first[1], f"canary read through {path!r}"
        self._check_write(path)

    def _check_write(self, path: str) -> None:
        from flux_system import FluxSystemError

        name = f"fuzz-{len(path)}-{abs(hash(path)) % 1000}"
        for kind, ws in self.workspaces.items():
            target = f"{path}/{name}" if path else name
            try:
                ws.write_bytes(target, b"fuzz write\n", create_parents=False)
            except FluxSystemError:
                pass
            else:
                ws.remove(target)
            assert _outside_state(self.outside) == self.before, (
                f"{kind}: writing {target!r} changed the outside"
            )


_HARNESS: Harness | None = None


def harness() -> Harness:
    global _HARNESS  # noqa: PLW0603 - one tree per process, built lazily
    if _HARNESS is None:
        _HARNESS = Harness()
    return _HARNESS


def check_input(h: Harness, data: bytes) -> None:
    """Decode *data* (lossily) and check it as a path, alone and under a seed."""
    text = data.decode("utf-8", "replace")
    h.check_path(text)
    seed = SEEDS[len(data) % len(SEEDS)]
    h.check_path(f"{seed}/{text}" if text else seed)


def test_one_input(data: bytes) -> None:
    """atheris entry point."""
    check_input(harness(), data)


def main() -> None:
    import atheris

    with atheris.instrument_imports(include=["flux_system"]):
        import flux_system  # noqa: F401

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
