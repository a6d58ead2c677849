"""``flux exec``'s sandbox options and their resolution (kept apart from ``_exec``).

``--sandbox off|on|require`` (default ``require``), ``--backend auto|bwrap|landlock``,
``--profile NAME|FILE`` (default ``default``), ``--net none|proxy|host``,
``--allow-host PATTERN``, ``--allow-private CIDR``, ``--ro PATH``, ``--rw PATH``,
``--allow-home-workspace``. A missing layer under ``require`` is one line naming it
that points to ``flux doctor``; ``flux exec`` then exits 125.

Imports nothing heavy: the built-in profiles load without pydantic; the proxy (and so
``flux_system.net``) is imported only for ``--net proxy``.
"""

from __future__ import annotations

import argparse
import os

from flux_system import FluxSystemError
from flux_system.sandbox import Denials, Sandbox, SandboxReport, SandboxSettings

__all__ = [
    "SandboxRefused",
    "add_sandbox_options",
    "report_fields",
    "resolve_sandbox",
    "sandbox_section",
]


class SandboxRefused(Exception):
    """The sandbox cannot be set up as asked: one line for the user (exit 125)."""


def add_sandbox_options(parser: argparse.ArgumentParser) -> None:
    """Add the sandbox options to *parser* (``flux exec``)."""
    g = parser.add_argument_group("sandbox")
    g.add_argument(
        "--sandbox",
        choices=("off", "on", "require"),
        default="require",
        help="off: no sandbox; on: every layer this host has; require (default): refuse"
        " when a layer the profile requires is missing",
    )
    g.add_argument("--backend", choices=("auto", "bwrap", "landlock"), default="auto")
    g.add_argument("--profile", default="default", metavar="NAME|FILE")
    g.add_argument("--net", choices=("none", "proxy", "host"), default=None)
    g.add_argument("--allow-host", action="append", default=[], metavar="PATTERN")
    g.add_argument("--allow-private", action="append", default=[], metavar="CIDR")
    g.add_argument("--ro", action="append", default=[], metavar="PATH")
    g.add_argument("--rw", action="append", default=[], metavar="PATH")
    g.add_argument(
        "--allow-home-workspace",
        action="store_true",
        help="the workspace may be, or contain, $HOME or / (refused otherwise)",
    )


def resolve_sandbox(args: argparse.Namespace, *, audit: bool = True) -> Sandbox:
    """The sandbox ``flux exec`` runs in (the protected-path audit on by default).

    Raises:
        SandboxRefused: bad option values, a bad profile, or a missing required layer.
    """
    try:
        settings = SandboxSettings(
            mode=args.sandbox,
            profile=args.profile,
            backend=args.backend,
            network=args.net,
            allow_hosts=tuple(args.allow_host),
            allow_private=tuple(args.allow_private),
            read_only=tuple(os.path.abspath(p) for p in args.ro),
            read_write=tuple(os.path.abspath(p) for p in args.rw),
            allow_home_workspace=bool(args.allow_home_workspace),
            audit=audit and args.sandbox != "off",
        )
    except (TypeError, ValueError) as exc:
        raise SandboxRefused(str(exc)) from None
    try:
        return Sandbox.resolve(settings)
    except FluxSystemError as exc:
        raise SandboxRefused(exc.message) from None


def report_fields(report: SandboxReport) -> dict[str, object]:
    """The sandbox part of ``--report``: the active layers, what is missing, guarantees."""
    data = report.as_dict()
    return {
        "mode": data["mode"],
        "profile": data["profile"],
        "backend": data["backend"],
        "network": data["network"],
        "active_layers": data["active_layers"],
        "missing": data["missing"],
        "guarantees": data["guarantees"],
    }


def sandbox_section(sandbox: Sandbox, denials: Denials | None) -> dict[str, object]:
    """``--report``'s ``sandbox`` object: the layers and guarantees, and the denials.

    Records name a layer, a syscall / host:port / workspace path and an errno: never an
    argument, a URL path or query, or an environment value.
    """
    out = report_fields(sandbox.report())
    if denials is None:
        out["denials"] = None
    else:
        out["denials"] = {
            "observable": denials.observable,
            "reason": denials.reason,
            "records": [
                {"layer": d.layer, "what": d.what, "errno": d.errno, "detail": d.detail}
                for d in denials.records
            ],
        }
    return out
