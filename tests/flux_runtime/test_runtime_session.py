"""Where sessions live, and that they survive the process that wrote them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux_runtime import EnvelopeError, EnvelopeReason, SessionStore, default_store_path
from flux_runtime._session import check_outside


def test_default_location_follows_xdg_state_home() -> None:
    assert default_store_path({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == "/s/flux/sessions.db"
    assert default_store_path({"HOME": "/h"}) == "/h/.local/state/flux/sessions.db"
    assert default_store_path({"XDG_STATE_HOME": "", "HOME": "/h"}).startswith("/h/.local/")


def test_store_inside_the_workspace_is_refused_even_through_a_symlink(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    for inside in (ws / "s.db", ws / "sub" / "deep" / "s.db"):
        with pytest.raises(EnvelopeError) as info:
            check_outside(str(inside), [str(ws)])
        assert info.value.reason is EnvelopeReason.SESSION
    link = tmp_path / "looks-outside"
    link.symlink_to(ws)
    with pytest.raises(EnvelopeError):
        check_outside(str(link / "s.db"), [str(ws)])
    check_outside(str(tmp_path / "state" / "s.db"), [str(ws)])  # a sibling is fine
    check_outside(str(tmp_path / "ws2" / "s.db"), [str(ws)])  # a prefix is not inside


def test_state_survives_reopen_and_directory_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "flux" / "sessions.db"
    store = SessionStore(str(path))
    store.save("abc", {"stage": "suspended", "n": 1}, "suspended")
    key = store.receipt_key()
    store.close()
    again = SessionStore(str(path))
    assert again.load("abc") == {"stage": "suspended", "n": 1}
    assert again.receipt_key() == key
    with pytest.raises(EnvelopeError) as info:
        again.load("missing")
    assert info.value.reason is EnvelopeReason.SESSION
    again.close()
    assert os.stat(path.parent).st_mode & 0o077 == 0


def test_a_new_store_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    # The directory is made 0700 only when it is created: in one that already existed
    # (0755), the database (sessions and the receipt key) was created 0644.
    import os

    from flux_runtime import SessionStore

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    store = SessionStore(str(shared / "s.db"))
    store.save("s1", {"stage": "done"}, "done")  # a write: the WAL exists now
    assert store.receipt_key()  # positive control: the key lives in this file
    for name in ("s.db", "s.db-wal"):
        assert (shared / name).stat().st_mode & 0o777 == 0o600, name
    store.close()
