"""Token, audit, resident replicas and kept replies under the runtime home."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lakescore.errors import IdempotencyKeyReusedError, StateVersionError
from lakescore.serving.state.store import ServingState, ensure_token


def test_the_token_is_made_once_and_private(tmp_path) -> None:
    token = ensure_token(tmp_path)
    path = tmp_path / "serving" / "token"
    assert len(token) >= 40 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_token(tmp_path) == token


def test_audit_replicas_and_replies_round_trip(tmp_path) -> None:
    state = ServingState(tmp_path)
    state.audit("ml.scale", "ep", action="up", replicas_after=2)
    assert [(e.event, e.endpoint, e.detail) for e in state.events("ml.scale")] == [
        ("ml.scale", "ep", {"action": "up", "replicas_after": 2})]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        state.add_replica("gone", endpoint="ep", role="serve", version=1, pid=dead.pid, address=None)
        state.add_replica("here", endpoint="other", role="candidate", version=2, pid=live.pid, address="x")
        assert [c["replica_id"] for c in state.resident_replicas()] == ["here"]
    finally:
        live.kill()
        live.wait()
    state.save_reply("ep", "k1", 200, b'{"a":1}', request_digest="d1")
    assert state.saved_reply("ep", "k1", request_digest="d1", max_age_s=60) == (200, b'{"a":1}')
    assert state.saved_reply("other", "k1", request_digest="d2", max_age_s=60) is None
    state.forget_replies(older_than_s=-1)
    assert state.saved_reply("ep", "k1", request_digest="d1", max_age_s=60) is None
    state.close()


def test_a_kept_reply_answers_only_the_request_it_answered(tmp_path) -> None:
    state = ServingState(tmp_path)
    state.save_reply("ep", "job-7:1", 200, b'{"predictions":[1]}', request_digest="a" * 64)
    with pytest.raises(IdempotencyKeyReusedError) as caught:
        state.saved_reply("ep", "job-7:1", request_digest="b" * 64, max_age_s=60)
    assert caught.value.code == "idempotency_key_reused" and caught.value.http_status == 422
    assert "Idempotency-Key 'job-7:1' on endpoint 'ep'" in str(caught.value)
    assert "digest aaaaaaaaaaaa, this one bbbbbbbbbbbb" in str(caught.value)
    assert state.saved_reply("ep", "job-7:1", request_digest="a" * 64, max_age_s=60) == (200, b'{"predictions":[1]}')
    state.close()


OLD_SCHEMA = """
CREATE TABLE audit (id INTEGER PRIMARY KEY, ts REAL NOT NULL, event TEXT NOT NULL, endpoint TEXT NOT NULL,
    detail TEXT NOT NULL);
CREATE INDEX audit_event ON audit (event, endpoint);
CREATE TABLE copies (copy_id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, role TEXT NOT NULL,
    version INTEGER NOT NULL, pid INTEGER, address TEXT, started_at REAL NOT NULL);
CREATE TABLE replies (endpoint TEXT NOT NULL, key TEXT NOT NULL, ts REAL NOT NULL,
    status INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (endpoint, key));
INSERT INTO audit (ts, event, endpoint, detail) VALUES (1.0, 'ml.scale', 'ep', '{"action": "up"}');
INSERT INTO replies VALUES ('ep', 'job-7:1', 2e9, 200, '{"predictions": [1]}');
INSERT INTO replies VALUES ('ep', 'job-7:2', 2e9, 200, '{"predictions": [2]}');
"""


def old_state_db(home: Path) -> Path:
    """A state database as the version before request digests wrote it (user_version 0)."""
    path = home / "serving" / "state.db"
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    db.close()
    return path


def test_an_old_state_db_is_migrated_once_keeping_audit_and_dropping_replies(tmp_path) -> None:
    path = old_state_db(tmp_path)
    with ThreadPoolExecutor(4) as pool:  # four openers at once: one migrates
        states = list(pool.map(lambda _: ServingState(tmp_path), range(4)))
    for opened in states[1:]:
        opened.close()
    state = states[0]
    assert [(e.event, e.endpoint, e.detail) for e in state.events("ml.scale")] == [("ml.scale", "ep", {"action": "up"})]
    [migrated] = [e.detail for e in state.events("ml.state.migrated")]
    assert migrated == {"path": str(path), "from_version": 1, "to_version": 4, "replies_dropped": 2}
    # the old reply answered an unknown request: it is never replayed, for any digest
    assert state.saved_reply("ep", "job-7:1", request_digest="a" * 64, max_age_s=1e10) is None
    state.save_reply("ep", "job-7:1", 200, b"{}", request_digest="a" * 64)
    assert state.saved_reply("ep", "job-7:1", request_digest="a" * 64, max_age_s=60) == (200, b"{}")
    state.close()
    again = ServingState(tmp_path)
    assert len(again.events("ml.state.migrated")) == 1
    again.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    assert [r[1] for r in db.execute("PRAGMA table_info(replies)")] == [
        "endpoint", "key", "request_digest", "ts", "status", "body"]
    db.close()


def test_a_state_db_of_a_newer_version_is_refused_with_what_to_do(tmp_path) -> None:
    path = old_state_db(tmp_path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 7")
    db.close()
    with pytest.raises(StateVersionError, match=r"has schema version 7; this lakescore reads versions up to 4\. "
                                                r"Upgrade lakescore, or move the file away") as caught:
        ServingState(tmp_path)
    assert caught.value.code == "state_version_unsupported" and str(path) in str(caught.value)
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM replies").fetchone()[0] == 2  # left as it was
    db.close()


FIRST_START = """
import sys
from lakescore.serving.state.store import ServingState, ensure_token
wait_for_start()
state = ServingState(sys.argv[1])
state.audit("ml.scale", "ep", action="up")
print(ensure_token(sys.argv[1]))
"""


def test_four_first_starts_at_once_share_one_token_and_one_database(tmp_path, at_once) -> None:
    done = at_once(FIRST_START, [str(tmp_path)] * 4)
    assert [code for code, _, _ in done] == [0, 0, 0, 0], [err[-2000:] for _, _, err in done]
    tokens = {out.strip() for _, out, _ in done}
    assert tokens == {(tmp_path / "serving" / "token").read_text().strip()}
    assert len(ServingState(tmp_path).events("ml.scale")) == 4


OTHER_OWNER = """
import os, sys
from lakescore.serving.state.store import ServingState
state = ServingState(sys.argv[1])
state.add_replica("ep-serve-v1-1", endpoint="ep", role="serve", version=1, pid=None, address="a")
print("recorded", flush=True)
sys.stdin.read()  # lives until the test closes its stdin
"""


def test_replica_rows_are_removed_only_by_the_process_that_recorded_them(tmp_path) -> None:
    """Seen: a second endpoint process of the same name, stopping, removed the first's replica rows."""
    other = subprocess.Popen([sys.executable, "-c", OTHER_OWNER, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "recorded"
        state = ServingState(tmp_path)
        state.add_replica("ep-serve-v1-2", endpoint="ep", role="serve", version=1, pid=None, address="b")
        state.remove_replica("ep-serve-v1-1")  # the same id, another owner's row: kept
        state.remove_endpoint_replicas("ep")
        assert [(c["replica_id"], c["address"]) for c in state.resident_replicas()] == [("ep-serve-v1-1", "a")]
    finally:
        other.stdin.close()
        other.wait(timeout=30)
    assert state.resident_replicas() == []  # its owner is gone: forgotten
    state.close()


def test_a_version_2_state_db_gains_the_replica_owner_and_keeps_its_replicas(tmp_path) -> None:
    path = tmp_path / "serving" / "state.db"
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA.replace("key TEXT NOT NULL,", "key TEXT NOT NULL, request_digest TEXT NOT NULL,")
                     .replace("'job-7:1',", "'job-7:1', 'd',").replace("'job-7:2',", "'job-7:2', 'd',"))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    db.execute("INSERT INTO copies VALUES ('old-serve-v1-1', 'old', 'serve', 1, ?, 'x', 1.0)", (live.pid,))
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    try:
        state = ServingState(tmp_path)
        assert [c["replica_id"] for c in state.resident_replicas()] == ["old-serve-v1-1"]  # counted while it lives
        assert state.saved_reply("ep", "job-7:1", request_digest="d", max_age_s=1e10) == (200, b'{"predictions": [1]}')
        assert state.events("ml.state.migrated") == []  # no reply dropped
        state.close()
    finally:
        live.kill()
        live.wait()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    assert [r[1] for r in db.execute("PRAGMA table_info(replicas)")][-1] == "owner_pid"
    db.close()


def test_a_version_3_state_db_names_its_copies_table_and_column_for_replicas_and_keeps_the_rows(tmp_path) -> None:
    """Up to version 3 the table of replicas was ``copies`` keyed by ``copy_id``; version 4 renames
    both in place, so a running endpoint's rows still count against max_warm_replicas."""
    path = tmp_path / "serving" / "state.db"
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA.replace("key TEXT NOT NULL,", "key TEXT NOT NULL, request_digest TEXT NOT NULL,")
                     .replace("started_at REAL NOT NULL)", "started_at REAL NOT NULL, owner_pid INTEGER)")
                     .replace("'job-7:1',", "'job-7:1', 'd',").replace("'job-7:2',", "'job-7:2', 'd',"))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    db.execute("INSERT INTO copies VALUES ('old-serve-v1-1', 'old', 'serve', 1, ?, 'x', 1.0, ?)", (live.pid, live.pid))
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    try:
        state = ServingState(tmp_path)
        assert state.resident_replicas() == [{"replica_id": "old-serve-v1-1", "endpoint": "old", "role": "serve",
                                              "version": 1, "pid": live.pid, "address": "x"}]
        assert state.events("ml.scale")[0].detail == {"action": "up"} and state.events("ml.state.migrated") == []
        state.close()
    finally:
        live.kill()
        live.wait()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"audit", "replicas", "replies"}
    assert [r[1] for r in db.execute("PRAGMA table_info(replicas)")] == [
        "replica_id", "endpoint", "role", "version", "pid", "address", "started_at", "owner_pid"]
    db.close()
