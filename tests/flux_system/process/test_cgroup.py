"""Per-tree pids cgroups: nothing left behind, nested cgroups contained, reuse only empty."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux_system import ProcessTimeoutError, System
from flux_system.process import _hierarchy
from flux_system.process._reap import cgroup_available
from tests._capabilities import require
from tests.flux_system.process._process_support import (
    PYTHON,
    REPO,
    cgroup_base,
    make_ws,
    procs,
    survivors,
)


def _base() -> str:
    """This process's ``flux-<pid>`` cgroup (which may or may not exist)."""
    base = cgroup_base()
    assert base is not None
    return base


def _prefix_and_line() -> tuple[str, str]:
    """How a child finds its own tree cgroup: the mount prefix, its /proc/self/cgroup line."""
    found = _hierarchy.detect()
    assert found is not None
    prefix = found.own if found.proc == "/" else found.own.removesuffix(found.proc)
    return prefix, (":pids:" if found.version == 1 else "^0::")


def _subdirs(path: str) -> list[str]:
    found: list[str] = []
    for here, dirs, _ in os.walk(path):
        found.extend(os.path.join(here, d) for d in dirs)
    return found


def _nested(base: str) -> list[str]:
    """Cgroups below a tree cgroup of *base* (tree cgroups themselves are flat)."""
    return [d for d in _subdirs(base) if os.path.dirname(d) != base]


@pytest.fixture
def contained() -> Iterator[None]:
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    gc.collect()  # Systems other tests dropped without close() release theirs
    yield


def test_close_leaves_no_cgroup(tmp_path: Path, contained: None) -> None:
    base = _base()
    with System(make_ws(tmp_path)) as s:
        s.run(["true"])
        s.run(["sh", "-c", "sleep 0.01 & sleep 0.01 & wait"])
        child = s.spawn(["sleep", "60"])
        assert os.path.isdir(base) and _subdirs(base)  # the check below can fail
        child.kill()
        child.join()
    assert not os.path.exists(base)


def test_nested_flux_killed_by_timeout_leaves_no_cgroup(tmp_path: Path, contained: None) -> None:
    # A child that is itself a flux process makes cgroups below its tree's; SIGKILLed
    # on timeout, it cannot remove them: the outer System must.
    code = (
        "import sys, time, pathlib\n"
        f"sys.path.insert(0, {REPO!r})\n"
        "from tests.flux_system.process._process_support import make_ws\n"
        "from flux_system import System\n"
        "s = System(make_ws(pathlib.Path('.')))\n"
        "c = s.spawn(['sh', '-c', 'setsid sleep 60 & echo $!; sleep 60'])\n"
        "out = b''\n"
        "while not out.endswith(b'\\n'): out += c.read_output().stdout; time.sleep(0.01)\n"
        "print(out.decode().strip(), flush=True)\n"
        "time.sleep(60)\n"
    )
    lines: list[bytes] = []
    got = threading.Event()

    def observe(stream: str, line: bytes) -> None:
        if stream == "stdout":
            lines.append(line)
            got.set()

    base = _base()
    with System(make_ws(tmp_path)) as s:
        with pytest.raises(ProcessTimeoutError):
            s.run([PYTHON, "-c", code], timeout=3.0, observer=observe)
        assert got.is_set(), "the nested System did not start its child"
        assert _nested(base) == []
    assert survivors(procs([int(lines[0])])) == []
    assert not os.path.exists(base)


def test_interpreter_exit_kills_children_before_removing_cgroups(
    tmp_path: Path, contained: None
) -> None:
    # The nested flux process exits with a child still running: its exit hook must
    # kill and reap that child first, then remove its cgroups (the other order leaves
    # them busy, hence behind, below this tree's cgroup).
    code = (
        "import sys, pathlib\n"
        f"sys.path.insert(0, {REPO!r})\n"
        "from tests.flux_system.process._process_support import make_ws\n"
        "from flux_system import System\n"
        "s = System(make_ws(pathlib.Path('.')))\n"
        "c = s.spawn(['sleep', '60'])\n"
        "print(c.pid, flush=True)\n"
    )
    base = _base()
    with System(make_ws(tmp_path)) as s:
        result = s.run([PYTHON, "-c", code], timeout=30)
        assert result.exit_code == 0, result.stderr_text
        assert survivors(procs([int(result.stdout)])) == []
        assert _nested(base) == []
    assert not os.path.exists(base)


def test_member_hiding_in_nested_cgroup_is_killed(tmp_path: Path, contained: None) -> None:
    # A root child moves a setsid'd grandchild into a cgroup below its own: the tree's
    # kill walks nested cgroups, so it dies with the tree and the cgroup goes too.
    prefix, line = _prefix_and_line()
    script = (
        f'cg={prefix}$(grep "{line}" /proc/self/cgroup | cut -d: -f3); '
        'mkdir "$cg/hide"; '
        'setsid sh -c \'echo $$ > "$1/hide/cgroup.procs"; exec sleep 60\' sh "$cg" '
        ">/dev/null 2>&1 & echo $!; "
        'while [ -z "$(cat "$cg/hide/cgroup.procs")" ]; do sleep 0.01; done'
    )
    base = _base()
    with System(make_ws(tmp_path)) as s:
        result = s.run(["sh", "-c", script], timeout=30)
        assert result.exit_code == 0, result.stderr_text
        watched = procs([int(result.stdout)])
        assert survivors(watched) == []
        assert _nested(base) == []
    assert not os.path.exists(base)


def test_reused_cgroup_never_holds_a_previous_tree(tmp_path: Path, contained: None) -> None:
    # Runs one after another reuse pooled cgroups; a tree that left a process behind
    # (killed on exit) or a zombie must not share its cgroup with the next tree.
    with System(make_ws(tmp_path)) as s:
        prefix, line = _prefix_and_line()
        for _ in range(20):
            result = s.run(["sh", "-c", f'sleep 60 & grep "{line}" /proc/self/cgroup'])
            path = prefix + result.stdout.decode().strip().split(":", 2)[2]
            assert os.path.isdir(path)
            events = os.path.join(path, "cgroup.events")
            if os.path.exists(events):  # v2
                with open(events, encoding="ascii") as fh:
                    assert "populated 0" in fh.read()
            else:  # v1: only our own resident thread (decision 0028) is charged there
                with open(os.path.join(path, "tasks"), encoding="ascii") as fh:
                    tasks = fh.read().split()
                assert all(os.path.exists(f"/proc/self/task/{tid}") for tid in tasks)
                with open(os.path.join(path, "pids.current"), encoding="ascii") as fh:
                    assert int(fh.read()) == len(tasks) <= 1


def test_kill_racing_the_exit_is_safe(tmp_path: Path) -> None:
    # kill() from another thread while the child exits and is reaped: every status is
    # either the natural exit or SIGKILL, and a kill after the reap does nothing.
    with System(make_ws(tmp_path)) as s:
        end = time.monotonic() + 1.0
        codes: set[int] = set()
        while time.monotonic() < end:
            child = s.spawn(["true"])
            killer = threading.Thread(target=child.kill)
            killer.start()
            child.join()
            killer.join()
            child.kill()
            code = child.status().exit_code
            assert code is not None
            codes.add(code)
        assert codes <= {0, -9}


def test_spawns_move_no_thread(
    tmp_path: Path, contained: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Decision 0028: on v1 the pooled cgroup's resident thread forks, so the spawning
    # thread never migrates (a migration after a pause waits for an RCU grace period);
    # on v2 the child moves itself. Every thread move is made to fail: runs still start
    # inside their tree's cgroup, one after another, reusing it.
    from flux_system.process import _lease

    def no_move(self: object, tid: bytes) -> None:
        raise AssertionError("a thread was moved for a spawn")

    with System(make_ws(tmp_path)) as s:
        s.run(["true"])  # the pooled cgroup (and on v1 its resident) exist from here on
        monkeypatch.setattr(_lease.Lease, "enter", no_move)
        prefix, line = _prefix_and_line()
        seen = set()
        for _ in range(5):
            result = s.run(["sh", "-c", f'grep "{line}" /proc/self/cgroup'])
            assert result.exit_code == 0, result.stderr
            assert result.tree_contained
            path = prefix + result.stdout.decode().strip().split(":", 2)[2]
            assert os.path.dirname(path) == _base()  # the tree's own cgroup
            seen.add(path)
        assert len(seen) == 1  # the one pooled cgroup, reused


# -- the warm-up (decision 0029) --------------------------------------------------------

_WARM = (
    "import os, sys, pathlib\n"
    f"sys.path.insert(0, {REPO!r})\n"
    "from tests.flux_system.process._process_support import make_ws\n"
    "from flux_system import System\n"
    "from flux_system.process import _cgroup, _warm\n"
    "System.warm_up(); System.warm_up()\n"
    "warm = _warm._warm\n"
    "assert warm is not None and warm.done.wait(5)\n"
    "assert _warm._warm is warm  # idempotent: one warm-up\n"
)


def _nested_flux(s: System, code: str) -> str:
    """What a nested Python running *code* printed (it must exit 0)."""
    result = s.run([PYTHON, "-c", code], timeout=60)
    assert result.exit_code == 0, result.stderr_text
    return result.stdout_text


def test_warm_up_cgroup_is_the_first_trees_and_none_is_left(
    tmp_path: Path, contained: None
) -> None:
    prefix, tag = _prefix_and_line()
    tag = tag.removeprefix("^")
    code = _WARM + (
        "made = warm.lease.path\n"
        "with System(make_ws(pathlib.Path('.'))) as s:\n"
        "    first = s.run(['cat', '/proc/self/cgroup']).stdout_text\n"
        "    second = s.run(['cat', '/proc/self/cgroup']).stdout_text\n"
        "print(made)\n"
        "print([l for l in first.splitlines() if '" + tag + "' in l][0].split(':')[-1])\n"
        "print([l for l in second.splitlines() if '" + tag + "' in l][0].split(':')[-1])\n"
        "print(os.path.exists(made), warm.lease is None)\n"
    )
    base = _base()
    with System(make_ws(tmp_path)) as s:
        made, first, second, after = _nested_flux(s, code).splitlines()
        assert made == prefix + first  # the first tree ran in the cgroup made ahead
        assert second == first  # given back to the pool and reused
        assert after == "False True"  # removed with the System; handed over, not kept
        assert _nested(base) == []
    assert not os.path.exists(base)


@pytest.mark.parametrize("wait", [True, False])
def test_warm_up_never_taken_is_removed_at_exit(
    tmp_path: Path, contained: None, wait: bool
) -> None:
    code = _WARM if wait else _WARM.split("warm = ", maxsplit=1)[0]  # False: exit at once
    code += "print(os.getpid())\n"
    base = _base()
    with System(make_ws(tmp_path)) as s:
        pid = int(_nested_flux(s, code))
        mine = [d for d in _subdirs(base) if os.path.basename(d) == f"flux-{pid}"]
        assert mine == [] and _nested(base) == []
    assert not os.path.exists(base)


def test_warm_up_is_not_inherited_by_a_forked_child(tmp_path: Path, contained: None) -> None:
    code = _WARM + (
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if _warm.take_warm() is None and _warm._warm is None else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "taken = _warm.take_warm()\n"
        "print(os.waitstatus_to_exitcode(status), taken is not None)\n"
        "_cgroup.discard(*taken)\n"
    )
    base = _base()
    with System(make_ws(tmp_path)) as s:
        assert _nested_flux(s, code).split() == ["0", "True"]  # the parent still has it
        assert _nested(base) == []  # what the parent took, it removed
