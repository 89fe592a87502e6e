"""Serving state under the runtime home: the bearer token and a SQLite database.

``<home>/serving/token`` holds the token (created on first start, mode 0600).
``<home>/serving/state.db`` holds

- ``audit``: one row per event (``ml.predict_query``, ``ml.scale``, ``ml.shadow.start``, ...);
- ``replicas``: every resident replica of every endpoint on this home (for ``max_warm_replicas``), with the
  endpoint process that started it (``owner_pid``): only that process removes its rows, and rows
  whose replica or owner process is gone are forgotten when read;
- ``replies``: answers kept by ``Idempotency-Key`` with the digest of the request they answered
  (:mod:`lakescore.serving.http.idempotency`), so a retried request is answered once and another request
  under the same key is refused, never answered with them.

Writers use WAL mode, so the endpoint process and a reader (a test, ``status``) do not block.

The schema's version is SQLite's ``user_version`` (``SCHEMA_VERSION``). An older database is
migrated when opened, in one ``BEGIN IMMEDIATE`` transaction so that concurrent openers migrate
once: the table of replicas, named ``copies`` with a ``copy_id`` column up to version 3, is
renamed ``replicas`` with ``replica_id`` (its rows kept); without ``owner_pid`` (versions 1-2) it
gains it (empty for the rows already there: they are counted while their replica's process lives,
and no process removes them); ``replies`` without ``request_digest`` (``user_version`` 0) is
dropped (nothing says which request each kept reply answered, so none may be replayed; a retry of
one is scored again) and an ``ml.state.migrated`` audit event counts them; audit and replicas are
kept. Audit rows keep the event names they were written with (``ml.copy.*`` before version 4).
A database of a newer version is refused with :class:`~lakescore.errors.StateVersionError`.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from lakescore.errors import StateVersionError
from lakescore.locking import exclusive
from lakescore.serving.http.idempotency import Kept, check_same_request

SCHEMA_VERSION = 4  # 2: replies carry request_digest; 3: copies carry owner_pid; 4: copies -> replicas
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY, ts REAL NOT NULL, event TEXT NOT NULL,
    endpoint TEXT NOT NULL, detail TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS audit_event ON audit (event, endpoint)",
    """CREATE TABLE IF NOT EXISTS replicas (replica_id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, role TEXT NOT NULL,
    version INTEGER NOT NULL, pid INTEGER, address TEXT, started_at REAL NOT NULL, owner_pid INTEGER)""",
    """CREATE TABLE IF NOT EXISTS replies (endpoint TEXT NOT NULL, key TEXT NOT NULL,
    request_digest TEXT NOT NULL, ts REAL NOT NULL, status INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (endpoint, key))""",
)
AUDIT_INSERT = "INSERT INTO audit (ts, event, endpoint, detail) VALUES (?, ?, ?, ?)"


def serving_dir(home: str | Path) -> Path:
    """``<home>/serving``, created when missing."""
    path = Path(home) / "serving"
    path.mkdir(parents=True, exist_ok=True)
    return path


def ensure_token(home: str | Path) -> str:
    """The endpoint's bearer token: read ``<home>/serving/token``, or create it (32 random bytes,
    URL-safe, file mode 0600) on first start."""
    path = serving_dir(home) / "token"
    with exclusive(path.with_name("token.lock")):  # two first starts at once make one token
        if path.exists():
            return path.read_text().strip()
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        return token


@dataclass(frozen=True)
class AuditEvent:
    """One audit row."""

    ts: float
    event: str
    endpoint: str
    detail: dict[str, Any]


class ServingState:
    """The SQLite state of all endpoints under one runtime home (thread-safe).

    Parameters
    ----------
    home : str or Path
        The runtime home (``.lakescore``); the database is ``<home>/serving/state.db``.
    """

    def __init__(self, home: str | Path) -> None:
        self.path = serving_dir(home) / "state.db"
        self._lock = threading.Lock()
        with exclusive(self.path.with_name("state.db.lock")):  # first use: WAL switch and schema, once
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._ensure_schema()
            except BaseException:
                self._db.close()
                raise
        self._db.execute("PRAGMA synchronous=NORMAL")

    def _ensure_schema(self) -> None:
        """Create the tables, or migrate them (and audit ``ml.state.migrated``) in one transaction."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")  # concurrent openers: one migrates, the others then see SCHEMA_VERSION
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StateVersionError(
                    f"serving state {self.path} has schema version {version}; this lakescore reads versions up "
                    f"to {SCHEMA_VERSION}. Upgrade lakescore, or move the file away to start with empty serving "
                    "state (audit events and kept replies are then left behind in it).", path=str(self.path),
                    version=version)
            if version < SCHEMA_VERSION:
                columns = [r[1] for r in db.execute("PRAGMA table_info(replies)").fetchall()]
                dropped = None
                if columns and "request_digest" not in columns:  # version 1: replies keyed by the key alone
                    dropped = db.execute("SELECT count(*) FROM replies").fetchone()[0]
                    db.execute("DROP TABLE replies")
                old_columns = [r[1] for r in db.execute("PRAGMA table_info(copies)").fetchall()]
                if old_columns and "owner_pid" not in old_columns:  # versions 1-2: no owner recorded
                    db.execute("ALTER TABLE copies ADD COLUMN owner_pid INTEGER")
                if old_columns:  # versions 1-3: the table of replicas and its key were named for copies
                    db.execute("ALTER TABLE copies RENAME COLUMN copy_id TO replica_id")
                    db.execute("ALTER TABLE copies RENAME TO replicas")
                for statement in SCHEMA:
                    db.execute(statement)
                if dropped is not None:
                    db.execute(AUDIT_INSERT, (time.time(), "ml.state.migrated", "", json.dumps(
                        {"path": str(self.path), "from_version": 1, "to_version": SCHEMA_VERSION,
                         "replies_dropped": dropped})))
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    def _run(self, sql: str, rows: Iterable[tuple[Any, ...]] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            if isinstance(rows, tuple):
                return self._db.execute(sql, rows).fetchall()
            self._db.execute("BEGIN")
            try:
                self._db.executemany(sql, rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return []

    # --- audit -------------------------------------------------------------------------------

    def audit(self, event: str, endpoint: str, **detail: Any) -> None:
        """Write one audit event now (control events: scale, shadow, canary, replicas)."""
        self._run(AUDIT_INSERT, (time.time(), event, endpoint, json.dumps(detail, default=str)))

    def audit_many(self, events: list[AuditEvent]) -> None:
        """Write many audit events in one transaction (the buffered ``ml.predict_query`` events)."""
        self._run(AUDIT_INSERT, [(e.ts, e.event, e.endpoint, json.dumps(e.detail, default=str)) for e in events])

    def events(self, event: str | None = None, *, endpoint: str | None = None) -> list[AuditEvent]:
        """Audit events in order, optionally only one kind and one endpoint."""
        sql = "SELECT ts, event, endpoint, detail FROM audit WHERE 1=1"
        args: list[Any] = []
        if event:
            sql, args = sql + " AND event = ?", [*args, event]
        if endpoint:
            sql, args = sql + " AND endpoint = ?", [*args, endpoint]
        rows = self._run(sql + " ORDER BY id", tuple(args))
        return [AuditEvent(r[0], r[1], r[2], json.loads(r[3])) for r in rows]

    # --- replicas ------------------------------------------------------------------------------

    def add_replica(self, replica_id: str, *, endpoint: str, role: str, version: int, pid: int | None,
                 address: str | None) -> None:
        """Record a replica this process started (counted against ``max_warm_replicas`` while its process
        and this one live); this process is its owner."""
        self._run("INSERT OR REPLACE INTO replicas (replica_id, endpoint, role, version, pid, address, started_at, "
                  "owner_pid) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                  (replica_id, endpoint, role, version, pid, address, time.time(), os.getpid()))

    def remove_replica(self, replica_id: str) -> None:
        """Forget a stopped replica, if this process recorded it (another's row of the same id stays)."""
        self._run("DELETE FROM replicas WHERE replica_id = ? AND owner_pid = ?", (replica_id, os.getpid()))

    def remove_endpoint_replicas(self, endpoint: str) -> None:
        """Forget every replica of ``endpoint`` that this process recorded (it is shutting down)."""
        self._run("DELETE FROM replicas WHERE endpoint = ? AND owner_pid = ?", (endpoint, os.getpid()))

    def resident_replicas(self) -> list[dict[str, Any]]:
        """Replicas of every endpoint whose process and owner are still alive (a row whose replica or
        owner process is gone is forgotten)."""
        rows = self._run("SELECT replica_id, endpoint, role, version, pid, address, owner_pid FROM replicas", ())
        alive = []
        for replica_id, endpoint, role, version, pid, address, owner in rows:
            if any(p is not None and not psutil.pid_exists(p) for p in (pid, owner)):
                self._run("DELETE FROM replicas WHERE replica_id = ? AND owner_pid IS ?", (replica_id, owner))
                continue
            alive.append({"replica_id": replica_id, "endpoint": endpoint, "role": role, "version": version,
                          "pid": pid, "address": address})
        return alive

    # --- idempotent replies ------------------------------------------------------------------

    def save_reply(self, endpoint: str, key: str, status: int, body: bytes, *, request_digest: str) -> None:
        """Keep the reply to the request with ``Idempotency-Key: key`` and digest ``request_digest``
        (:func:`lakescore.serving.http.idempotency.request_digest`)."""
        self._run("INSERT OR REPLACE INTO replies (endpoint, key, request_digest, ts, status, body) "
                  "VALUES (?, ?, ?, ?, ?, ?)", (endpoint, key, request_digest, time.time(), status, body.decode()))

    def saved_reply(self, endpoint: str, key: str, *, request_digest: str, max_age_s: float) -> Kept | None:
        """The kept (status, body) for ``key`` if younger than ``max_age_s`` seconds, else None.

        Raises
        ------
        IdempotencyKeyReusedError
            When the kept reply answered another request (its digest differs from ``request_digest``).
        """
        rows = self._run("SELECT request_digest, status, body FROM replies WHERE endpoint = ? AND key = ? "
                         "AND ts >= ?", (endpoint, key, time.time() - max_age_s))
        if not rows:
            return None
        kept_digest, status, body = rows[0]
        check_same_request(endpoint, key, kept_digest, request_digest)
        return int(status), body.encode()

    def forget_replies(self, *, older_than_s: float) -> None:
        """Drop kept replies older than ``older_than_s`` seconds."""
        self._run("DELETE FROM replies WHERE ts < ?", (time.time() - older_than_s,))
