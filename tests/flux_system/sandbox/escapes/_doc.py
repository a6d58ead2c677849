"""Render the table of docs/sandbox-escapes.md from the escape vectors.

``python3 -m tests.flux_system.sandbox.escapes._doc`` rewrites the table in place;
test_doc.py fails when the document and the vectors disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests._vectors import load_vectors

DOC = Path(__file__).resolve().parents[4] / "docs" / "sandbox-escapes.md"
BEGIN = "<!-- BEGIN escape table: generated from tests/vectors/flux_system/sandbox_escapes.json -->"
END = "<!-- END escape table -->"
_BACKENDS = (("bwrap", "bubblewrap + seccomp"), ("landlock", "Landlock-only + seccomp"))


def _cell(case: dict[str, Any], backend: str) -> str:
    findings: dict[str, str] = case.get("finding", {})
    if backend in findings:
        return f"**escapes** (open finding: {findings[backend]})"
    expect = str(case["expect"][backend])
    overrides = {
        k.partition("/")[2]: e for k, e in case["expect"].items() if k.startswith(backend + "/")
    }
    users = sorted(
        {*overrides, *(k.partition("/")[2] for k in findings if k.startswith(backend + "/"))}
    )
    text = _describe(case, expect)
    for user in users:
        finding = findings.get(f"{backend}/{user}")
        what = (
            f"**escapes** (open finding: {finding})"
            if finding
            else _describe(case, overrides[user])
        )
        text += f"; as {user}: {what}"
    return text


def _describe(case: dict[str, Any], expect: str) -> str:
    if expect == "blocked":
        return "stopped" if case["judge"] != "must-work" else "works (as it must)"
    if expect.startswith("fallback:"):
        return f"n/a: falls back to network {expect.removeprefix('fallback:')} (reported)"
    guarantee = expect.removeprefix("gap:")
    ops = case.get("gap_ops", {})
    which = f" ({', '.join(next(iter(ops.values())))})" if ops else ""
    return f"stopped, or not stopped{which} where the report declares `{guarantee}` not enforced"


def table() -> str:
    head = "| case | attack | " + " | ".join(title for _, title in _BACKENDS) + " |"
    rule = "|---|---|" + "---|" * len(_BACKENDS)
    rows = [head, rule]
    for case in load_vectors("flux_system", "sandbox_escapes"):
        attack = str(case["attack"]).replace("|", "\\|")
        cells = " | ".join(_cell(case, b) for b, _ in _BACKENDS)
        rows.append(f"| `{case['id']}` | {attack} | {cells} |")
    return "\n".join(rows)


def render(text: str) -> str:
    """*text* with the part between the markers replaced by the current table."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + table() + "\n" + text[end:]


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text(encoding="utf-8")), encoding="utf-8")
