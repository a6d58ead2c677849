"""Durable sessions: turn state and consumed receipts in SQLite.

The store lives under ``$XDG_STATE_HOME/flux/`` (default ``~/.local/state/flux/``) —
:func:`default_store_path` — and :func:`check_outside` refuses a location inside a
writable root of the workspace (a sandboxed agent must not rewrite its own session).
The database is opened through :mod:`flux_runtime._files`, the one module of
``flux_runtime`` allowed file access.

Guarantee: :meth:`SessionStore.consume` is atomic (an ``INSERT`` on a primary key), so
a receipt id is consumed once, across processes and restarts.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_runtime._files import open_sqlite, real_path

__all__ = ["SessionStore", "check_outside", "default_store_path"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, state TEXT NOT NULL,
  status TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS receipts (id TEXT PRIMARY KEY, session TEXT NOT NULL,
  consumed REAL NOT NULL);
"""


def default_store_path(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or "~", ".local", "state")
    return os.path.join(os.path.expanduser(base), "flux", "sessions.db")


def check_outside(store_path: str, writable_roots: list[str], what: str = "session store") -> None:
    """Refuse a store (or an evidence log: *what*) inside any of *writable_roots*,
    both sides resolved (a symlink into a root is inside it).

    Raises:
        EnvelopeError: SESSION naming the store path.
    """
    where = real_path(store_path)
    for root in writable_roots:
        base = real_path(root)
        if where == base or where.startswith(base.rstrip("/") + "/"):
            raise EnvelopeError(
                f"the {what} must not live inside a writable root ({root}) the agent can change",
                op="session",
                reason=EnvelopeReason.SESSION,
                target=store_path,
            )


def _fail(exc: BaseException, target: str) -> EnvelopeError:
    return EnvelopeError(
        f"session store: {type(exc).__name__}: {exc}",
        op="session",
        reason=EnvelopeReason.SESSION,
        target=target,
    )


class SessionStore:
    """Turn states by session id, and the ledger of consumed receipts."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._db = open_sqlite(path)
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise _fail(exc, path) from None

    def save(self, session: str, state: Mapping[str, Any], status: str) -> None:
        try:
            self._db.execute(
                "INSERT INTO sessions(id, state, status, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET state=excluded.state, status=excluded.status, "
                "updated=excluded.updated",
                (session, json.dumps(dict(state), sort_keys=True), status, time.time()),
            )
        except sqlite3.Error as exc:
            raise _fail(exc, session) from None

    def load(self, session: str) -> dict[str, Any]:
        try:
            row = self._db.execute("SELECT state FROM sessions WHERE id = ?", (session,)).fetchone()
        except sqlite3.Error as exc:
            raise _fail(exc, session) from None
        if row is None:
            raise EnvelopeError(
                "no such session", op="session", reason=EnvelopeReason.SESSION, target=session
            )
        state: dict[str, Any] = json.loads(row[0])
        return state

    def consume(self, receipt_id: str, session: str) -> bool:
        try:
            self._db.execute(
                "INSERT INTO receipts(id, session, consumed) VALUES (?, ?, ?)",
                (receipt_id, session, time.time()),
            )
        except sqlite3.IntegrityError:
            return False
        except sqlite3.Error as exc:
            raise _fail(exc, session) from None
        return True

    def receipt_key(self) -> bytes:
        """This store's receipt MAC key (made once, kept outside the workspace)."""
        try:
            self._db.execute(
                "INSERT OR IGNORE INTO meta(name, value) VALUES ('receipt_key', ?)",
                (os.urandom(32),),
            )
            row = self._db.execute("SELECT value FROM meta WHERE name = 'receipt_key'").fetchone()
        except sqlite3.Error as exc:
            raise _fail(exc, self.path) from None
        key: bytes = row[0]
        return key

    def close(self) -> None:
        self._db.close()
