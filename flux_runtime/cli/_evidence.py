"""``flux evidence verify|show``: check and print an evidence log offline.

Exit codes: 0 the log verifies (``verify``) or was printed (``show``); 1 the log does not
verify — the first bad seq and the reason are printed; 2 usage error or the file cannot
be read. The file is opened by :mod:`flux_evidence` (read-only), never modified.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from flux_evidence import (
    EvidenceError,
    EvidenceLog,
    Head,
    InvalidEvidenceError,
    verify,
)

__all__ = ["register"]

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2

EXIT_CODES = """exit codes (flux evidence):
  0    the log verifies (verify) or was printed (show)
  1    the log does not verify: the first bad seq and the reason are printed
  2    usage error, or the file cannot be read (reason printed)
  141  stdout's reader went away (| head)"""


def register(subparsers: Any) -> None:
    """Add ``evidence`` with its ``verify`` and ``show`` subcommands."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = subparsers.add_parser(
        "evidence", help="verify or show an evidence log", epilog=EXIT_CODES, formatter_class=raw
    )
    sub = parser.add_subparsers(dest="evidence_command", metavar="ACTION")
    parser.set_defaults(func=_usage(parser))

    p_verify = sub.add_parser(
        "verify",
        help="verify the hash chain of an evidence log",
        epilog=EXIT_CODES,
        formatter_class=raw,
    )
    p_verify.add_argument("file", help="the evidence log (JSONL)")
    p_verify.add_argument(
        "--expect-head",
        metavar="SIZE:HASH",
        help="a head printed by an earlier verify: catches truncation and rewrites",
    )
    p_verify.set_defaults(func=_verify)

    p_show = sub.add_parser(
        "show", help="print the records of an evidence log", epilog=EXIT_CODES, formatter_class=raw
    )
    p_show.add_argument("file", help="the evidence log (JSONL)")
    p_show.add_argument("--kind", help="only records of this kind")
    p_show.add_argument("--session", help="only records of this session")
    p_show.set_defaults(func=_show)


def _usage(parser: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return run


def _failed(exc: EvidenceError) -> int:
    """Print why the log could not be verified or read; return the exit code."""
    if isinstance(exc, InvalidEvidenceError):
        where = "-" if exc.seq is None else str(exc.seq)
        print(f"invalid: seq {where}: {exc.reason.value}", file=sys.stderr)
        return EXIT_INVALID
    print(f"error: {exc} ({exc.reason.value})", file=sys.stderr)
    return EXIT_USAGE


def _verify(args: argparse.Namespace) -> int:
    try:
        head = Head.parse(args.expect_head) if args.expect_head is not None else None
        result = verify(args.file, expect_head=head)
    except EvidenceError as exc:
        return _failed(exc)
    print(f"valid: {result.head.size} records, head {result.head}")
    if result.torn_bytes:
        print(
            f"note: {result.torn_bytes} bytes of a torn last line were not checked",
            file=sys.stderr,
        )
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    try:
        with EvidenceLog.open(args.file, readonly=True) as log:
            records = log.query(kind=args.kind, session=args.session)
    except EvidenceError as exc:
        return _failed(exc)
    for record in records:
        text = json.dumps(record.to_json(), sort_keys=True, ensure_ascii=False)
        print(_TERMINAL_UNSAFE.sub(_escape, text))
    return EXIT_OK


# Characters a terminal may act on or that hide or reorder text (C1 controls such as
# U+009B CSI, bidi overrides and isolates, zero-width and line/paragraph separators):
# logged values are attacker-influenced, so `show` prints them as JSON \u escapes. C0
# controls are escaped by json.dumps already.
_TERMINAL_UNSAFE = re.compile(
    "[\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]"
)


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"
