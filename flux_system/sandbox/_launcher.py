"""The one in-sandbox launcher: runs inside bubblewrap, restricts itself, execs the command.

Run by bwrap as ``python3 -I -S <dir>/_launcher.py --spec FD -- COMMAND ARGS...`` (after
bwrap's setup and its seccomp filter: a Landlocked process cannot mount, so Landlock
must come after bwrap). It reads a JSON spec from fd FD (then closes it), applies, in
order, the steps the spec asks for — Landlock (the ``strict`` profile's extra layer),
resource limits, the egress forwarder (network mode ``proxy``) — and ``execv``\\ s the
command, which keeps pid 1.

It imports only the standard library and its siblings ``_landlock.py`` and
``_forwarder.py`` (with ``_proxy_relay.py``), loaded by file path: the ``flux_system``
package (and its dependencies) need not be importable inside.

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


def _forwarder(spec: dict[str, typing.Any], fw: typing.Any) -> None:
    """Network mode ``proxy``: start the forwarder (``_forwarder.py``) before the command.

    The listener is bound and the proxy's lifeline connected here, before anything of
    the command runs (no start-up race). A double fork leaves the forwarder outside
    this process's children, its stdio on ``/dev/null`` and no other fd open; it lives
    in the sandbox's pid namespace and dies with it. *fw* is the module, loaded (with
    ``fw.preload()``) before the restrictions. Raises OSError.
    """
    path = str(spec["socket"])
    listener = fw.bind_listener(int(spec["port"]))
    lifeline = fw.open_lifeline(path)
    keep = sorted((listener.fileno(), lifeline.fileno()))
    pid = os.fork()
    if pid == 0:
        try:
            if os.fork() == 0:
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.closerange(3, keep[0])
                os.closerange(keep[0] + 1, keep[1])
                os.closerange(keep[1] + 1, os.sysconf("SC_OPEN_MAX"))
                fw.serve(listener, path, lifeline)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    listener.close()
    lifeline.close()


def main(argv: list[str]) -> typing.NoReturn:
    if len(argv) < 4 or argv[0] != "--spec" or argv[2] != "--":
        _fail("usage: _launcher.py --spec FD -- COMMAND [ARGS...]")
    try:
        spec = _read_spec(int(argv[1]))
    except (OSError, ValueError) as exc:
        _fail(f"cannot read the spec: {exc}")
    command = argv[3:]
    forwarder = None
    if spec.get("forwarder") is not None:  # loaded now: Landlock may forbid it later
        forwarder = _sibling("_forwarder")
        try:
            forwarder.preload()
        except (OSError, ImportError) as exc:
            _fail(f"cannot load the egress forwarder: {exc}")
    try:
        if spec.get("landlock") is not None:
            _landlock(spec["landlock"])
        if spec.get("rlimits"):
            _rlimits(spec["rlimits"])
    except (OSError, ValueError, TypeError) as exc:
        _fail(f"cannot restrict: {exc}")
    try:
        if forwarder is not None:
            _forwarder(spec["forwarder"], forwarder)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        _fail(f"cannot start the egress forwarder: {exc}")
    try:
        os.execv(command[0], command)  # noqa: S606 - argv only, never a shell
    except OSError as exc:
        os.write(2, f"flux-launcher: {command[0]}: {exc.strerror}\n".encode(errors="replace"))
        os._exit(127 if exc.errno == 2 else 126)


if __name__ == "__main__":
    main(sys.argv[1:])
