"""The tree kill, freeze and membership tests in a simulated v2-only and no-cgroup host.

This host is cgroup v1 (hybrid). A private mount namespace (``unshare -m``) gives the
same kernel a different view: ``/sys/fs/cgroup`` replaced by cgroup2 alone (the
layout of Debian 12, Ubuntu >= 21.10, Fedora), or hidden under a tmpfs (no usable
cgroup; the v1 mounts stay listed in mountinfo, hidden). The process tests are re-run
there by a nested pytest, with ``hosts_cases.py`` added. Its skips are checked here:
only the v2 process-limit case may skip on v2 (every controller is bound to v1 on this
host, so cgroup2 offers no ``pids``), and on the no-cgroup host only the cases that
need containment; everything else must pass.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from flux_system import System, Workspace
from tests._capabilities import require
from tests.flux_system.process._process_support import PIDS_LIMIT, PYTHON, REPO

_HERE = "tests/flux_system/process/"
FILES = [
    _HERE + f for f in ("test_survivors.py", "test_tree.py", "test_cgroup.py", "test_review.py")
]
FILES.append(_HERE + "test_review2.py")
FILES.append(_HERE + "hosts_cases.py")
_MOUNTS = {
    "v2": "umount -R /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup",
    "none": "mount -t tmpfs tmpfs /sys/fs/cgroup",
}
CONTAINED = "a usable cgroup (v1 pids or v2) for tree containment"
ALLOWED_SKIPS = {
    "v2": ("host lacks: " + PIDS_LIMIT, "no-cgroup host only"),
    "none": ("host lacks: " + PIDS_LIMIT, "host lacks: " + CONTAINED, "v2 only"),
}
MIN_PASSED = {"v2": 60, "none": 35}


def _can_unshare(system: System) -> bool:
    probe = system.run(["unshare", "-m", "sh", "-c", _MOUNTS["none"]], timeout=30)
    return probe.exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["v2", "none"])
def test_process_tests_in_a_simulated_host(mode: str, tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    with Workspace(REPO) as ws, System(ws) as system:
        require(_can_unshare(system), "mount namespaces (unshare -m) to simulate hosts")
        argv = ["unshare", "-m", "sh", "-c", _MOUNTS[mode] + ' && exec "$@"', "sh"]
        argv += [PYTHON, "-m", "pytest", "-q", "-x", f"--junitxml={report}", *FILES]
        env = {"FLUX_TEST_CGROUP_HOST": mode, "FLUX_TEST_REQUIRE_ALL": "0"}
        result = system.run(argv, env=env, timeout=900)
    cases = list(ET.parse(report).getroot().iter("testcase")) if report.exists() else []
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    failed += [c.get("name") for c in cases if c.find("error") is not None]
    assert result.exit_code == 0 and not failed, (failed, result.stdout_text[-6000:])
    passed = 0
    for case in cases:
        name = case.get("name")
        skipped = case.find("skipped")
        if skipped is None:
            passed += 1
            continue
        message = skipped.get("message", "")
        assert message.startswith(ALLOWED_SKIPS[mode]), (name, message)
    assert passed >= MIN_PASSED[mode]
