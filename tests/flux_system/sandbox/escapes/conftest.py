"""The lab: one probe build, one set of host listeners, sites run once and cached."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._capabilities import require

from . import _host, _scenario, _stage
from ._probe import build_probe

BACKENDS = ("bwrap", "landlock")
USERS = ("root", "nobody")
_UPSTREAM_TRIES = 20  # random loopback addresses tried for a fixed port


def _bind_random_loopback(r: _host.Recorder, name: str, port: int, *, udp: bool = False) -> str:
    """Listen on *port* of a random 127.x.y.z (never 127.0.0.1: the proxy cases deny it)."""
    for _ in range(_UPSTREAM_TRIES):
        host = "127." + ".".join(str(secrets.randbelow(254) + 1) for _ in range(3))
        try:
            if udp:
                r.udp(name, host, port, dns=True)
            else:
                r.tcp(name, host, port)
        except OSError:
            continue
        return host
    raise AssertionError(f"no free port {port} on a loopback address for {name}")


class Lab:
    """Session-wide host side of the suite; sites are laid out and run on first use."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.probe = build_probe(base)
        self.recorder = _host.Recorder()
        self.values: dict[str, str] = {}
        self._sites: dict[str, _scenario.Site] = {}
        self._stage: Path | None = None
        self._listen()
        self.recorder.start()
        self.allowed_hosts = [self.upstream]
        self.allowed_private = [f"{self.upstream}/32"]

    def _listen(self) -> None:
        r = self.recorder
        v = self.values
        v["lo_port"] = str(r.tcp("tcp-lo4", "127.0.0.1"))
        v["lo6_port"] = str(r.tcp("tcp-lo6", "::1"))
        v["udp_port"] = str(r.udp("udp-lo4", "127.0.0.1"))
        # The proxy's allowed upstream: an IP literal on loopback, on a default port (the
        # proxy admits 80 and 443 only), apart from 127.0.0.1 (a denied case).
        v["upstream"] = self.upstream = _bind_random_loopback(r, "http-upstream", 80)
        v4, v6 = _host.host_addresses()
        require(bool(v4), "a non-loopback IPv4 address on this host")
        v["eth4"] = v4[0]
        v["eth4_port"] = str(r.tcp("tcp-eth4", v4[0]))
        if v6:
            v["eth6"] = v6[0]
            v["eth6_port"] = str(r.tcp("tcp-eth6", v6[0]))
        else:  # no IPv6 address here: an AF_INET6 socket to the IPv4 one, v4-mapped
            v["eth6"] = "::ffff:" + v4[0]
            v["eth6_port"] = str(r.tcp("tcp-eth6", "::", dual_stack=True))
        # The host's resolver for the proxy-resolver run: port 53 of a loopback address,
        # named by a resolv.conf bound over /etc/resolv.conf in that run's mount namespace.
        resolver = _bind_random_loopback(r, "dns-answer", 53, udp=True)
        self.resolv_conf = self.base / "resolv.conf"
        self.resolv_conf.write_text(f"nameserver {resolver}\n")
        self.resolv_conf.chmod(0o644)
        port = r.udp("dns-udp", "127.0.0.1", dns=True)
        r.tcp("dns-tcp", "127.0.0.1", port)
        v["dns_port"] = str(port)
        sock = str(self.base / "host.sock")
        r.unix("unix-path", sock)
        v["unixpath"] = sock
        name = "flux-escape-" + secrets.token_hex(8)
        r.unix("unix-abstract", b"\0" + name.encode())
        v["abstract"] = "@" + name

    def stage(self) -> Path:
        if self._stage is None:
            self._stage = self.base / "stage"
            _stage.stage_library(self._stage)
        return self._stage

    def site(self, backend: str | None, user: str) -> _scenario.Site:
        """The site of *backend* (``None``: the control) for *user*, run once."""
        key = f"{backend or 'control'}-{user}"
        if key not in self._sites:
            uid = None if user == "root" else _scenario.NOBODY
            site = _scenario.lay_out(self, key, uid)
            site.values = dict(self.values)
            self._sites[key] = site
            _scenario.execute(site, self, backend)
            _unmount_leftovers(site)
        return self._sites[key]

    def close(self) -> None:
        for site in self._sites.values():
            _scenario.tear_down(site)
        self.recorder.close()


def _unmount_leftovers(site: _scenario.Site) -> None:
    """Undo a 'mount tmpfs' that worked on the host (the root control's; or an escape,
    which its test reports): a mount left under the lab would outlive the session."""
    for mnt in (site.ws / "mnt", site.wsp / "mnt"):
        while os.path.ismount(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=True, timeout=30)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    require(os.geteuid() == 0, "root (the suite runs sandboxes as root and as uid 65534)")
    require(shutil.which("setpriv") is not None, "setpriv (util-linux)")
    base = Path(tempfile.mkdtemp(prefix="flux-escapes-", dir="/var/tmp"))
    base.chmod(0o755)
    the_lab = Lab(base)
    try:
        yield the_lab
    finally:
        the_lab.close()
        shutil.rmtree(base, ignore_errors=True)


def site_of(lab: Lab, backend: str | None, user: str) -> Any:
    return lab.site(backend, user)
