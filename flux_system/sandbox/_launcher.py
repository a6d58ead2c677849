"""The one in-sandbox launcher: runs inside bubblewrap, restricts itself, execs the command.

Run by bwrap as ``python3 -I -S <dir>/_launcher.py [--spec FD] [--forwarder PORT:PATH]
-- COMMAND ARGS...`` (after bwrap's setup and its seccomp filter: a Landlocked process
cannot mount, so Landlock must come after bwrap). In order: it starts the proxy
forwarder (network ``proxy``), reads a JSON spec from fd FD (then closes it) and
applies what it asks — Landlock (the ``strict`` profile's extra layer), resource
limits — and ``execv``\\ s the command, which keeps pid 1.

It imports only the standard library and its sibling ``_landlock.py``, loaded by file
path: the ``flux_system`` package (and its dependencies) need not be importable inside.

Guarantee: the command is exec'd only after every requested step succeeded; any failure
prints one line ``flux-launcher: ...`` to stderr and exits 125, without running it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import sys
import typing

_EXIT_FAILED = 125
_MAX_SPEC = 1 << 20


def _fail(msg: str) -> typing.NoReturn:
    os.write(2, f"flux-launcher: {msg}\n".encode(errors="replace"))
    os._exit(_EXIT_FAILED)


def _sibling(name: str) -> typing.Any:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"flux_launcher_{name}", path)
    if spec is None or spec.loader is None:
        _fail(f"cannot load {name}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_spec(fd: int) -> dict[str, typing.Any]:
    chunks = []
    total = 0
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            total += len(chunk)
            if total > _MAX_SPEC:
                _fail("spec too large")
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = json.loads(b"".join(chunks))
    if not isinstance(data, dict):
        _fail("spec is not an object")
    return data


def _landlock(spec: dict[str, typing.Any]) -> None:
    ll = _sibling("_landlock")
    rules = ll.Ruleset(
        read=tuple(spec.get("read", ())),
        write=tuple(spec.get("write", ())),
        tcp_bind=None if spec.get("tcp_bind") is None else tuple(spec["tcp_bind"]),
        tcp_connect=None if spec.get("tcp_connect") is None else tuple(spec["tcp_connect"]),
        scope=bool(spec.get("scope", True)),
    )
    ll.restrict(rules)


def _rlimits(pairs: list[list[int]]) -> None:
    for res, value in pairs:
        resource.setrlimit(res, (value, value))


def start_forwarder(port: int, path: str) -> None:
    """Start the proxy forwarder (network ``proxy``) and return in the launcher.

    Binds ``127.0.0.1:port`` and connects the run's lifeline to the proxy socket
    *path* here (so both exist before the command runs: no start-up race), then
    double-forks: the forwarder is not the launcher's (the command's) child, so
    nothing waits for it; its stdio goes to ``/dev/null`` and every other fd is closed,
    so it holds none of the command's pipes. It dies with the sandbox's pid namespace.
    docs/decisions/0089.
    """
    fwd = _sibling("_forwarder")
    listener = fwd.bind_listener(port)
    lifeline = fwd.open_lifeline(path)
    keep = {listener.fileno(), lifeline.fileno()}
    pid = os.fork()
    if pid == 0:  # the intermediate child
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, min(keep))
            os.closerange(min(keep) + 1, max(keep))  # the two kept fds bound the range
            os.closerange(max(keep) + 1, 65536)
            fwd.serve(listener, path, lifeline)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    listener.close()
    lifeline.close()


def _parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] not in ("--spec", "--forwarder") or i + 1 >= len(argv):
            _fail(f"unknown option {argv[i]!r}")
        opts[argv[i]] = argv[i + 1]
        i += 2
    command = argv[i + 1 :]
    if i >= len(argv) or not command:
        _fail("usage: _launcher.py [--spec FD] [--forwarder PORT:PATH] -- COMMAND [ARGS...]")
    return opts, command


def main(argv: list[str]) -> typing.NoReturn:
    opts, command = _parse(argv)
    spec: dict[str, typing.Any] = {}
    if "--spec" in opts:
        try:
            spec = _read_spec(int(opts["--spec"]))
        except (OSError, ValueError) as exc:
            _fail(f"cannot read the spec: {exc}")
    try:
        if "--forwarder" in opts:  # before Landlock: the forwarder is not restricted by it
            port, _, path = opts["--forwarder"].partition(":")
            start_forwarder(int(port), path)
        if spec.get("landlock") is not None:
            _landlock(spec["landlock"])
        if spec.get("rlimits"):
            _rlimits(spec["rlimits"])
    except (OSError, ValueError, TypeError) as exc:
        _fail(f"cannot set up the sandbox: {exc}")
    try:
        os.execv(command[0], command)  # noqa: S606 - argv only, never a shell
    except OSError as exc:
        os.write(2, f"flux-launcher: {command[0]}: {exc.strerror}\n".encode(errors="replace"))
        os._exit(127 if exc.errno == 2 else 126)


if __name__ == "__main__":
    main(sys.argv[1:])
