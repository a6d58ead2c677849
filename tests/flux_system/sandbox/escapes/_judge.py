"""Judge one case: did the attack fail sandboxed, and did it work in the control?

Each function returns the list of what went wrong (empty: the case holds), so a
failing test prints every broken step at once, with the probe's own words.
"""

from __future__ import annotations

from typing import Any

from tests._capabilities import require

from ._probe import CaseOutput

# The protected-paths case: which path each step of the attack touches.
PROTECTED_OP_PATHS = {
    "hook-overwrite": ".git/hooks/pre-commit",
    "hook-create": ".git/hooks/post-checkout",
    "git-config-append": ".git/config",
    "vscode-overwrite": ".vscode/settings.json",
    "vscode-create": ".vscode/tasks.json",
    "bashrc-append": ".bashrc",
    "profile-append": ".profile",
    "zshrc-create": ".zshrc",
    "envrc-create": ".envrc",
    "mcp-create": ".mcp.json",
    "claude-create": ".claude",
    "idea-create": ".idea",
    "git-rename-parent": ".git",
    "vscode-rename-parent": ".vscode",
    "commondir-create": ".git/commondir",
    "config-worktree-create": ".git/config.worktree",
    "submodule-hook-overwrite": ".git/modules/libs/foo/hooks/pre-commit",
    "submodule-hook-create": ".git/modules/libs/foo/hooks/post-checkout",
    "submodule-config-append": ".git/modules/libs/foo/config",
    "worktree-commondir-overwrite": ".git/worktrees/wt1/commondir",
    "worktree-config-create": ".git/worktrees/wt1/config.worktree",
    "new-submodule-hook": ".git/modules/evil/hooks",
    "cshrc-create": ".cshrc",
    "tcshrc-create": ".tcshrc",
    "kshrc-create": ".kshrc",
    "inputrc-create": ".inputrc",
    "devcontainer-create": ".devcontainer",
    "devcontainer-json-create": ".devcontainer.json",
    "precommit-overwrite": ".pre-commit-config.yaml",
    "rebase-todo-append": ".git/rebase-merge/git-rebase-todo",
    "rebase-apply-create": ".git/rebase-apply",
    "worktree-rebase-create": ".git/worktrees/wt1/rebase-merge",
}
FUNCTIONAL_OPS = ("objects-writable", "index-writable")
# What those steps may leave in the workspace (git's own data stays writable).
# And what the audit leaves of a git directory the attack made (new-submodule-hook): the
# directory itself, its protected names (hooks, config, ...) removed.
FUNCTIONAL_PATHS = (".git/objects/fx", ".git/index", ".git/modules/evil")
# The names the attack aims at, each with everything beneath it (DESIGN 2.5's list).
PROTECTED_PREFIXES = (
    ".git/hooks",
    ".git/config",
    ".bashrc",
    ".profile",
    ".zshrc",
    ".vscode",
    ".idea",
    ".envrc",
    ".mcp.json",
    ".claude",
    ".git/commondir",
    ".git/config.worktree",
    ".git/modules/libs/foo/hooks",
    ".git/modules/libs/foo/config",
    ".git/modules/evil/hooks",
    ".git/worktrees/wt1/commondir",
    ".git/worktrees/wt1/config.worktree",
    ".cshrc",
    ".tcshrc",
    ".kshrc",
    ".inputrc",
    ".devcontainer",
    ".devcontainer.json",
    ".pre-commit-config.yaml",
    ".git/rebase-merge",
    ".git/rebase-apply",
    ".git/worktrees/wt1/rebase-merge",
)
_EMPTY_CAPS = "0000000000000000"


def _attack_ops(case: dict[str, Any]) -> list[str] | None:
    """The steps that count as the attack: the listed ones (judge ``ops``) or all."""
    return case.get("ops") if case["judge"] == "ops" else None


def sandboxed(
    case: dict[str, Any], out: CaseOutput | None, control: CaseOutput | None
) -> list[str]:
    """What the sandboxed run let through (*control*: the same case unsandboxed)."""
    if out is None:
        return ["the probe printed nothing for this case (did the payload run at all?)"]
    if "died" in out.info:
        return [f"the case process died (signal/status {out.info['died']}): {out.ops}"]
    judge = case["judge"]
    if judge in ("any-op", "ops"):
        worked = out.worked(_attack_ops(case))
        return [f"step {k!r} worked: {v}" for k, v in worked.items()]
    if judge == "families":
        assert control is not None
        possible = set(control.worked())
        return [f"socket {k} was created" for k in out.worked() if k in possible]
    if judge == "status":
        bad = []
        if out.info.get("NoNewPrivs") != "1":
            bad.append(f"NoNewPrivs is {out.info.get('NoNewPrivs')!r}, not '1'")
        for key in ("CapEff", "CapPrm", "CapAmb"):
            if out.info.get(key) != _EMPTY_CAPS:
                bad.append(f"{key} is {out.info.get(key)!r}, not empty")
        return bad
    if judge == "tiocsti":
        bad = [f"TIOCSTI {k} injected: {v}" for k, v in out.worked().items()]
        # The filter must see the ioctl whatever its high bits: on a non-tty fd an
        # admitted TIOCSTI reaches the tty layer and fails ENOTTY; a refused one not.
        bad += [
            f"TIOCSTI {k} reached the kernel's tty layer ({v}): the seccomp filter let it by"
            for k, v in out.ops.items()
            if k.startswith("fd") and v.startswith("ENOTTY")
        ]
        return bad
    if judge == "fd-leak":
        fds = out.info.get("fds", [])
        bad = [f"fd {fd} ({target}) reached the child" for fd, target in fds]
        bad += [f"{k} holds the caller's secret" for k in out.worked() if k != "count"]
        return bad
    if judge == "forkbomb":
        made, wanted = out.info.get("made"), out.info.get("wanted")
        return [] if made is not None and made < wanted else [f"forked {made} of {wanted}"]
    if judge in ("survivors", "protected", "must-work", "host-only"):
        return []  # judged on the host side (see host_checks) or below
    raise AssertionError(f"unknown judge {judge!r}")


def must_work(out: CaseOutput | None) -> list[str]:
    if out is None:
        return ["the probe printed nothing for this case"]
    return [f"step {k!r} failed: {v}" for k, v in out.ops.items() if k not in out.worked()]


def control_shows(case: dict[str, Any], user: str, out: CaseOutput | None, site: Any) -> list[str]:
    """Why the unsandboxed run does not show the attack working (empty: it does)."""
    want = case["control"][user]
    if want in ("n/a", "none"):
        return []
    if out is None:
        return ["the probe printed nothing for this case in the control"]
    needs = case.get("control_requires")
    if needs is not None:
        require(needs["op"] in out.worked(), f"{needs['what']} ({out.ops.get(needs['op'])})")
    if want == "tiocsti":
        tty_layer = [k for k, v in out.ops.items() if k.startswith("fd") and v.startswith("ENOTTY")]
        return [] if out.worked() or len(tty_layer) == 6 else [f"control: {out.ops}"]
    if isinstance(want, list):
        names = [n.format(**site.values) for n in want]
        missing = [n for n in names if n not in out.worked()]
        return [f"control step {n!r} did not work: {out.ops.get(n)}" for n in missing]
    if want == "any":
        return [] if out.worked() else [f"no step worked in the control: {out.ops}"]
    if want == "all":
        return [
            f"control step {k!r} did not work: {v}"
            for k, v in out.ops.items()
            if k not in out.worked()
        ]
    if want == "families":
        n = len(out.worked())
        return [] if n >= 3 else [f"only {n} exotic families exist here: nothing to show"]
    if want == "status":
        return [] if out.info.get("NoNewPrivs") == "0" else [f"control status {out.info}"]
    if want == "fd-leak":
        return [] if [k for k in out.worked() if k != "count"] else [f"no leak: {out.info}"]
    if want == "survivors":
        return (
            [] if site.results["_after"]["survivors"] else ["the control's daemon did not survive"]
        )
    if want == "protected":
        # Each attack step lands unsandboxed (a protected path is reachable and
        # writable by this user), and the workspace shows it.
        bad = [
            f"control step {op!r} did not work: {out.ops.get(op)}"
            for op in PROTECTED_OP_PATHS
            if op not in out.worked()
        ]
        changed = host_diff(site, "wsp")
        if len(changed) < 10:
            bad.append(f"the control changed too little: {changed}")
        return bad
    raise AssertionError(f"unknown control {want!r}")


def control_host(case: dict[str, Any], site: Any) -> list[str]:
    """In the control, every host-side check of the case must see the attack land."""
    bad: list[str] = []
    after = site.results["_after"]
    for check in case["host"]:
        name, _, arg = check.partition(":")
        if name == "unchanged":
            if not host_diff(site, arg):
                bad.append(f"the control changed nothing in {arg}")
        elif name == "recorder-silent":
            heard = after["seen"].get(case["run"], {})
            bad += [
                f"listener {n} heard nothing in the control"
                for n in arg.split(",")
                if n not in heard
            ]
        elif name == "victims-alive":
            if all(after["victims_alive"][k] for k in ("sig1", "sig2", "sig3")):
                bad.append("the control killed no victim")
        elif name == "host-tmp-unchanged" and not after["tmp_plant"]:
            bad.append("the control planted nothing in the host's /tmp")
        elif name == "host-shm-unchanged" and not after["shm_plant"]:
            bad.append("the control planted nothing in the host's /dev/shm")
    return bad


def host_diff(site: Any, key: str) -> dict[str, str]:
    from ._host import diff

    return diff(site.before[key], site.results["_after"][key])


def _protected_name(rel: str) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in PROTECTED_PREFIXES)


def protected_changes(site: Any) -> dict[str, str]:
    """Changes under the protected names of the protected-paths workspace.

    Content, type, mode and owner count; the modification time does not (a restore
    writes a fresh copy). A name created anywhere else in that workspace counts too
    (``.vscode-old``, ``.git-old``: a protected directory renamed away must come back,
    not be left beside its replacement), except what git's own writable data gained.
    """
    from ._host import diff

    def strip(snap: dict[str, Any]) -> dict[str, Any]:
        return {k: (*v[:5], 0, v[6]) for k, v in snap.items() if _protected_name(k)}

    before, after = site.before["wsp"], site.results["_after"]["wsp"]
    changed = diff(strip(before), strip(after))
    changed.update(
        (rel, "created (left behind)")
        for rel in after.keys() - before.keys()
        if not _protected_name(rel)
        and not any(rel == p or rel.startswith(p + "/") for p in FUNCTIONAL_PATHS)
    )
    return changed


def host_checks(case: dict[str, Any], site: Any, run: dict[str, Any]) -> list[str]:
    """The host's view: nothing outside changed, no listener heard the token, ..."""
    bad: list[str] = []
    after = site.results["_after"]
    for check in case["host"]:
        name, _, arg = check.partition(":")
        if name == "unchanged":
            bad += [f"{arg}/{p} {what}" for p, what in host_diff(site, arg).items()]
        elif name == "recorder-silent":
            heard = after["seen"].get(case["run"], {})
            bad += [
                f"host listener {n} received the token"
                for n in sorted(heard)
                if n in arg.split(",")
            ]
        elif name == "upstream-silent":
            heard = after["seen"].get(case["run"], {})
            bad += [f"upstream {n} received the token" for n in heard if n.startswith("http")]
        elif name == "proxy-resolved":
            # The refusal must be the guard's verdict on the answer, not a dead lookup.
            if not after["resolver_asked"]:
                bad.append("the proxy never asked the lab's DNS server (nothing was tested)")
            denials = (run.get("denials") or {}).get("records", [])
            if not any(r.get("layer") == "proxy" and site.metadata_name in str(r) for r in denials):
                bad.append(f"no proxy denial record names {site.metadata_name}: {denials}")
        elif name == "victims-alive":
            bad += [
                f"victim {k} was killed" for k, alive in after["victims_alive"].items() if not alive
            ]
        elif name == "host-tmp-unchanged":
            if after["tmp_plant"]:
                bad.append("a file was planted in the host's /tmp")
        elif name == "no-host-mount":
            if after["host_mount"]:
                bad.append("a filesystem was mounted on the host at the workspace's mnt/")
        elif name == "host-shm-unchanged":
            if after["shm_plant"]:
                bad.append("a file was planted in the host's /dev/shm")
        elif name == "no-survivors":
            surv = run.get("survivors") or {}
            if surv.get("pids"):
                bad.append(f"daemon pids {surv['pids']} outlived the run")
            if surv.get("lock_free") is False:
                bad.append("the daemon's lock was still held after the run returned")
            if after["survivors"]:
                bad.append(f"daemon pids {after['survivors']} outlived the driver")
        elif name == "protected-restored":
            changed = protected_changes(site)
            bad += [f"protected workspace: {p} {w} after the run" for p, w in changed.items()]
        else:
            raise AssertionError(f"unknown host check {check!r}")
    return bad


def _audited_paths(run: dict[str, Any]) -> set[str] | None:
    """Workspace-relative paths the run's audit reported: records of an audit object,
    or the result's denial records of layer ``protected_paths`` (``what`` = root/path)."""
    audit = run.get("audit")
    if isinstance(audit, dict):
        return {str(r.get("path")) for r in audit.get("records", []) if isinstance(r, dict)}
    denials = run.get("denials")
    if not isinstance(denials, dict):
        return None
    root = str(run.get("workspace", "")).rstrip("/") + "/"
    records = [r for r in denials.get("records", []) if r.get("layer") == "protected_paths"]
    return {str(r["what"]).removeprefix(root) for r in records}


def audit_lists(run: dict[str, Any], paths: list[str]) -> list[str]:
    """Each of *paths* the attack touched must appear in the run's audit record, itself
    or through a parent the audit reports as replaced (``.vscode`` for its files)."""
    named = _audited_paths(run)
    if named is None:
        return ["the run result carries no audit record (post-run audit of protected paths)"]

    def covered(path: str) -> bool:
        parts = path.split("/")
        return any("/".join(parts[:i]) in named for i in range(1, len(parts) + 1))

    return [f"the audit does not report {p}" for p in paths if not covered(p)]


def expectation(case: dict[str, Any], backend: str, user: str) -> str:
    """The case's expected outcome for *backend* (a ``backend/user`` entry wins)."""
    expect: dict[str, str] = case["expect"]
    return expect.get(f"{backend}/{user}", expect[backend])


def declared_gap(report: Any, guarantee: str) -> dict[str, Any] | None:
    """The report's entry for *guarantee* when it is declared not enforced, else None.

    Raises AssertionError when the report does not list the guarantee at all (a gap
    can only be accepted if it is declared by name).
    """
    assert isinstance(report, dict), f"no report() to check the gap {guarantee!r} against"
    for g in report.get("guarantees", []):
        if g.get("name") == guarantee:
            return g if g.get("enforced") is False else None
    raise AssertionError(f"report() does not list {guarantee!r}: {report.get('guarantees')}")


def gap_accepts(
    case: dict[str, Any],
    backend: str,
    gap: dict[str, Any],
    problems: list[str],
    out: CaseOutput | None,
) -> list[str]:
    """What a declared *gap* does not excuse: the steps outside ``gap_ops``, and, when
    the attack did get through, a reason that does not say what is exposed."""
    if not problems:
        return []
    left: list[str] = []
    gap_ops = case.get("gap_ops", {}).get(backend)
    if gap_ops is not None:
        worked = out.worked() if out else {}
        left = [f"step {k!r} worked: {v}" for k, v in worked.items() if k not in gap_ops]
    mentions = case.get("gap_mentions")
    if mentions and mentions.lower() not in str(gap.get("reason", "")).lower():
        left.append(
            f"report() declares {gap['name']!r} not enforced, and the attack got through, "
            f"but the reason does not name what is exposed ({mentions!r}): {gap.get('reason')!r}"
        )
    return left


EXPECTED_LAYERS = {"bwrap": {"bubblewrap", "seccomp"}, "landlock": {"landlock", "seccomp"}}


def is_what_was_asked(run: dict[str, Any], backend: str) -> list[str]:
    """A sandboxed run must have run, under *backend*, with its layers active."""
    if "error" in run:
        return [f"the sandboxed run failed: {run['error']}"]
    bad = []
    if run.get("backend") != backend:
        bad.append(f"the sandbox runs backend {run.get('backend')!r}, not {backend!r}")
    layers = {layer["name"] for layer in run.get("report", {}).get("layers", []) if layer["active"]}
    missing = EXPECTED_LAYERS[backend] - layers
    if missing:
        bad.append(f"layers {sorted(missing)} are not active (active: {sorted(layers)})")
    return bad
