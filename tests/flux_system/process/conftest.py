"""Every process test leaves nothing behind: no process of any tree, no cgroup.

The check runs after the test's own fixtures are torn down (their Systems closed); a
cgroup still there is looked at again after a garbage collection (a System dropped
without ``close()`` releases its cgroups from its finalizer).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

import psutil
import pytest

from tests.flux_system.process._process_support import cgroup_dirs, descendants


@pytest.fixture(autouse=True)
def _nothing_left_behind() -> Iterator[None]:
    procs_before = descendants()
    cgroups_before = cgroup_dirs()
    yield
    left = descendants() - procs_before
    for pid in left:  # do not let one test's survivor fail the next ones too
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)  # an adopted orphan is ours to reap
    assert not left, f"processes of a tree were left behind: {sorted(left)}"
    stale = cgroup_dirs() - cgroups_before
    if stale:  # a collection only when needed: it is slow in a full suite's heap
        gc.collect()
        stale = cgroup_dirs() - cgroups_before
    assert not stale, f"cgroup directories were left behind: {sorted(stale)}"
