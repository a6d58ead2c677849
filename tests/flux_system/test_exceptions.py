from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest

from flux_system import (
    ConfinementReason,
    EgressDeniedError,
    EgressReason,
    FluxSystemError,
    InvalidPathError,
    NotFoundError,
    PathEscapeError,
    PortReason,
    ProcessReason,
    ProcessTimeoutError,
    RefusedError,
    SandboxReason,
    SandboxUnavailableError,
    SpawnError,
    UnservedError,
    Workspace,
    WorkspaceError,
    WorkspaceReason,
)
from flux_system._exceptions import map_os_errors


def test_map_os_errors_translates_with_reason_and_cause() -> None:
    with pytest.raises(NotFoundError) as info, map_os_errors("read_bytes", "a/b"):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")
    err = info.value
    assert err.reason is WorkspaceReason.NOT_FOUND
    assert err.op == "read_bytes"
    assert err.path == "a/b"
    assert err.errno == errno.ENOENT
    assert isinstance(err.__cause__, FileNotFoundError)


def test_unknown_errno_maps_to_io() -> None:
    with pytest.raises(WorkspaceError) as info, map_os_errors("write_bytes", "x"):
        raise OSError(errno.EIO, "I/O error")
    assert info.value.reason is WorkspaceReason.IO


def test_errors_pickle_with_fields() -> None:
    err = PathEscapeError("nope", op="open", path="../x", reason=ConfinementReason.ESCAPE)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is PathEscapeError
    assert (back.op, back.path, back.reason) == ("open", "../x", ConfinementReason.ESCAPE)


def test_default_reasons_and_required_reason() -> None:
    assert UnservedError("x", op="exists").reason is PortReason.UNSERVED
    with pytest.raises(TypeError):
        FluxSystemError("x", op="y")


def test_timeout_carries_output() -> None:
    err = ProcessTimeoutError("t", op="run", target="sleep", timeout=1.0, stdout=b"a")
    assert err.stdout == b"a" and err.stderr == b"" and err.timeout == 1.0
    assert isinstance(err, FluxSystemError)


# -- str(): the message names its path/target, quoted so it cannot forge output ---------

HOSTILE = [
    "plain.txt",
    "evil\nname",
    "\x1b[31mred\x1b[0m",
    "tab\there",
    "rtl\u202etxt.exe",
    "\udcff",
]


def _every_error_class() -> list[type[FluxSystemError]]:
    found: list[type[FluxSystemError]] = []
    todo: list[type[FluxSystemError]] = [FluxSystemError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: c.__name__)


def _bare(cls: type[FluxSystemError], message: str, target: str | None) -> FluxSystemError:
    """An instance with the fields set, whatever the class's constructor takes (so a
    class added later is covered without a new factory here)."""
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.op, err.target, err.reason = "op", target, PortReason.PROTOCOL
    return err


def _no_raw_controls(text: str) -> bool:
    return all(c.isprintable() for c in text)


@pytest.mark.parametrize("cls", _every_error_class(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("target", HOSTILE, ids=range(len(HOSTILE)))
def test_every_error_str_names_its_target_quoted(cls: type[FluxSystemError], target: str) -> None:
    text = str(_bare(cls, "op: it failed", target))
    assert text.startswith("op: it failed (")
    assert repr(target) in text  # the whole target, repr-escaped
    assert _no_raw_controls(text)
    assert text.count("\n") == 0


@pytest.mark.parametrize("cls", _every_error_class(), ids=lambda c: c.__name__)
def test_error_str_without_target_is_the_message(cls: type[FluxSystemError]) -> None:
    assert str(_bare(cls, "op: closed", None)) == "op: closed"


def test_control_characters_in_the_message_are_escaped_too() -> None:
    err = SpawnError(
        "spawn failed for evil\nINFO forged line",
        op="run",
        target=None,
        reason=ProcessReason.SPAWN_FAILED,
    )
    assert str(err) == "spawn failed for evil\\nINFO forged line"
    assert err.message == "spawn failed for evil\nINFO forged line"  # the field is kept


def test_target_already_quoted_in_the_message_is_not_repeated() -> None:
    err = SpawnError(
        "argv[0] 'tool' not found", op="run", target="tool", reason=ProcessReason.NOT_FOUND
    )
    assert str(err) == "argv[0] 'tool' not found"


def test_labels_name_what_the_target_is() -> None:
    cases: list[tuple[FluxSystemError, str]] = [
        (NotFoundError("read_bytes: missing", op="read_bytes", path="a/b"), "(path 'a/b')"),
        (
            PathEscapeError("x", op="open", path="../x", reason=ConfinementReason.ESCAPE),
            "(path '../x')",
        ),
        (
            EgressDeniedError("d", op="guard_url", target="evil.test", reason=EgressReason.PORT),
            "(host 'evil.test')",
        ),
        (
            SpawnError("s", op="run", target="nosuchcmd", reason=ProcessReason.NOT_FOUND),
            "(command 'nosuchcmd')",
        ),
        (
            SandboxUnavailableError(
                "u", op="sandbox", layer="landlock", reason=SandboxReason.LAYER_UNAVAILABLE
            ),
            "(layer 'landlock')",
        ),
        (RefusedError("r", op="write_bytes", target="x"), "(target 'x')"),
    ]
    for err, tail in cases:
        assert str(err).endswith(" " + tail), str(err)


def test_str_survives_pickling() -> None:
    err = NotFoundError("read_bytes: gone", op="read_bytes", path="evil\nname")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) == "read_bytes: gone (path 'evil\\nname')"


def test_workspace_errors_name_the_path(tmp_path: Path) -> None:
    with Workspace(tmp_path) as ws:
        with pytest.raises(NotFoundError) as missing:
            ws.read_bytes("src/missing.py")
        with pytest.raises(InvalidPathError) as control:
            ws.read_bytes("evil\n\x1b[2Jname")
    assert str(missing.value) == ("read_bytes: No such file or directory (path 'src/missing.py')")
    assert "'evil\\n\\x1b[2Jname'" in str(control.value)
    assert _no_raw_controls(str(control.value))


def test_missing_workspace_root_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no such root"
    with pytest.raises(NotFoundError) as info:
        Workspace(missing)
    assert info.value.path == str(missing)
    assert repr(str(missing)) in str(info.value)


def test_the_data_written_is_never_in_an_error(tmp_path: Path) -> None:
    secret = b"SECRET-data-0123456789"
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "fifo")
    os.symlink("../outside", tmp_path / "out")
    errors: list[BaseException] = []
    with Workspace(tmp_path) as ws:
        for path in ("d", "fifo", "out", "d/", "missing/x"):
            try:
                if path == "missing/x":
                    ws.write_bytes(path, secret, create_parents=False)
                else:
                    ws.write_bytes(path, secret)
            except FluxSystemError as exc:
                errors.append(exc)
            try:
                ws.append_bytes(path, secret)
            except FluxSystemError as exc:
                errors.append(exc)
    assert len(errors) == 10
    for error in errors:
        chain: list[BaseException] = [error]
        while chain[-1].__cause__ is not None:
            chain.append(chain[-1].__cause__)
        for e in chain:
            shown = str(e) + repr(e) + repr(e.args) + repr(vars(e))
            assert "SECRET" not in shown
