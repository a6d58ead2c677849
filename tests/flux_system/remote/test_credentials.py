"""Where a server's token may come from, and what its errors say (never the token)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux_system import PortError, PortReason
from flux_system.remote import token_from_env, token_from_file
from tests._capabilities import require

TOKEN = "a-token-of-enough-length-42"


def _file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(mode)
    return path


def _refused(path: Path, why: str) -> PortError:
    with pytest.raises(PortError) as info:
        token_from_file(str(path))
    assert info.value.reason is PortReason.AUTH
    assert why in info.value.message, info.value.message
    assert TOKEN not in str(info.value)
    return info.value


def test_a_private_file_of_this_user_is_read(tmp_path: Path) -> None:
    assert token_from_file(str(_file(tmp_path, TOKEN + "\n"))) == TOKEN.encode()


def test_a_file_others_can_read_is_refused(tmp_path: Path) -> None:
    _refused(_file(tmp_path, TOKEN, 0o644), "accessible to group or others")


def test_a_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    """Its owner can read it and put any token in it: as ssh refuses such files."""
    require(os.geteuid() == 0, "root (to give a file to another user)")
    path = _file(tmp_path, TOKEN)
    assert token_from_file(str(path)) == TOKEN.encode()  # positive control: root's own
    os.chown(path, 65534, 65534)
    _refused(path, "owned by uid 65534")


def test_a_symlink_to_a_token_is_refused(tmp_path: Path) -> None:
    real = _file(tmp_path, TOKEN)
    link = tmp_path / "link"
    link.symlink_to(real)
    _refused(link, "cannot open token file")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    _refused(fifo, "not a regular file")


@pytest.mark.parametrize("text", ["", "\n", "short", "with space in the token"])
def test_an_empty_short_or_spaced_token_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(PortError) as info:
        token_from_file(str(_file(tmp_path, text)))
    assert info.value.reason is PortReason.AUTH


def test_an_env_token_error_names_the_variable_not_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLUX_TEST_TOKEN", "tiny-secret")
    with pytest.raises(PortError) as info:
        token_from_env("FLUX_TEST_TOKEN")
    assert "$FLUX_TEST_TOKEN" in info.value.message
    assert "tiny-secret" not in str(info.value)
    monkeypatch.setenv("FLUX_TEST_TOKEN", TOKEN)
    assert token_from_env("FLUX_TEST_TOKEN") == TOKEN.encode()
