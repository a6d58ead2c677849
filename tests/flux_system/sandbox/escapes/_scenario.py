"""Lay out one site per (backend, user) or per user's control, and run its plan.

A *site* is a directory under the lab's world-traversable base: the workspace (owned by
the user the sandbox runs as, with the probe copied into ``bin/``), a prefix sibling
``<ws>-evil`` and an ``outside`` directory (world-writable, canaries inside), a fake
``home`` with an ``.ssh`` key, a protected-paths workspace, a secret file the caller
holds an inheritable fd on, a canary in the host's ``/tmp`` and the site's victims.
Sandboxed sites and control sites have the same layout and distinct tokens, so no run
can see another's secret or disturb another's victims.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests._vectors import load_vectors

from . import _driver, _host, _stage
from ._probe import CaseOutput, parse_output

CASES = load_vectors("flux_system", "sandbox_escapes")
NOBODY = 65534
BOMB_N = 2048  # forks the bomb tries: twice the default profile's process limit
_DRIVER_TIMEOUT_S = 600  # hang guard for one site's whole plan
RUN_TIMEOUT_S = 90.0  # hang guard for one sandboxed run

# Canary directories outside the workspace (world-writable, canary files inside): one
# per write case, so the host can tell which attack changed what.
CANARY_DIRS = (
    "outside",
    "ws-evil",
    "linked",
    "procroot",
    "home",
    "roroot",
    "meta",
    "rometa",
    "via-spawn",
    "via-arun",
    "devshm",
)
_SNAPSHOTS = (*CANARY_DIRS, "wsp")

# The protected-paths workspace: existing files (the rest are created by the attack).
PROTECTED_TREE = {
    ".git/HEAD": "ref: refs/heads/main\n",
    ".git/config": "[core]\n\trepositoryformatversion = 0\n",
    ".git/hooks/pre-commit": "#!/bin/sh\necho original hook\n",
    ".git/objects/info/packs": "",
    ".git/refs/heads/.keep": "",
    ".git/modules/libs/foo/HEAD": "ref: refs/heads/main\n",
    ".git/modules/libs/foo/config": "[core]\n\tworktree = ../../../../libs/foo\n",
    ".git/modules/libs/foo/hooks/pre-commit": "#!/bin/sh\necho original submodule hook\n",
    ".git/worktrees/wt1/HEAD": "ref: refs/heads/topic\n",
    ".git/worktrees/wt1/commondir": "../..\n",
    ".vscode/settings.json": '{"original": true}\n',
    ".bashrc": "# original bashrc\n",
    ".profile": "# original profile\n",
    ".pre-commit-config.yaml": "repos: []\n",
    ".git/rebase-merge/git-rebase-todo": "pick 0123abc work in progress\n",
    "src/main.py": "print('hello')\n",
}


def settings_for(backend: str, network: str, **extra: Any) -> dict[str, Any]:
    """The SandboxSettings of a sandboxed run (one place to follow the core's API).

    bubblewrap runs the ``default`` profile in mode ``require``. The Landlock-only
    backend runs it in mode ``on`` with ``backend="landlock"`` (the profile requires
    bubblewrap, so ``require`` refuses by design); each run's report is then checked
    to name ``landlock`` as the backend with Landlock and seccomp active, so mode
    ``on`` cannot quietly degrade to less.
    """
    mode = "require" if backend == "bwrap" else "on"
    return {"mode": mode, "profile": "default", "network": network, "backend": backend, **extra}


def proxy_settings(backend: str, lab: Any, site: Site) -> dict[str, Any]:
    """Network proxy: the lab's upstream allowed, and the site's metadata alias (a name
    the lab's DNS server answers with 169.254.169.254)."""
    hosts = [*lab.allowed_hosts, site.metadata_name]
    return settings_for(backend, "proxy", allow_hosts=hosts, allow_private=lab.allowed_private)


@dataclass
class Site:
    """One laid-out site and, once run, what its runs returned."""

    root: Path
    uid: int | None
    token: str = field(default_factory=lambda: "fx" + secrets.token_hex(10))
    parent_token: str = field(default_factory=lambda: "fp" + secrets.token_hex(10))
    # Data sent over sockets: one token per run, so a listener names the run it heard.
    wires: dict[str, str] = field(default_factory=dict)
    wire_ok: str = field(default_factory=lambda: "fo" + secrets.token_hex(10))
    victims: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ipc: dict[str, int] = field(default_factory=dict)  # System V objects of the user
    before: dict[str, dict[str, _host.Entry]] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    tmp_dir: Path | None = None
    shm_dir: Path | None = None
    values: dict[str, str] = field(default_factory=dict)  # the lab's placeholders

    @property
    def ws(self) -> Path:
        """The workspace of the batch, daemon, fork-bomb and proxy runs."""
        return self.root / "ws"

    @property
    def wsp(self) -> Path:
        """The protected-paths workspace."""
        return self.root / "wsp"

    @property
    def probe(self) -> str:
        return str(self.ws / "bin" / "probe")

    @property
    def marker(self) -> str:
        """In the daemon's argv: how the host finds a survivor."""
        return "fxdaemon" + self.token

    @property
    def metadata_name(self) -> str:
        """Allowed for the proxy; the lab's DNS server answers it with 169.254.169.254."""
        return f"metadata-{self.token}.test"

    @property
    def plant(self) -> str:
        """The name the /tmp and /dev/shm cases try to create on the host."""
        return "flux-escape-plant-" + self.token

    def wire(self, run: str) -> str:
        return self.wires.setdefault(run, "fw" + secrets.token_hex(10))

    def path_of(self, key: str) -> Path:
        """The directory a snapshot key names."""
        if key == "wsp":
            return self.wsp
        if key == "devshm":
            assert self.shm_dir is not None
            return self.shm_dir
        return self.root / key

    def output(self, run: str) -> dict[str, CaseOutput]:
        res = self.results.get(run)
        assert res is not None, f"run {run!r} did not happen"
        assert "error" not in res, f"run {run!r} failed: {res['error']}\n{res.get('traceback')}"
        return parse_output(res["stdout"])


def _own(path: Path, uid: int | None) -> None:
    if uid is not None:
        for p in [path, *path.rglob("*")]:
            os.lchown(p, uid, uid)


def _canary_dir(path: Path, name: str, uid: int | None) -> None:
    """A world-writable directory of canaries owned by *uid* (the sandbox's caller):
    what that user could change there, the sandbox must not let it."""
    path.mkdir(mode=0o777)
    path.chmod(0o777)
    for f in ("canary", "victim", "victim2"):
        (path / f).write_text(f"CANARY:{name}/{f}\n")
        (path / f).chmod(0o666)
    _own(path, uid)


def lay_out(lab: Any, name: str, uid: int | None) -> Site:
    """Create the site *name* under the lab's base for a sandbox caller of *uid*."""
    base: Path = lab.base
    probe: Path = lab.probe
    site = Site(base / name, uid)
    site.root.mkdir(mode=0o755)
    for ws in (site.ws, site.wsp):
        (ws / "bin").mkdir(parents=True)
        shutil.copy2(probe, ws / "bin" / "probe")
        (ws / "mnt").mkdir()
    for rel, text in PROTECTED_TREE.items():
        (site.wsp / rel).parent.mkdir(parents=True, exist_ok=True)
        (site.wsp / rel).write_text(text)
    (site.wsp / ".git/hooks/pre-commit").chmod(0o755)
    _own(site.ws, uid)
    _own(site.wsp, uid)
    for key in CANARY_DIRS:
        if key != "devshm":
            _canary_dir(site.root / key, key, uid)
    (site.ws / "out-link").symlink_to(site.root / "linked")
    os.lchown(site.ws / "out-link", uid if uid is not None else 0, uid if uid is not None else 0)
    ssh_key = site.root / "home" / ".ssh" / "id_ed25519"
    ssh_key.parent.mkdir(mode=0o755)
    ssh_key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{site.token}\n")
    ssh_key.chmod(0o644)
    site.shm_dir = Path("/dev/shm", f"flux-escape-host-{site.token}")
    _canary_dir(site.shm_dir, "devshm", uid)
    (site.shm_dir / "secret").write_text(f"shm:{site.token}\n")
    (site.shm_dir / "secret").chmod(0o644)
    (site.root / "held-secret").write_text(f"held:{site.token}\n")
    (site.root / "held-secret").chmod(0o644)
    site.tmp_dir = Path("/tmp", f"flux-escape-host-{site.token}")
    site.tmp_dir.mkdir(mode=0o755)
    (site.tmp_dir / "canary").write_text(f"tmp:{site.token}\n")
    (site.tmp_dir / "canary").chmod(0o644)
    for v in ("victim", "sig1", "sig2", "sig3"):
        site.victims[v] = _host.start_victim(uid, site.token)
    site.ipc = _host.make_ipc(uid, site.token)
    site.before = {k: _host.snapshot(site.path_of(k)) for k in _SNAPSHOTS}
    lab.recorder.answers[site.metadata_name] = "169.254.169.254"
    return site


def fill(template: str, site: Site, lab: Any, run: str) -> str:
    values = {
        "outside": str(site.root / "outside"),
        "ws": str(site.ws),
        "evil": str(site.root / "ws-evil"),
        "roroot": str(site.root / "roroot"),
        "meta": str(site.root / "meta"),
        "rometa": str(site.root / "rometa"),
        "via_spawn": str(site.root / "via-spawn"),
        "via_arun": str(site.root / "via-arun"),
        "metadata_name": site.metadata_name,
        "procroot": f"/proc/{site.victims['victim'].pid}/root{site.root / 'procroot'}",
        "shm": str(site.shm_dir),
        "shm_name": site.shm_dir.name if site.shm_dir else "",
        "token": site.token,
        "parent_token": site.parent_token,
        "needle": site.token[::-1],
        "wire": site.wire(run),
        "wire_ok": site.wire_ok,
        "parent_needle": site.parent_token[::-1],
        "home_key": str(site.root / "home" / ".ssh" / "id_ed25519"),
        "victim": str(site.victims["victim"].pid),
        "sig1": str(site.victims["sig1"].pid),
        "sig2": str(site.victims["sig2"].pid),
        "sig3": str(site.victims["sig3"].pid),
        "tmp_canary": str(site.tmp_dir / "canary") if site.tmp_dir else "",
        **{k: str(v) for k, v in site.ipc.items()},
        "tmp_dir_name": site.tmp_dir.name if site.tmp_dir else "",
        "plant": site.plant,
        "marker": site.marker,
        "lock": str(site.ws / "daemon.lock"),
        "mnt": str(site.ws / "mnt"),
        "umount_target": str(site.ws),
        "bomb_n": str(BOMB_N),
        **lab.values,
    }
    return template.format(**values)


def specs(run: str, site: Site, lab: Any) -> list[str]:
    return [f"{c['id']}:{fill(c['probe'], site, lab, run)}" for c in CASES if c["run"] == run]


def plan_for(site: Site, lab: Any, backend: str | None) -> dict[str, Any]:
    """The driver plan of *site*: sandboxed under *backend*, or the control (``None``)."""
    mode = "control" if backend is None else "sandbox"

    def run(name: str, network: str = "none", **extra: Any) -> dict[str, Any]:
        r: dict[str, Any] = {"name": name, "mode": mode, "timeout": RUN_TIMEOUT_S}
        r["argv"] = [site.probe, *specs(name, site, lab)]
        if backend is not None:
            r["settings"] = (
                proxy_settings(backend, lab, site)
                if network == "proxy"
                else settings_for(backend, network)
            )
            if name == "batch":
                r["settings"]["read_only"] = [str(site.root / k) for k in ("roroot", "rometa")]
            if name == "protected":
                r["settings"]["audit"] = True
        r.update(extra)
        return r

    runs = [
        run("batch"),
        run("daemon", marker=site.marker, lock=str(site.ws / "daemon.lock")),
        run("forkbomb"),
        run("protected", workspace=str(site.wsp), audit=True),
        run("spawn", via="spawn"),
        run("arun", via="arun"),
    ]
    for r in runs:  # the protected run's probe is the copy in its own workspace
        if r["name"] == "protected":
            r["argv"][0] = str(site.wsp / "bin" / "probe")
    if backend is not None:
        runs.append(run("proxy", network="proxy"))
        runs.append(run("proxy-resolver", network="proxy"))
    return {
        "workspace": str(site.ws),
        # HOME is the site's fake home while the runs last: a sandbox that failed to
        # hide it exposes a decoy, never the real home of the user running the tests.
        "secret_env": {
            "FLUX_ESCAPE_PARENT_SECRET": site.parent_token,
            "HOME": str(site.root / "home"),
        },
        "inherit_file": str(site.root / "held-secret"),
        "runs": runs,
    }


def execute(site: Site, lab: Any, backend: str | None) -> None:
    """Run the site's plan as its user; then kill any survivor the control left."""
    plan = plan_for(site, lab, backend)
    # The proxy-resolver run resolves through the lab's DNS server: its driver runs in
    # a mount namespace of its own, with the lab's resolv.conf over /etc/resolv.conf.
    isolated = {**plan, "runs": [r for r in plan["runs"] if r["name"] == "proxy-resolver"]}
    plan["runs"] = [r for r in plan["runs"] if r["name"] != "proxy-resolver"]
    if site.uid is None:
        site.results = _driver.execute(plan)
    else:
        site.results = _stage.run_driver_as(site.uid, lab.stage(), plan, _DRIVER_TIMEOUT_S)
    if isolated["runs"]:
        site.results.update(
            _stage.run_driver_as(
                site.uid, lab.stage(), isolated, _DRIVER_TIMEOUT_S, resolv_conf=lab.resolv_conf
            )
        )
    site.results["_after"] = {
        **{k: _host.snapshot(site.path_of(k)) for k in _SNAPSHOTS},
        "survivors": _host.processes_with(site.marker),
        "victims_alive": _host.alive_after_grace(site.victims),
        "host_mount": os.path.ismount(site.ws / "mnt"),
        "tmp_plant": Path("/tmp", site.plant).exists(),
        "shm_plant": Path("/dev/shm", site.plant).exists(),
        "seen": {run: lab.recorder.seen(token) for run, token in site.wires.items()},
        "resolver_asked": bool(lab.recorder.seen(site.metadata_name.split(".")[0])),
    }
    for pid in site.results["_after"]["survivors"]:  # the control's daemon: ours to kill
        os.kill(pid, 9)


def tear_down(site: Site) -> None:
    _host.stop(list(site.victims.values()))
    if site.ipc:
        _host.remove_ipc(site.ipc)
    for pid in _host.processes_with(site.marker):
        os.kill(pid, 9)
    for d in (site.tmp_dir, site.shm_dir):
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)
    for base in ("/tmp", "/dev/shm"):
        plant = Path(base, site.plant)
        if plant.exists():
            plant.unlink()
