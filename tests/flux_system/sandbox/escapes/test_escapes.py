"""The escape suite (issue 15): every case under every backend, as root and as 65534.

Each case asserts that the attack failed in the sandbox and nothing changed on the
host (``test_attack_fails``), and that the very same payload, run unsandboxed by the
same user, does show the attack working (``test_control_shows_attack``): so no case
can pass because nothing happened. Cases come from
tests/vectors/flux_system/sandbox_escapes.json; the payloads are probe.c.
"""

from __future__ import annotations

from typing import Any

import pytest

from . import _judge
from ._scenario import CASES
from .conftest import BACKENDS, USERS, Lab

CONTROLLED = [c for c in CASES if any(v not in ("n/a",) for v in c["control"].values())]


def _id(case: dict[str, Any]) -> str:
    return str(case["id"])


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("case", CONTROLLED, ids=_id)
def test_control_shows_attack(lab: Lab, case: dict[str, Any], user: str) -> None:
    site = lab.site(None, user)
    out = site.output(case["run"]).get(case["id"])
    problems = _judge.control_shows(case, user, out, site) + _judge.control_host(case, site)
    assert not problems, f"positive control of {case['id']} as {user}: {problems}\n{out}"


def _finding(case: dict[str, Any], backend: str, user: str) -> str | None:
    """An open finding recorded in the vectors for this backend (or backend/user)."""
    findings: dict[str, str] = case.get("finding", {})
    return findings.get(f"{backend}/{user}") or findings.get(backend)


def _attack_params() -> list[Any]:
    params = []
    for case in CASES:
        for backend in BACKENDS:
            for user in USERS:
                finding = _finding(case, backend, user)
                marks = (
                    [pytest.mark.xfail(strict=True, reason=f"escape: {finding}")] if finding else []
                )
                params.append(
                    pytest.param(
                        case, backend, user, id=f"{case['id']}-{backend}-{user}", marks=marks
                    )
                )
    return params


@pytest.mark.parametrize(("case", "backend", "user"), _attack_params())
def test_attack_fails(lab: Lab, case: dict[str, Any], backend: str, user: str) -> None:
    site = lab.site(backend, user)
    run = site.results[case["run"]]
    out = site.output(case["run"]).get(case["id"])
    expect = _judge.expectation(case, backend, user)
    control = (
        lab.site(None, user).output(case["run"]).get(case["id"])
        if case["judge"] == "families"
        else None
    )
    if case["judge"] == "must-work":
        problems = _judge.must_work(out)
    else:
        problems = _judge.sandboxed(case, out, control) + _judge.host_checks(case, site, run)
    if case["run"] == "proxy" and case["judge"] != "must-work" and expect == "blocked":
        problems += _proxy_was_there(site, backend)
    if case["judge"] == "protected":
        assert out is not None
        problems += _protected(case, backend, out, run)
    if expect.startswith("fallback:"):
        # This backend cannot give the run's network mode: the report must say which.
        network = (run.get("report") or {}).get("network")
        assert network == expect.removeprefix("fallback:"), f"{case['id']}: network {network!r}"
        return
    if expect.startswith("gap:"):
        # A gap this backend may have. Declared in the report: it excuses the steps it
        # covers, if the report says what is exposed. Not declared: the case must hold.
        gap = _judge.declared_gap(run.get("report"), expect.removeprefix("gap:"))
        if gap is not None:
            problems = _judge.gap_accepts(case, backend, gap, problems, out)
    else:
        assert expect == "blocked", expect
    assert not problems, f"ESCAPE {case['id']} under {backend} as {user}: {problems}\n{out}"


@pytest.mark.parametrize(
    "run", ["batch", "daemon", "forkbomb", "protected", "spawn", "arun", "proxy", "proxy-resolver"]
)
@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sandbox_is_what_was_asked(lab: Lab, backend: str, user: str, run: str) -> None:
    """Each sandboxed run ran, under the backend asked for, with its layers active."""
    problems = _judge.is_what_was_asked(lab.site(backend, user).results[run], backend)
    assert not problems, f"{run} under {backend} as {user}: {problems}"


def _proxy_was_there(site: Any, backend: str) -> list[str]:
    """A proxy case only means something if the proxy was reachable in that run."""
    positive = next(c for c in CASES if c["id"] == "proxy-positive")
    if positive["expect"][backend] != "blocked":
        return []  # this backend has no proxy: the case holds with no network at all
    out = site.output("proxy").get("proxy-positive")
    problems = _judge.must_work(out)
    return (
        [f"the proxy run's positive control failed, nothing was tested: {problems}"]
        if problems
        else []
    )


def _protected(case: dict[str, Any], backend: str, out: Any, run: dict[str, Any]) -> list[str]:
    problems = [
        f"{op} must stay possible (git works inside): {out.ops.get(op)}"
        for op in _judge.FUNCTIONAL_OPS
        if op not in out.worked()
    ]
    worked = out.worked()
    problems += [
        f"{op} worked on a path that exists (bound read-only): {worked[op]}"
        for op in case["bound_readonly"][backend]
        if op in worked
    ]
    touched = [_judge.PROTECTED_OP_PATHS[op] for op in worked if op in _judge.PROTECTED_OP_PATHS]
    if touched:
        problems += _judge.audit_lists(run, touched)
    return problems


# Syscalls the batch run's payload certainly makes and seccomp must refuse.
DENIED_SYSCALLS = ("io_uring_setup", "ptrace", "unshare", "bpf", "keyctl", "perf_event_open")


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_denials_are_evidence(lab: Lab, backend: str, user: str) -> None:
    """The run result says what was denied where the host can see it, and why not where not."""
    run = lab.site(backend, user).results["batch"]
    assert "error" not in run, run.get("error")
    denials = run.get("denials")
    assert denials is not None, "a sandboxed run result carries no denials"
    if backend == "bwrap":  # bwrap 0.8 installs --seccomp without a listener
        assert denials["observable"] is False
        assert denials["reason"]
        assert denials["records"] == []
        return
    assert denials["observable"] is True, denials
    seen = {r["what"] for r in denials["records"] if r["layer"] == "seccomp"}
    missing = [s for s in DENIED_SYSCALLS if not any(s in w for w in seen)]
    assert not missing, f"denied syscalls not in the run's denials: {missing}; got {sorted(seen)}"
