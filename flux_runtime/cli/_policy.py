"""``flux policy check|eval``: validate a policy, or decide one request against it.

``flux policy check FILE...`` loads (and combines) the files and prints a summary.
``flux policy eval FILE... --subject S --action A --resource R [--trust T]
[--scope X]... [--context KEY=VALUE]... [--now TIMESTAMP] [--json] [--explain]``
prints the decision.

Exit codes: 0 allow (or ``check`` passed), 1 deny, 3 approval required, 2 usage or
load error. ``--context`` values are parsed as JSON when they parse (``n=3`` is the
integer 3, ``ok=true`` a boolean), else taken as strings. Without ``--now`` the current
UTC time is used. The files are read by :mod:`flux_policy`, not here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from flux_policy import (
    Decision,
    Effect,
    IndexedEvaluator,
    Policy,
    PolicyLoadError,
    Request,
    load_policies,
)

__all__ = ["register"]

EXIT_ALLOW = 0
EXIT_DENY = 1
EXIT_USAGE = 2
EXIT_APPROVAL = 3
EXIT_CODES = """exit codes (flux policy):
  0    allow (eval) or the files are valid (check)
  1    deny (eval)
  3    approval required (eval)
  2    usage error, or a file cannot be read or is not a valid policy
  141  stdout's reader went away (| head)"""
_EXIT = {Effect.ALLOW: EXIT_ALLOW, Effect.DENY: EXIT_DENY, Effect.APPROVAL_REQUIRED: EXIT_APPROVAL}


class _UsageError(Exception):
    pass


def register(subparsers: Any) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = subparsers.add_parser(
        "policy",
        help="check a policy or evaluate a request",
        epilog=EXIT_CODES,
        formatter_class=raw,
    )
    sub = parser.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", required=True)

    check = sub.add_parser(
        "check",
        help="validate policy files and print a summary",
        epilog=EXIT_CODES,
        formatter_class=raw,
    )
    check.add_argument(
        "files", nargs="+", metavar="FILE", help="policy files (TOML), checked as one policy"
    )
    check.add_argument("--json", action="store_true", help="print the summary as JSON")
    check.set_defaults(func=_check)

    ev = sub.add_parser(
        "eval",
        help="decide one request (exit 0 allow, 1 deny, 3 approval)",
        epilog=EXIT_CODES,
        formatter_class=raw,
    )
    ev.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="policy files (TOML); several are combined into one policy",
    )
    ev.add_argument(
        "--subject", required=True, help="who asks: a principal such as user:alice (not a group)"
    )
    ev.add_argument("--action", required=True, help="what is asked, such as fs.read")
    ev.add_argument(
        "--resource",
        required=True,
        help="the name acted on, such as ws/app/src/main.py (normalised first; a name "
        "whose '..' climbs above its start is denied)",
    )
    ev.add_argument(
        "--trust",
        default=None,
        help="the request's trust level, one of the policy's trust_levels; without it a "
        "rule with min_trust/max_trust cannot be evaluated: such a deny applies, such a "
        "grant does not",
    )
    ev.add_argument(
        "--scope",
        action="append",
        default=[],
        dest="scopes",
        help="a scope the request holds (repeatable); a rule applies only if the request "
        "holds all of its scopes",
    )
    ev.add_argument(
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a context attribute for 'when' conditions (repeatable); VALUE is JSON when "
        "it parses (n=3 is an integer, ok=true a boolean), else a string",
    )
    ev.add_argument(
        "--now",
        default=None,
        metavar="TIMESTAMP",
        help="the time for not_before/not_after: ISO 8601 with a UTC offset "
        "(default: the current time)",
    )
    ev.add_argument("--json", action="store_true", help="print the decision as one JSON object")
    ev.add_argument("--explain", action="store_true", help="say why each rule did or did not apply")
    ev.set_defaults(func=_eval)


def _load(files: list[str]) -> Policy:
    return load_policies(files)


def _report_load_error(exc: PolicyLoadError) -> int:
    print(f"flux policy: {exc} [reason={exc.reason.value}]", file=sys.stderr)
    return EXIT_USAGE


def _check(args: argparse.Namespace) -> int:
    try:
        policy = _load(args.files)
    except PolicyLoadError as exc:
        return _report_load_error(exc)
    summary = {
        "ok": True,
        "policy_digest": policy.digest,
        "trust_levels": list(policy.trust_levels),
        "groups": len(policy.groups),
        "grants": len(policy.grants),
        "denies": len(policy.denies),
        "approval_grants": sum(1 for r in policy.grants if r.requires_approval),
    }
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print(
            f"ok: {summary['grants']} grants ({summary['approval_grants']} need approval), "
            f"{summary['denies']} denies, {summary['groups']} groups; "
            f"trust {' < '.join(policy.trust_levels)}; digest {policy.digest}"
        )
    return EXIT_ALLOW


def _parse_value(text: str) -> object:
    def no_constants(name: str) -> object:
        raise ValueError(name)

    try:
        return json.loads(text, parse_constant=no_constants)
    except ValueError:
        return text


def _context(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _UsageError(f"--context takes KEY=VALUE, not {item!r}")
        out[key] = _parse_value(value)
    return out


def _now(text: str | None) -> dt.datetime:
    if text is None:
        return dt.datetime.now(dt.UTC)
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise _UsageError(f"--now is not an ISO 8601 timestamp: {text!r}") from exc
    if value.tzinfo is None or value.utcoffset() is None:
        raise _UsageError("--now needs a UTC offset (e.g. 2026-01-01T00:00:00Z)")
    return value


def _print_decision(decision: Decision, *, as_json: bool, explain: bool) -> None:
    if as_json:
        print(json.dumps(decision.to_json(), sort_keys=True))
        return
    rules = ", ".join(decision.determining_rules) or "-"
    print(f"{decision.effect.value} (rules: {rules})")
    for reason in decision.reasons:
        print(f"  {reason}")
    for err in decision.errors:
        print(f"  error: {err.rule_id or 'request'}: {err.field}: {err.reason.value}")
    if explain:
        for t in decision.trace:
            mark = "applied" if t.applied else "skipped"
            print(f"  {t.kind} {t.rule_id}: {mark}: {t.why}")
    print(f"  policy {decision.policy_digest}")


def _eval(args: argparse.Namespace) -> int:
    try:
        context = _context(args.context)
        now = _now(args.now)
    except _UsageError as exc:
        print(f"flux policy: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        policy = _load(args.files)
    except PolicyLoadError as exc:
        return _report_load_error(exc)
    request = Request(
        subject=args.subject,
        action=args.action,
        resource=args.resource,
        trust=args.trust,
        scopes=frozenset(args.scopes),
        context=context,
        now=now,
    )
    decision = IndexedEvaluator(policy).evaluate(request, explain=args.explain)
    _print_decision(decision, as_json=args.json, explain=args.explain)
    return _EXIT[decision.effect]
