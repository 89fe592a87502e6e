"""Phase hand-over for jobs in phases (split training: search, refit, assemble, register).

A phase is *claimed* by one runner, which records it *finished* with a small JSON record; the next
phase can be claimed only once the one before it is finished, and only once. Two runners that
finish together and both try to move the job on get one ``True`` between them.

- :class:`SqlitePhaseStore` (local): one row per (job, phase) in ``<home>/phases.db``; the primary
  key makes the claim an ``INSERT ... ON CONFLICT DO NOTHING`` that one writer wins.
- :class:`DeltaPhaseStore` (Databricks): one row per (job, phase) in a Delta table; the claim is a
  ``MERGE ... WHEN NOT MATCHED THEN INSERT``, and Delta's optimistic concurrency fails the second of
  two racing merges (``ConcurrentAppendException``), which is merged again: it finds the claim the
  other made (same job and phase), or makes its own (another job or phase, which a merge of the
  whole table conflicts with too).
"""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lakescore.errors import ConfigError
from lakescore.runtime.appends import retry_races
from lakescore.runtime.sql_text import sql_literal

_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")


def _checked(*names: str) -> None:
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise ConfigError([f"phase store: job and phase names are letters, digits and _ . : @ -; got {bad[0]!r} "
                           "(use the job's run id and the phase's name)"])


@runtime_checkable
class PhaseStore(Protocol):
    """Claims and finish records of a job's phases."""

    def claim(self, job: str, phase: str, *, after: str | None = None) -> bool:
        """Claim ``phase`` of ``job``: True for exactly one caller, and only once ``after`` (the
        phase before it, None for the first) is finished."""
        ...

    def finish(self, job: str, phase: str, record: dict[str, Any]) -> bool:
        """Record the claimed ``phase`` finished with ``record``; False when it was not claimed or
        is finished already (the record is then not changed)."""
        ...

    def phases(self, job: str) -> list[dict[str, Any]]:
        """Every phase of ``job``: ``{phase, state, record, at}`` in claim order."""
        ...


class SqlitePhaseStore:
    """:class:`PhaseStore` in one SQLite file (the local run store)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db:
            db.execute("CREATE TABLE IF NOT EXISTS phases (job TEXT NOT NULL, phase TEXT NOT NULL, state TEXT NOT NULL,"
                       " record TEXT, at TEXT NOT NULL, PRIMARY KEY (job, phase))")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60, isolation_level=None)

    def claim(self, job: str, phase: str, *, after: str | None = None) -> bool:
        _checked(job, phase, *([after] if after else []))
        with closing(self._connect()) as db:
            cursor = db.execute(
                "INSERT INTO phases (job, phase, state, at) SELECT ?, ?, 'claimed', ? "
                "WHERE ? IS NULL OR EXISTS (SELECT 1 FROM phases WHERE job = ? AND phase = ? AND state = 'finished') "
                "ON CONFLICT (job, phase) DO NOTHING", (job, phase, _now(), after, job, after))
            return cursor.rowcount == 1

    def finish(self, job: str, phase: str, record: dict[str, Any]) -> bool:
        _checked(job, phase)
        with closing(self._connect()) as db:
            cursor = db.execute("UPDATE phases SET state = 'finished', record = ?, at = ? "
                                "WHERE job = ? AND phase = ? AND state = 'claimed'",
                                (json.dumps(record, sort_keys=True), _now(), job, phase))
            return cursor.rowcount == 1

    def phases(self, job: str) -> list[dict[str, Any]]:
        with closing(self._connect()) as db:
            rows = db.execute("SELECT phase, state, record, at FROM phases WHERE job = ? ORDER BY rowid", (job,))
            return [{"phase": p, "state": s, "record": json.loads(r) if r else None, "at": a} for p, s, r, a in rows]


class DeltaPhaseStore:
    """:class:`PhaseStore` in a Delta table through Spark SQL.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
    table : str
        What SQL names the table by: ``catalog.schema.lakescore_phases`` on Databricks, or
        ``delta.`/path``` for a path table.
    """

    def __init__(self, spark: Any, table: str) -> None:
        self.spark, self.table = spark, table
        spark.sql(f"CREATE TABLE IF NOT EXISTS {table} (job STRING, phase STRING, state STRING, record STRING, "
                  "at STRING) USING DELTA")

    def _state(self, job: str, phase: str) -> str | None:
        rows = self.spark.sql(f"SELECT state FROM {self.table} WHERE job = '{job}' AND phase = '{phase}'").collect()
        return rows[0]["state"] if rows else None

    def claim(self, job: str, phase: str, *, after: str | None = None) -> bool:
        _checked(job, phase, *([after] if after else []))
        if after is not None and self._state(job, after) != "finished":
            return False
        metrics = retry_races(lambda: self.spark.sql(  # a lost race is merged again: it finds the claim, or makes it
            f"MERGE INTO {self.table} t USING (SELECT '{job}' AS job, '{phase}' AS phase) s "
            "ON t.job = s.job AND t.phase = s.phase WHEN NOT MATCHED THEN INSERT (job, phase, state, record, at) "
            f"VALUES (s.job, s.phase, 'claimed', NULL, '{_now()}')").collect())
        return bool(metrics) and int(metrics[0]["num_inserted_rows"]) == 1

    def finish(self, job: str, phase: str, record: dict[str, Any]) -> bool:
        _checked(job, phase)
        text = sql_literal(json.dumps(record, sort_keys=True))
        metrics = retry_races(lambda: self.spark.sql(  # a lost race is run again: it finds the phase finished, or finishes it
            f"UPDATE {self.table} SET state = 'finished', record = {text}, at = '{_now()}' "
            f"WHERE job = '{job}' AND phase = '{phase}' AND state = 'claimed'").collect())
        return bool(metrics) and int(metrics[0]["num_affected_rows"]) == 1

    def phases(self, job: str) -> list[dict[str, Any]]:
        rows = self.spark.sql(f"SELECT phase, state, record, at FROM {self.table} WHERE job = '{job}' "
                              "ORDER BY at").collect()
        return [{"phase": r["phase"], "state": r["state"], "record": json.loads(r["record"]) if r["record"] else None,
                 "at": r["at"]} for r in rows]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
