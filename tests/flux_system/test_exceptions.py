from __future__ import annotations

import errno
import pickle

import pytest

from flux_system import (
    ConfinementReason,
    FluxSystemError,
    NotFoundError,
    PathEscapeError,
    PortReason,
    ProcessTimeoutError,
    UnservedError,
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
