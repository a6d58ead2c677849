"""Finding the cgroup hierarchy from mountinfo: v1 pids first, then v2, then none."""

from __future__ import annotations

import os

import pytest

from flux_system.process._hierarchy import _visible, detect, find

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CG = "8:pids:/user.slice\n4:memory:/\n0::/user.slice/s.scope\n"
V2_ONLY = "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V2_CG = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope\n"
# A container's view: the mount shows only the container's part of the hierarchy.
V2_NESTED = "29 23 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
ESCAPED = "29 23 0:26 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n"
DEV_36 = os.makedev(0, 36)
DEV_38 = os.makedev(0, 38)
DEV_26 = os.makedev(0, 26)


def _all_visible(point: str, dev: int) -> bool:
    return True


CASES = [
    # (mountinfo, /proc/self/cgroup, expected (version, own, proc) or None, why)
    (HYBRID, HYBRID_CG, (1, "/sys/fs/cgroup/pids/user.slice", "/user.slice"), "hybrid: v1 pids"),
    (
        V2_ONLY,
        V2_CG,
        (2, "/sys/fs/cgroup" + V2_CG[3:].strip(), V2_CG[3:].strip()),
        "v2-only host",
    ),
    # The kernel keeps listing v1 lines in /proc/self/cgroup on a v2-only host.
    (
        V2_ONLY,
        "8:pids:/\n" + V2_CG,
        (2, "/sys/fs/cgroup" + V2_CG[3:].strip(), V2_CG[3:].strip()),
        "v1 lines unmounted",
    ),
    (V2_NESTED, "0::/docker/abc/sub\n", (2, "/sys/fs/cgroup/sub", "/docker/abc/sub"), "mount root"),
    (V2_NESTED, "0::/elsewhere\n", None, "our cgroup outside the mount's root"),
    (ESCAPED, "0::/\n", (2, "/mnt/my cgroups", "/"), "octal-escaped mount point"),
    ("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n", HYBRID_CG, None, "no cgroup mounted"),
    ("garbage line\n\n", HYBRID_CG, None, "unparsable mountinfo"),
]


@pytest.mark.parametrize(
    ("mountinfo", "cgroup", "expected", "why"), CASES, ids=[c[3] for c in CASES]
)
def test_find(mountinfo: str, cgroup: str, expected: tuple[int, str, str] | None, why: str) -> None:
    found = find(mountinfo, cgroup, visible=_all_visible)
    got = None if found is None else (found.version, found.own, found.proc)
    assert got == expected, why


def test_hidden_mounts_are_not_used() -> None:
    # A tmpfs over /sys/fs/cgroup hides the v1 mounts below it: mountinfo still lists
    # them, but their mount points no longer show them. Hybrid with pids hidden: v2.
    def visible(point: str, dev: int) -> bool:
        return dev != DEV_36

    found = find(HYBRID, HYBRID_CG, visible=visible)
    assert found is not None and (found.version, found.dev) == (2, DEV_38)
    assert find(HYBRID, HYBRID_CG, visible=lambda point, dev: False) is None


def test_detect_agrees_with_this_hosts_files() -> None:
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        mountinfo = fh.read()
    with open("/proc/self/cgroup", encoding="utf-8") as fh:
        cgroup = fh.read()
    assert detect() == find(mountinfo, cgroup, visible=_visible)
    found = detect()
    if found is not None:
        assert os.stat(found.own).st_dev == found.dev
