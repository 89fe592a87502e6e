"""Appends that land once, however many writers race them.

Delta never conflicts two blind appends: two ``lakescore monitor`` that read the quality table,
both find a run unmonitored and both append its row, both succeed, and the row is there twice.
Every append lakescore makes outside the guarded prediction publication therefore goes through
one of two Delta-level guarantees (a file lock would only order processes on one machine; two
Databricks jobs run on two):

- :func:`insert_new` / :func:`spark_insert_new`, for tables with a natural key (the quality table,
  the receipts table): a ``MERGE ... WHEN NOT MATCHED THEN INSERT`` on the key. A merge reads the
  table, so of two concurrent merges Delta fails the second ("a concurrent transaction added new
  data", ``ConcurrentAppendException``); it is run again on the new snapshot, finds the rows and
  inserts none. Keys compare null-safe; a key column the table lacks yet (an older table that
  gains it by schema merge) reads as null.
- :func:`append_once` / :func:`spark_append_once`, for a table too large to merge into on every
  write (the serving inference table): an app transaction ``(app_id, version)`` per batch.
  delta-rs records app transactions without enforcing them, so the recorded version is checked on
  one snapshot and the append commits against that same snapshot; Delta fails the second of two
  commits carrying the same app id, and the retry finds the version recorded. Spark Delta skips a
  ``txnAppId``/``txnVersion`` write already recorded by itself.

Each loser of a race is retried (tenacity) up to :data:`ATTEMPTS` times, a little apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from lakescore.locking import exclusive

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")
ATTEMPTS = 30
"""Commits tried per append: each loss means another writer's commit landed in between."""


class _Lost(Exception):
    """This writer's commit lost a race (a concurrent commit, or a concurrent create)."""


def _retrying() -> Any:
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random

    return Retrying(retry=retry_if_exception_type(_Lost), stop=stop_after_attempt(ATTEMPTS),
                    wait=wait_random(0.01, 0.2), reraise=True)


def retry_races(call: Callable[[], T], *, raced: Callable[[Exception], bool] | None = None) -> T:
    """``call()``, run again (up to :data:`ATTEMPTS` times, a little apart) while it fails with an
    exception that ``raced`` says another writer caused (default: a Spark Delta concurrency
    failure, :func:`spark_raced`); the last such failure is raised."""
    said = raced or spark_raced

    def attempt() -> T:
        try:
            return call()
        except Exception as err:
            if said(err):
                raise _Lost(str(err)) from err
            raise

    try:
        for tried in _retrying():
            with tried:
                return attempt()
    except _Lost as lost:  # every attempt lost: the last writer's own error
        raise lost.__cause__ from None  # type: ignore[misc]
    raise AssertionError("unreachable: tenacity reraises the last loss")  # pragma: no cover


def _unique(data: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The first row of ``data`` per key (null keys equal)."""
    import pyarrow as pa

    seen: set[tuple[Any, ...]] = set()
    keep = []
    for i, key in enumerate(zip(*(data[k].to_pylist() for k in keys))):
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return data if len(keep) == data.num_rows else data.take(pa.array(keep, pa.int64()))


def key_predicate(keys: Sequence[str], present: Sequence[str], *, spark: bool = False) -> str:
    """The merge condition of target ``t`` and source ``s`` on ``keys``, null-safe; a key the
    target lacks (``present`` are its columns) matches a null source value only.

    >>> key_predicate(["run_id", "label_table_version"], ["run_id"])
    '(t.`run_id` IS NOT DISTINCT FROM s.`run_id`) AND (s.`label_table_version` IS NULL)'
    """
    same = "<=>" if spark else "IS NOT DISTINCT FROM"
    return " AND ".join(f"(t.`{k}` {same} s.`{k}`)" if k in present else f"(s.`{k}` IS NULL)" for k in keys)


@contextmanager
def _creating(path: str) -> Iterator[bool]:
    """Whether the table at ``path`` is still missing, decided under a file lock held for the block.

    Two delta-rs writers that both create a table both succeed (the second commit becomes version
    1, with a metadata action of its own), so creation is serialised with a lock beside the table
    (:func:`lakescore.locking.exclusive`): delta-rs writes only local tables here (Databricks
    writes through Spark), so processes of one machine are all there is to order.
    """
    from deltalake import DeltaTable

    if DeltaTable.is_deltatable(path):
        yield False
        return
    folder = Path(path)
    with exclusive(folder.parent / f".{folder.name}.create.lock"):
        yield not DeltaTable.is_deltatable(path)


def _raced(err: Exception) -> bool:
    """A delta-rs failure that another writer's commit or create caused."""
    from deltalake.exceptions import CommitFailedError, DeltaError

    return isinstance(err, CommitFailedError) or (isinstance(err, DeltaError) and "already exists" in str(err))


def insert_new(path: str, data: pa.Table, *, keys: Sequence[str], schema_mode: Literal["merge"] | None = None,
               **create: Any) -> int:
    """Append (delta-rs) the rows of ``data`` whose ``keys`` the Delta table at ``path`` lacks.

    Parameters
    ----------
    path : str
        The table's folder; created with ``data`` when missing (once: see :func:`_creating`).
    data : pyarrow.Table of shape (n_rows, n_columns)
        The rows; of rows that repeat a key, the first is kept.
    keys : sequence of str
        The natural key (a row per key in the table, however many writers race).
    schema_mode : {"merge"} or None
        ``merge``: columns the table lacks are added.
    **create
        ``write_deltalake`` options of the first write (``configuration``, ``writer_properties``).

    Returns
    -------
    int
        Rows inserted (0: every key was in the table, maybe put there by a concurrent writer).

    Raises
    ------
    deltalake.exceptions.CommitFailedError
        When :data:`ATTEMPTS` commits in a row lost their race.
    """
    from deltalake import DeltaTable, write_deltalake  # delta-rs, where tables are written

    data = _unique(data, keys)
    if not data.num_rows:
        return 0

    def attempt() -> int:
        with _creating(path) as missing:
            if missing:
                write_deltalake(path, data, mode="error", **create)
                return int(data.num_rows)
        table = DeltaTable(path)
        predicate = key_predicate(keys, [f.name for f in table.schema().fields])
        merger = table.merge(data, predicate, source_alias="s", target_alias="t", merge_schema=schema_mode == "merge",
                             writer_properties=create.get("writer_properties"))
        return int(merger.when_not_matched_insert_all().execute()["num_target_rows_inserted"])

    return retry_races(attempt, raced=_raced)


def append_once(path: str, data: pa.Table, *, app_id: str, version: int,
                schema_mode: Literal["merge"] | None = None, **create: Any) -> bool:
    """Append (delta-rs) ``data`` to the Delta table at ``path`` as app transaction
    ``(app_id, version)``, unless the table records ``app_id`` at ``version`` or later.

    Parameters
    ----------
    path : str
        The table's folder; created with ``data`` when missing.
    data : pyarrow.Table of shape (n_rows, n_columns)
    app_id : str
        The writer's app transaction id (Delta ``txn.appId``).
    version : int
        The batch's number for ``app_id`` (increasing, 0 or more).
    schema_mode : {"merge"} or None
        ``merge``: columns the table lacks are added.
    **create
        ``write_deltalake`` options (``configuration``, ``writer_properties``).

    Returns
    -------
    bool
        True when this call appended the rows, False when the version was recorded already.
    """
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    txn = CommitProperties(app_transactions=[Transaction(app_id, int(version))])

    def attempt() -> bool:
        with _creating(path) as missing:
            if missing:
                write_deltalake(path, data, mode="error", commit_properties=txn, **create)
                return True
        snapshot = DeltaTable(path)
        recorded = snapshot.transaction_version(app_id)
        if recorded is not None and int(recorded) >= version:
            return False
        write_deltalake(snapshot, data, mode="append", schema_mode=schema_mode, commit_properties=txn,  # type: ignore[call-overload]  # deltalake's overloads want writer_properties set; None is its default
                        writer_properties=create.get("writer_properties"))  # the snapshot just checked
        return True

    return retry_races(attempt, raced=_raced)


_SPARK_RACES = ("Concurrent", "DELTA_CONCURRENT", "ALREADY_EXISTS", "already exists", "ProtocolChanged",
                "MetadataChanged", "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_PATH_EXISTS")
"""What Spark Delta's errors say when another writer committed or created first. The last two are
creates (``saveAsTable`` / ``save(path)`` with mode ``error``) that lost to another create: by name,
its data files were written and its log not yet; by path, its log landed after this writer looked
(both seen on Delta 4.x under load)."""


def spark_raced(err: Exception) -> bool:
    """Whether ``err`` is a Spark Delta failure another writer caused (a concurrent commit, a concurrent create)."""
    text = f"{type(err).__name__} {err}"
    return any(word in text for word in _SPARK_RACES)


def _spark_missing(err: Exception) -> bool:
    text = str(err)
    return any(word in text for word in ("DELTA_MISSING_DELTA_TABLE", "TABLE_OR_VIEW_NOT_FOUND", "is not a Delta table",
                                         "DELTA_TABLE_NOT_FOUND", "PATH_NOT_FOUND", "DELTA_TABLE_ONLY_OPERATION"))


def spark_insert_new(frame: Any, *, sql: str, save: Callable[[Any], None], keys: Sequence[str],
                     schema_mode: Literal["merge"] | None = None) -> int:
    """Append (Spark Delta) the rows of ``frame`` whose ``keys`` the table lacks: the Spark
    counterpart of :func:`insert_new` (``MERGE [WITH SCHEMA EVOLUTION] INTO``).

    Parameters
    ----------
    frame : pyspark.sql.DataFrame of shape (n_rows, n_columns)
    sql : str
        How SQL names the table: a quoted three-part name, or ``delta.`<path>```.
    save : callable
        ``save(writer)`` creates the table from a configured ``DataFrameWriter`` when it is missing
        (``saveAsTable(name)`` or ``save(path)``).
    keys, schema_mode
        As :func:`insert_new`.

    Returns
    -------
    int
        Rows inserted (0: every key was in the table).
    """
    spark = frame.sparkSession
    frame = frame.dropDuplicates(list(keys))
    view = f"lakescore_insert_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(view)
    evolve = " WITH SCHEMA EVOLUTION" if schema_mode == "merge" else ""

    def attempt() -> int:
        try:
            present = spark.sql(f"SELECT * FROM {sql} LIMIT 0").columns
        except Exception as err:  # no table yet: create it with the rows
            if not _spark_missing(err):
                raise
            save(frame.write.format("delta").mode("error"))
            return int(frame.count())
        rows = spark.sql(f"MERGE{evolve} INTO {sql} t USING {view} s ON {key_predicate(keys, present, spark=True)} "
                         "WHEN NOT MATCHED THEN INSERT *").collect()
        return int(rows[0]["num_inserted_rows"]) if rows else 0

    try:
        return retry_races(attempt)
    finally:
        spark.catalog.dropTempView(view)


def spark_append_once(frame: Any, *, save: Callable[[Any], None], app_id: str, version: int,
                      schema_mode: Literal["merge"] | None = None) -> None:
    """Append (Spark Delta) ``frame`` as app transaction ``(app_id, version)``
    (``txnAppId``/``txnVersion``): Spark Delta skips a version it recorded already, and fails the
    second of two concurrent commits of one app id, which is tried again (and then skipped).

    Parameters
    ----------
    frame : pyspark.sql.DataFrame of shape (n_rows, n_columns)
    save : callable
        ``save(writer)``: ``saveAsTable(name)`` or ``save(path)``.
    app_id, version, schema_mode
        As :func:`append_once`.
    """
    def attempt() -> None:
        writer = frame.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", int(version))
        save(writer.option("mergeSchema", "true") if schema_mode == "merge" else writer)

    retry_races(attempt)
