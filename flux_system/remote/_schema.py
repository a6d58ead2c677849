"""Generate the JSON Schemas of ``ports/schema/v1/`` from the wire models; check drift.

``python -m flux_system.remote._schema write ports/schema/v1`` writes them;
``... check ports/schema/v1`` exits 1 naming every file that differs (scripts/check and
the tests run it). The models in :mod:`._wire` and :mod:`._ops` are the source.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from flux_system.remote._ops import ARGS
from flux_system.remote._wire import MESSAGE_TYPES

__all__ = ["check", "render", "write"]


def render() -> dict[str, str]:
    """Relative file name → schema text, for every message and every op's args."""
    out: dict[str, str] = {}
    for name, message in sorted(MESSAGE_TYPES.items()):
        schema = message.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"flux-port/v1/messages/{name}.json"
        out[f"messages/{name}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    for op, model in sorted(ARGS.items()):
        schema = model.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"flux-port/v1/ops/{op}.args.json"
        out[f"ops/{op}.args.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write(directory: Path) -> None:
    for rel, text in render().items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def check(directory: Path) -> list[str]:
    """Names of files missing, stale or extra under *directory* (empty: no drift)."""
    expected = render()
    problems = []
    for rel, text in expected.items():
        path = directory / rel
        if not path.exists():
            problems.append(f"missing: {rel}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"stale: {rel}")
    for path in sorted(directory.rglob("*.json")):
        rel = path.relative_to(directory).as_posix()
        if rel not in expected:
            problems.append(f"extra: {rel}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("write", "check"):
        print("usage: python -m flux_system.remote._schema write|check DIR", file=sys.stderr)
        return 2
    directory = Path(argv[1])
    if argv[0] == "write":
        write(directory)
        return 0
    problems = check(directory)
    for p in problems:
        print(
            f"schema drift: {p} (regenerate: python -m flux_system.remote._schema "
            f"write {directory})",
            file=sys.stderr,
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
