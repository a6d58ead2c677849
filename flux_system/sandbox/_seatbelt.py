"""Seatbelt (macOS ``sandbox-exec``) profiles generated from the same settings.

Deny-default text from ``sandbox-profiles/seatbelt.sb`` plus generated rules that refer
to paths only through parameters — ``(subpath (param "RW_0"))`` with ``-D RW_0=/path``
on the command line — so no path is ever spliced into profile text (a path holding
``")`` cannot change the profile). Run by the absolute ``/usr/bin/sandbox-exec``.

Rules, in order (a later rule wins in SBPL, so protected paths come last):
- reads of the profile's read-only system paths (``/etc`` entries under
  ``/private/etc`` too), the read roots and extra read-only paths;
- reads and writes of the writable roots, extra writable paths and a temporary dir;
- network: ``none`` denies all (the default), ``proxy`` allows outbound to the local
  forwarder port only, ``host`` allows all;
- writes to each protected path beneath each writable root denied, and the
  unlink/rename of each of their parents (``mv .git .git-old`` would carry them off).

Guarantee: the same inputs give byte-identical output (golden-file tested).
Not guaranteed: anything on this host (Linux): it is generated and tested as text here,
not run; Seatbelt has no pid or network namespace and no seccomp equivalent.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Sequence
from dataclasses import dataclass

from flux_system.sandbox._profile import Profile, profile_dirs

__all__ = ["SANDBOX_EXEC", "SeatbeltCommand", "seatbelt_command"]

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
_TEMPLATE = "seatbelt.sb"


@typing.final
@dataclass(frozen=True, slots=True)
class SeatbeltCommand:
    """The profile text, its ``-D`` parameters and the full argv to exec."""

    profile: str
    params: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]


def _template() -> str:
    for d in profile_dirs():
        path = d / _TEMPLATE
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise FileNotFoundError(_TEMPLATE)


def seatbelt_command(
    profile: Profile,
    *,
    read_roots: Sequence[str],
    write_roots: Sequence[str],
    tmpdir: str,
    network: str,
    command: Sequence[str],
    protected: Sequence[str],
    extra_ro: Sequence[str] = (),
    extra_rw: Sequence[str] = (),
    proxy_port: int = 3128,
) -> SeatbeltCommand:
    """Generate the Seatbelt profile and the ``sandbox-exec`` argv for *command*."""
    params: list[tuple[str, str]] = []
    lines = [_template().rstrip("\n"), ";; generated"]

    def group(prefix: str, paths: Sequence[str], rule: str) -> None:
        names: list[str] = []
        for path in paths:
            key = f"{prefix}_{len(names)}"
            params.append((key, path))
            names.append(key)
        if names:
            refs = "\n".join(f'    (subpath (param "{k}"))' for k in names)
            lines.append(f"({rule}\n{refs})")

    ro = [*profile.read_only]
    for name in profile.etc:
        ro += [os.path.join("/etc", name), os.path.join("/private/etc", name)]
    ro += [*read_roots, *extra_ro]
    group("RO", ro, "allow file-read*")
    group("RW", [*write_roots, *extra_rw, tmpdir], "allow file-read* file-write*")
    if network == "host":
        lines.append("(allow network*)")
    elif network == "proxy":
        lines.append(f'(allow network-outbound (remote ip "localhost:{int(proxy_port)}"))')
    prot = [os.path.join(root, rel) for root in write_roots for rel in protected]
    group("PROT", prot, "deny file-write*")
    parents = sorted(
        {
            os.path.join(root, *rel.split("/")[:i])
            for root in write_roots
            for rel in protected
            for i in range(1, len(rel.split("/")))
        }
    )
    names: list[str] = []
    for path in parents:  # a parent renamed away would take its protected child along
        key = f"PAR_{len(names)}"
        params.append((key, path))
        names.append(key)
    if names:
        refs = "\n".join(f'    (literal (param "{k}"))' for k in names)
        lines.append(f"(deny file-write-unlink\n{refs})")
    text = "\n".join(lines) + "\n"
    argv = [SANDBOX_EXEC, "-p", text]
    for key, value in params:
        argv += ["-D", f"{key}={value}"]
    argv += ["--", *command]
    return SeatbeltCommand(text, tuple(params), tuple(argv))
