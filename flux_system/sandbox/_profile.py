"""Sandbox profiles: TOML files loaded with ``tomllib`` and validated by hand.

A profile names the layers it requires, the read-only system view, extra writable and
protected paths, the network mode with its allowed hosts, limits and ``restore``. The
built-in ones (``default``, ``strict``, ``net-proxy``) ship inside the package
(``flux_system/sandbox/profiles/``, mapped from ``sandbox-profiles/`` at build time) and
are found in the source tree too. Loading never imports pydantic: this is on the
start-up path of every ``flux exec``.

Guarantee: unknown keys, wrong types and unknown values are refused with a
:class:`SandboxUnavailableError` (``BAD_PROFILE``) naming the file and the key.
Not guaranteed: that listed system paths exist (missing ones are skipped when bound).
"""

from __future__ import annotations

import os
import typing
from pathlib import Path

from flux_system._exceptions import SandboxReason, SandboxUnavailableError
from flux_system._values import record

__all__ = [
    "BUILTIN_PROFILES",
    "LAYERS",
    "NETWORK_MODES",
    "Profile",
    "load_profile",
    "parse_profile",
    "profile_dirs",
]

BUILTIN_PROFILES = ("default", "net-proxy", "strict")
LAYERS = ("bubblewrap", "landlock", "seccomp")
NETWORK_MODES = ("host", "none", "proxy")
_MAX_PROFILE_BYTES = 1 << 20  # a profile is a few hundred bytes; refuse anything huge
_MAX_ENTRIES = 1024  # entries per list


@typing.final
@record
class Profile:
    """A validated sandbox profile (plain values; see docs/sandbox.md for each key)."""

    name: str
    source: str
    description: str = ""
    require: tuple[str, ...] = ()
    restore: bool = True
    read_only: tuple[str, ...] = ()
    etc: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    network: str = "none"
    allow_hosts: tuple[str, ...] = ()
    allow_private: tuple[str, ...] = ()
    processes: int | None = None
    open_files: int | None = None
    cpu_seconds: int | None = None
    file_size: int | None = None
    address_space: int | None = None
    tmpfs_size: int | None = None
    allow_netlink: bool = False


_TOP = {"description", "require", "restore", "filesystem", "network", "limits", "seccomp"}
_TABLES: dict[str, set[str]] = {
    "filesystem": {"read_only", "etc", "read_write", "protected"},
    "network": {"mode", "allow_hosts", "allow_private"},
    "limits": {
        "processes",
        "open_files",
        "cpu_seconds",
        "file_size",
        "address_space",
        "tmpfs_size",
    },
    "seccomp": {"allow_netlink"},
}


def _bad(source: str, key: str, what: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"profile {source}: {key}: {what}",
        op="load_profile",
        layer=f"{source}:{key}",
        reason=SandboxReason.BAD_PROFILE,
    )


def _strings(
    source: str, key: str, value: object, *, absolute: bool | None = None
) -> tuple[str, ...]:
    """A list of strings; *absolute* True/False: absolute/relative paths, None: not paths."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _bad(source, key, "must be a list of non-empty strings")
    if len(value) > _MAX_ENTRIES:
        raise _bad(source, key, f"more than {_MAX_ENTRIES} entries")
    for v in value:
        if "\0" in v or not v.isprintable():
            raise _bad(source, key, "entries must be printable text")
        if absolute and not v.startswith("/"):
            raise _bad(source, key, f"{v!r} is not an absolute path")
        if absolute is False and (v.startswith("/") or ".." in v.split("/")):
            raise _bad(source, key, f"{v!r} must be relative, without '..'")
    return tuple(value)


def _count(source: str, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(source, key, "must be a positive integer")
    return value


def parse_profile(data: dict[str, object], *, name: str, source: str) -> Profile:
    """Validate the decoded TOML *data* of profile *name* read from *source*.

    Raises:
        SandboxUnavailableError: ``BAD_PROFILE``, naming *source* and the key.
    """
    for key in data:
        if key not in _TOP:
            raise _bad(source, key, "unknown key")
    tables: dict[str, dict[str, object]] = {}
    for table, allowed in _TABLES.items():
        raw = data.get(table, {})
        if not isinstance(raw, dict):
            raise _bad(source, table, "must be a table")
        for key in raw:
            if key not in allowed:
                raise _bad(source, f"{table}.{key}", "unknown key")
        tables[table] = raw
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise _bad(source, "description", "must be a string")
    require = _strings(source, "require", data.get("require", []))
    for layer in require:
        if layer not in LAYERS:
            raise _bad(source, "require", f"unknown layer {layer!r} (known: {', '.join(LAYERS)})")
    restore = data.get("restore", True)
    if not isinstance(restore, bool):
        raise _bad(source, "restore", "must be true or false")
    fs, net, lim = tables["filesystem"], tables["network"], tables["limits"]
    etc = _strings(source, "filesystem.etc", fs.get("etc", []), absolute=False)
    mode = net.get("mode", "none")
    if mode not in NETWORK_MODES:
        raise _bad(source, "network.mode", f"must be one of {', '.join(NETWORK_MODES)}")
    netlink = tables["seccomp"].get("allow_netlink", False)
    if not isinstance(netlink, bool):
        raise _bad(source, "seccomp.allow_netlink", "must be true or false")
    counts: dict[str, int | None] = {}
    for key in _TABLES["limits"]:
        value = lim.get(key)
        counts[key] = None if value is None else _count(source, f"limits.{key}", value)
    return Profile(
        name=name,
        source=source,
        description=desc,
        require=require,
        restore=restore,
        read_only=_strings(source, "filesystem.read_only", fs.get("read_only", []), absolute=True),
        etc=etc,
        read_write=_strings(
            source, "filesystem.read_write", fs.get("read_write", []), absolute=True
        ),
        protected=_strings(source, "filesystem.protected", fs.get("protected", []), absolute=False),
        network=mode,
        allow_hosts=_strings(source, "network.allow_hosts", net.get("allow_hosts", [])),
        allow_private=_strings(source, "network.allow_private", net.get("allow_private", [])),
        processes=counts["processes"],
        open_files=counts["open_files"],
        cpu_seconds=counts["cpu_seconds"],
        file_size=counts["file_size"],
        address_space=counts["address_space"],
        tmpfs_size=counts["tmpfs_size"],
        allow_netlink=netlink,
    )


def profile_dirs() -> tuple[Path, ...]:
    """Where built-in profiles are looked for: inside the package, then the source tree."""
    here = Path(__file__).resolve().parent
    return (here / "profiles", here.parent.parent / "sandbox-profiles")


def _read(path: Path, source: str, builtin: str | None = None) -> dict[str, object]:
    """The table in the profile file at *path*; *builtin*: the built-in profile it
    should be, whose parse made ahead of time is used while the text is unchanged."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise SandboxUnavailableError(
            f"profile {source}: cannot open: {exc.strerror}",
            op="load_profile",
            layer=source,
            reason=SandboxReason.BAD_PROFILE,
        ) from exc
    try:
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(_MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise _bad(source, "(file)", f"cannot read: {exc.strerror}") from exc
    if len(raw) > _MAX_PROFILE_BYTES:
        raise _bad(source, "(file)", "larger than 1 MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(source, "(file)", "not UTF-8") from exc
    if builtin is not None:  # tomllib costs 4-5 ms to import and parse (decision 0137)
        from flux_system.sandbox._compiled_profiles import COMPILED

        known = COMPILED.get(builtin)
        if known is not None and known[0] == text:
            return known[1]
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _bad(source, "(file)", f"not valid TOML: {exc}") from exc


def load_profile(spec: str | os.PathLike[str]) -> Profile:
    """Load a built-in profile by name, or a profile file by path (a name with ``/`` or
    ending in ``.toml``).

    Raises:
        SandboxUnavailableError: ``BAD_PROFILE`` — unknown name, unreadable file, invalid
            content (naming file and key).
    """
    text = os.fspath(spec)
    if not isinstance(text, str):
        raise TypeError("profile must be a name or a path")
    if "/" not in text and not text.endswith(".toml"):
        if text not in BUILTIN_PROFILES:
            raise SandboxUnavailableError(
                f"unknown profile {text!r} (built in: {', '.join(BUILTIN_PROFILES)})",
                op="load_profile",
                layer=text,
                reason=SandboxReason.BAD_PROFILE,
            )
        for d in profile_dirs():
            path = d / f"{text}.toml"
            if path.is_file():
                table = _read(path, f"{text}.toml", builtin=text)
                return parse_profile(table, name=text, source=str(path))
        raise SandboxUnavailableError(
            f"built-in profile {text!r} is not installed (looked in {profile_dirs()[0]})",
            op="load_profile",
            layer=text,
            reason=SandboxReason.BAD_PROFILE,
        )
    path = Path(text)
    return parse_profile(_read(path, text), name=path.stem, source=text)
