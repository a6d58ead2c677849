"""What the envelope's redaction claims for a registered secret that a handler's output
transforms (docs/decisions/0108-redaction-claims-encodings-not-transformations.md).

Claimed: the raw value and the encodings flux_secret lists (base64 at any offset,
contiguous hex, JSON and ``repr`` escapes, percent-encoding, entities). Not claimed:
transformations (reversed, split, case-changed, base32, line-wrapped base64, a spaced
hex dump, compressed). The second test pins that limit as documented, so the docs
change if the redactor ever claims more.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux_runtime import Call, Context
from tests.flux_runtime._runtime import PERMISSIVE, rig

SECRET = "tok-9f8e7d6c5b4a-secretvalue"

CLAIMED = {
    "raw": 'printf %s "$K"',
    "base64": 'printf %s "$K" | base64',
    "base64-offset": 'printf "xy%s" "$K" | base64',
    "hex": 'printf %s "$K" | xxd -p',
    "json": 'printf \'{"k": "%s"}\' "$K"',
    "percent": 'printf %s "$K" | sed "s/-/%2D/g"',
}
NOT_CLAIMED = {
    "reversed": 'printf %s "$K" | rev',
    "split": 'printf %s "$K" | cut -c1-10; printf %s "$K" | cut -c11-',
    "upper": 'printf %s "$K" | tr a-z A-Z',
    "base32": 'printf %s "$K" | base32',
    "wrapped-base64": 'printf %s "$K" | base64 -w 20',
}


def _run(tmp_path: Path, cmd: str) -> tuple[str, str]:
    with rig(tmp_path, policy=PERMISSIVE, environ={"K": SECRET}) as r:
        inp = {"argv": ["/bin/sh", "-c", cmd], "env": {"K": "secret:env/K"}}
        out = r.executor.dispatch(Call("proc.run", inp), Context("s", "agent"))
        assert out.ok, out
        return out.view + str(out.content), r.log_path.read_text()


@pytest.mark.parametrize("cmd", CLAIMED.values(), ids=CLAIMED.keys())
def test_claimed_encodings_are_redacted(tmp_path: Path, cmd: str) -> None:
    seen, log = _run(tmp_path, cmd)
    assert "[redacted]" in seen  # positive control: the output held the secret
    for form in (SECRET, "dG9rLTlmOGU3ZDZj", SECRET.encode().hex()):
        assert form not in seen and form not in log


@pytest.mark.parametrize("cmd", NOT_CLAIMED.values(), ids=NOT_CLAIMED.keys())
def test_transformations_are_not_claimed(tmp_path: Path, cmd: str) -> None:
    seen, _ = _run(tmp_path, cmd)
    assert "[redacted]" not in seen  # the documented limit (0108) is real
