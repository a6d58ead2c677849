"""The conformance checks (DESIGN §2.6): behaviour every substrate must show.

Each check is independent and names what it proves. A family the substrate does not
serve must raise :class:`~flux_system.UnservedError` for every operation — a substrate
passes by serving an operation correctly *or* by refusing it as unserved, never by
fabricating a value. Refusals are accepted in either form: the native error
(``PathEscapeError``) or its remote form (``RefusedError`` whose ``remote_error`` names
it).
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from flux_system._exceptions import (
    FluxSystemError,
    RefusedError,
    UnservedError,
)
from flux_system.port import Identity, Metric, Substrate

__all__ = ["CheckResult", "ConformanceError", "check_substrate"]

Factory = Callable[[], Substrate]
LARGE = 8 * 1024 * 1024 + 4099  # past one default frame: must travel chunked remotely


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check: ``passed``, ``unserved`` (refused as not served) or ``failed``."""

    name: str
    outcome: typing.Literal["passed", "unserved", "failed"]
    detail: str = ""


class ConformanceError(AssertionError):
    """At least one check failed; ``results`` holds every check's outcome."""

    def __init__(self, results: list[CheckResult]) -> None:
        self.results = results
        failed = [r for r in results if r.outcome == "failed"]
        super().__init__(
            f"{len(failed)} of {len(results)} conformance checks failed:\n"
            + "\n".join(f"  {r.name}: {r.detail}" for r in failed)
        )


class _Fail(Exception):
    pass


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise _Fail(what)


def _refused_as(exc: BaseException, *names: str) -> bool:
    """Whether *exc* is one of the named flux errors, natively or as a remote refusal."""
    if isinstance(exc, RefusedError):
        return exc.remote_error in names
    return any(cls.__name__ in names for cls in type(exc).__mro__)


def _raises(fn: Callable[[], object], *names: str) -> None:
    try:
        fn()
    except UnservedError:
        raise
    except FluxSystemError as exc:
        if not _refused_as(exc, *names):
            remote = getattr(exc, "remote_error", None)
            raise _Fail(f"raised {type(exc).__name__} ({remote}), expected {names}") from exc
        return
    except (TypeError, ValueError) as exc:
        if type(exc).__name__ in names:
            return
        raise _Fail(f"raised {type(exc).__name__}, expected {names}") from exc
    raise _Fail(f"did not raise; expected {names}")


# -- files ------------------------------------------------------------------------------


def _files_round_trip(s: Substrate) -> None:
    f = s.files
    f.mkdir("k/d")
    f.write_bytes("k/d/a.txt", b"alpha\n")
    f.append_bytes("k/d/a.txt", b"beta\n")
    _expect(f.read_bytes("k/d/a.txt") == b"alpha\nbeta\n", "read after write+append")
    _expect(f.read_text("k/d/a.txt") == "alpha\nbeta\n", "read_text")
    _expect(f.list_dir("k") == ["d"], "list_dir names")
    _expect(f.walk("k") == ["k/d", "k/d/a.txt"], f"walk: {f.walk('k')}")
    info = f.stat("k/d/a.txt")
    _expect(info.is_file and info.size == 11, f"stat: {info}")
    _expect(f.is_dir("k/d") is True and f.is_dir("k/d/a.txt") is False, "is_dir")
    f.rename("k/d/a.txt", "k/b.txt")
    _expect(f.exists("k/b.txt") is True and f.exists("k/d/a.txt") is False, "rename")
    f.remove("k", recursive=True)
    _expect(f.exists("k") is False, "remove recursive")


def _files_exists_is_not_fabricated(s: Substrate) -> None:
    f = s.files
    _expect(f.exists("kit-probe") is False, "missing file reported as existing")
    f.write_bytes("kit-probe", b"x")
    _expect(f.exists("kit-probe") is True, "existing file reported missing")
    f.remove("kit-probe")
    _expect(f.exists("kit-probe") is False, "removed file still exists")


def _files_large_contents(s: Substrate) -> None:
    data = os.urandom(LARGE)
    s.files.write_bytes("kit-large.bin", data)
    try:
        _expect(s.files.read_bytes("kit-large.bin") == data, "large contents changed in transit")
        _expect(s.files.stat("kit-large.bin").size == LARGE, "large size")
    finally:
        s.files.remove("kit-large.bin")


def _files_confinement(s: Substrate) -> None:
    for path in ("../kit-escape", "/etc/passwd", "a/../../kit-escape"):

        def read(p: str = path) -> object:
            return s.files.read_bytes(p)

        def write(p: str = path) -> object:
            s.files.write_bytes(p, b"x")
            return None

        _raises(read, "ConfinementError", "PathEscapeError", "NotFoundError")
        _raises(write, "ConfinementError", "PathEscapeError", "NotFoundError")
    bad = ("InvalidPathError", "ConfinementError", "ValidationError", "PortError")
    _raises(lambda: s.files.read_bytes("bad\x00name"), *bad)


def _files_not_found(s: Substrate) -> None:
    _raises(lambda: s.files.read_bytes("kit-missing"), "NotFoundError")
    _raises(lambda: s.files.stat("kit-missing"), "NotFoundError")
    _raises(lambda: s.files.remove("kit-missing"), "NotFoundError")


# -- processes -------------------------------------------------------------------------


def _processes_run(s: Substrate) -> None:
    p = s.processes
    r = p.run(["sh", "-c", "printf out; printf err >&2; exit 3"])
    _expect((r.exit_code, r.stdout, r.stderr) == (3, b"out", b"err"), f"run: {r}")
    r = p.run(["cat"], stdin=b"fed\n")
    _expect(r.stdout == b"fed\n", "stdin")
    r = p.run(["sh", "-c", "kill -9 $$"])
    _expect((r.exit_code, r.signal) == (-9, 9), f"signal: {r}")


def _processes_argv_only(s: Substrate) -> None:
    argv: typing.Any = "echo hi"  # a str command must be refused, never split
    _raises(lambda: s.processes.run(argv), "TypeError")
    _raises(lambda: s.processes.run(["kit-no-such-command"]), "SpawnError")


def _processes_spawn_kill(s: Substrate) -> None:
    child = s.processes.spawn(["sleep", "60"])
    _expect(child.status().running, "spawned child not running")
    child.kill()
    _expect(child.join(30), "killed child not reaped")
    st = child.status()
    _expect((st.running, st.signal) == (False, 9), f"after kill: {st}")


def _processes_spawn_output(s: Substrate) -> None:
    child = s.processes.spawn(["sh", "-c", "echo one; echo two >&2"])
    _expect(child.join(30), "child did not end")
    out = child.read_output()
    _expect((out.stdout, out.stderr) == (b"one\n", b"two\n"), f"output: {out}")
    _expect(child.status().exit_code == 0, "exit code")


# -- the rest ----------------------------------------------------------------------------


def _metrics_never_zero_for_unknown(s: Substrate) -> None:
    m = s.metrics.metrics()
    for name in (
        "cpu_percent",
        "load_1m",
        "memory_used",
        "memory_total",
        "swap_used",
        "disk_used",
        "disk_total",
        "uptime",
    ):
        metric = getattr(m, name)
        _expect(isinstance(metric, Metric), f"{name} is not a Metric")
        _expect((metric.value is None) != (metric.unavailable is None), f"{name}: value and reason")


def _identity_shape(s: Substrate) -> None:
    me = s.identity.identity()
    _expect(isinstance(me, Identity), "identity type")
    _expect(bool(me.hostname) and bool(me.system), "identity fields")


def _http_unserved_or_guarded(s: Substrate) -> None:
    # The kit sends nothing anywhere: a request to a name that is always internal must be
    # refused by the serving side's guard (or the family is unserved).
    _raises(
        lambda: s.http.http_request("GET", "http://metadata.google.internal/"),
        "EgressDeniedError",
    )


CHECKS: dict[str, tuple[str, Callable[[Substrate], None]]] = {
    "files.round_trip": ("files", _files_round_trip),
    "files.exists_not_fabricated": ("files", _files_exists_is_not_fabricated),
    "files.large_contents": ("files", _files_large_contents),
    "files.confinement": ("files", _files_confinement),
    "files.not_found": ("files", _files_not_found),
    "processes.run": ("processes", _processes_run),
    "processes.argv_only": ("processes", _processes_argv_only),
    "processes.spawn_kill": ("processes", _processes_spawn_kill),
    "processes.spawn_output": ("processes", _processes_spawn_output),
    "metrics.never_zero_for_unknown": ("metrics", _metrics_never_zero_for_unknown),
    "identity.shape": ("identity", _identity_shape),
    "http.guarded": ("http", _http_unserved_or_guarded),
}


def _run(factory: Factory) -> Iterator[CheckResult]:
    for name, (_family, check) in CHECKS.items():
        sub = factory()
        try:
            check(sub)
        except UnservedError as exc:
            yield CheckResult(name, "unserved", exc.message)
        except _Fail as exc:
            yield CheckResult(name, "failed", str(exc))
        except Exception as exc:
            yield CheckResult(name, "failed", f"{type(exc).__name__}: {exc}"[:500])
        else:
            yield CheckResult(name, "passed")
        finally:
            sub.close()


def check_substrate(
    factory: Factory, *, require: typing.Iterable[str] = ("files",)
) -> list[CheckResult]:
    """Run every conformance check against fresh substrates from *factory*.

    *factory* returns a new :class:`~flux_system.port.Substrate` over an empty
    workspace each call (the kit closes it). Families in *require* must be served:
    an ``unserved`` outcome there counts as a failure.

    Returns: every check's :class:`CheckResult`.
    Raises: :class:`ConformanceError` when any check failed.
    """
    required = set(require)
    results = []
    for outcome in _run(factory):
        family = CHECKS[outcome.name][0]
        if outcome.outcome == "unserved" and family in required:
            why = f"required family {family!r} is unserved"
            outcome = CheckResult(outcome.name, "failed", why)  # noqa: PLW2901
        results.append(outcome)
    if any(r.outcome == "failed" for r in results):
        raise ConformanceError(results)
    return results
