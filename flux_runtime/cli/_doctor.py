"""``flux doctor`` — which sandbox layers this host supports, and what to do about each.

Exit codes: 0 when the ``default`` profile can run here (under ``--sandbox require``),
1 when it cannot; 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["EXIT_CODES", "register"]

EXIT_CODES = """exit codes (flux doctor):
  0      the default profile can run here (flux exec works confined)
  1      it cannot (each failed check says what to do)
  2      usage error"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "doctor",
        help="check which sandbox layers this host supports",
        description="Check bubblewrap, user namespaces, AppArmor, Landlock, seccomp and "
        "cgroups, and whether each built-in sandbox profile can run here.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from flux_system.sandbox import diagnose

    diagnosis = diagnose()
    if args.json:
        sys.stdout.write(json.dumps(diagnosis.as_dict(), indent=2) + "\n")
        return 0 if diagnosis.default_ok else 1
    lines = []
    for check in diagnosis.checks:
        mark = "ok  " if check.ok else "FAIL"
        lines.append(f"{mark} {check.name}: {check.found}")
        if not check.ok and check.advice:
            lines.append(f"     -> {check.advice}")
    lines.append("")
    for name, verdict in diagnosis.profiles.items():
        lines.append(f"profile {name}: {'can run here' if verdict == 'ok' else verdict}")
    lines.append("")
    lines.append(
        "flux exec is confined by default here."
        if diagnosis.default_ok
        else "flux exec cannot confine with the default profile here: fix the FAIL lines,"
        " or run with --sandbox on (what is missing is reported) or --sandbox off."
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0 if diagnosis.default_ok else 1
