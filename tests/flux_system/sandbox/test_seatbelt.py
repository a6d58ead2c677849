"""Seatbelt profile generation: golden files (macOS is not here: text, not a run).

Regenerate after a deliberate change with ``FLUX_REGEN_GOLDEN=1 python3 -m pytest
tests/flux_system/sandbox/test_seatbelt.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from flux_system.sandbox import BUILTIN_PROFILES, load_profile
from flux_system.sandbox._protected import BUILTIN_PROTECTED
from flux_system.sandbox._seatbelt import SANDBOX_EXEC, seatbelt_command

GOLDEN = Path(__file__).resolve().parents[2] / "vectors" / "sandbox" / "seatbelt"
REGEN = os.environ.get("FLUX_REGEN_GOLDEN") == "1"


def _generate(name: str) -> tuple[str, list[str]]:
    profile = load_profile(name)
    cmd = seatbelt_command(
        profile,
        read_roots=["/Users/dev/reference"],
        write_roots=["/Users/dev/project"],
        tmpdir="/private/tmp/flux-sandbox-x",
        network=profile.network,
        command=["/usr/bin/make", "test"],
        protected=(*BUILTIN_PROTECTED, *profile.protected),
    )
    return cmd.profile, list(cmd.argv[3:])


@pytest.mark.parametrize("name", BUILTIN_PROFILES)
def test_golden(name: str) -> None:
    text, args = _generate(name)
    sb, js = GOLDEN / f"{name}.sb", GOLDEN / f"{name}.args.json"
    if REGEN:
        sb.write_text(text)
        js.write_text(json.dumps(args, indent=1) + "\n")
    assert text == sb.read_text()
    assert args == json.loads(js.read_text())


def test_deny_default_and_absolute_sandbox_exec() -> None:
    text, _ = _generate("default")
    assert "(deny default)" in text
    assert SANDBOX_EXEC == "/usr/bin/sandbox-exec"
    assert "(allow network" not in text  # network none


def test_paths_are_parameters_never_profile_text() -> None:
    profile = load_profile("default")
    evil = '/Users/dev/x")) (allow file-write* (subpath "/'
    cmd = seatbelt_command(
        profile,
        read_roots=[],
        write_roots=[evil],
        tmpdir="/private/tmp/t",
        network="none",
        command=["/bin/true"],
        protected=(".git/hooks",),
    )
    assert evil not in cmd.profile
    assert "/Users" not in cmd.profile
    assert ("RW_0", evil) in cmd.params
    assert cmd.argv[0] == SANDBOX_EXEC and cmd.argv[1] == "-p"
    assert cmd.argv[-2:] == ("--", "/bin/true")


def test_proxy_allows_only_the_forwarder_port() -> None:
    text, _ = _generate("net-proxy")
    assert '(allow network-outbound (remote ip "localhost:3128"))' in text
    assert "(allow network*)" not in text
