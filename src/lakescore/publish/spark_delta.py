"""The Spark Delta writer: the Spark route's engine for :mod:`lakescore.publish.commit`.

The target is a :class:`TableRef`: a storage path (``delta.`<path>```, ``.save(path)``: the local
placement) or a Unity Catalog three-part name (``catalog.schema.table``, ``.saveAsTable(name)``:
managed tables on Databricks cannot be written by path). Both carry the same options and read the
same facts.

:class:`SparkDeltaTarget` reads the target's publication state without any rows: a named table
with Spark SQL (``DESCRIBE HISTORY``, ``DESCRIBE DETAIL``, a ``versionAsOf`` read of the schema,
the receipts table), a path table (the local placement) with delta-rs, which reads the same log
in milliseconds where each ``DESCRIBE`` costs a Spark job. ``lakescore score`` plans against it
and ``lakescore receipts`` / ``monitor`` list its receipts. :class:`SparkDeltaWriter` reads
through one and writes the predictions from the executors with the Delta ``DataFrameWriter``:

- ``txnAppId`` / ``txnVersion``: the job's app id and the target version the commit creates.
  Delta skips a write whose ``txnVersion`` it has already recorded for the app id, and fails one
  that races a commit of the same app id (``ConcurrentTransactionException``): that is how the
  commit is pinned to the snapshot it planned against, for every publisher of the job (delta-rs
  ones included, which record the same app transaction). A commit of *another* app id that lands
  between the read and the write is not detected by Delta Spark, which has no "expected version"
  for a DataFrame write; lakescore gives each job/target/table its own app id;
- ``userMetadata``: the receipt (JSON), read back from ``DESCRIBE HISTORY``;
- ``replaceWhere`` for a snapshot period, ``mergeSchema`` / ``overwriteSchema`` for ``--migrate``.

Whether a commit landed is read from the table's app transaction, which Spark SQL cannot show:
the ``app_txn`` seam reads it. For a path it is delta-rs on the table folder
(:func:`delta_rs_app_txn`); for a name it is :func:`spark_log_app_txn`, Spark reading the
``_delta_log`` at ``DESCRIBE DETAIL``'s location (Connect-safe; see its limits: on a Unity
Catalog managed table the location may refuse path reads, and the app transaction is then
unknown). With the app transaction unknown, a commit is found by its receipt in the history or
the receipts table: Delta itself skips a write whose ``txnVersion`` it recorded, and a commit
whose receipt cannot be read back stops that attempt (:class:`~lakescore.errors.ReceiptUnreadableError`).
Known gap: where the app transaction is unknown AND the engine dropped ``userMetadata``, a later
run plans the next ``txnVersion`` and would append again; only the key check (on append) stands
in the way. Neither happens with path tables or with a readable ``_delta_log``.

Key checks and null counts are aggregates computed on the executors; only counts, key bounds
and at most three example keys reach the driver. A caller whose frame is expensive (a
``spark_udf`` output) passes it staged, or, on the one pass of ``score --publish``, passes the
source read it is scored from as ``key_source`` (or its :class:`KeyCheck`): then the write is the
only pass over the frame. Passes over the rows: the within-run key check (one aggregate of the
new keys, once for every attempt), then per attempt the table's rows only where its file
statistics allow a new key (none for an empty table), and the write. The facts of the rows (count, period nulls and
bounds) are the caller's, observed when the run was staged (``frame_facts``); without them,
period nulls are counted here. A named table costs, besides, one read of the receipts table per
attempt (kept for ``keep_receipts``) and a read-back after the commit that skips the receipts
table and the schema when the history row of the commit carries its receipt; a path table's
reads and receipts-table appends are delta-rs's, milliseconds each.

Receipts live in the receipts table beside the prediction table (``<path>_lakescore_receipts``
or ``<catalog>.<schema>.<table>_lakescore_receipts``), written and read with Spark Delta for a
named table and with delta-rs for a path table; both writers read each other's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from lakescore.config import TABLE_NAME, ModelChangeMode
from lakescore.publish.commit import WITHIN_RUN, CommitLost, Period, RepeatedKeys, publish_once
from lakescore.publish.layout import new_table_properties
from lakescore.publish.plan import Decision, LaterCommit, PublishRequest, TargetState
from lakescore.publish.receipts import RECEIPTS_SUFFIX, merge_receipts, receipt_rows
from lakescore.publish.run import FrameFacts
from lakescore.publish.state import (
    RECEIPT_KEY,
    RECEIPTS_SCHEMA,
    DeltaRsTarget,
    history_receipts,
    newest_receipt_version,
    stored_receipts,
)
from lakescore.runtime.appends import retry_races, spark_insert_new, spark_raced
from lakescore.runtime.sql_text import quoted_name, schema_ddl, sql_literal

AppTxnReader = Callable[[str, str, int], "int | None"]  # (table location, app id, version) -> txn version


def delta_rs_app_txn(location: str, app_id: str, version: int) -> int | None:
    """The app transaction version recorded for ``app_id`` in the Delta table at ``location`` as of
    ``version``, read with delta-rs from the log and its checkpoints (None: none recorded)."""
    from deltalake import DeltaTable  # the log's SetTransaction actions: Spark SQL cannot show them

    return DeltaTable(location, version=version).transaction_version(app_id)


# A location that refuses path reads (Unity Catalog managed storage, missing grants).
PATH_REFUSED = ("UNAUTHORIZED_ACCESS", "PERMISSION_DENIED", "INSUFFICIENT_PERMISSIONS", "LOCATION_OVERLAP",
                "is not allowed", "AccessDenied")


def spark_log_app_txn(spark: Any) -> AppTxnReader:
    """An :data:`AppTxnReader` that reads the ``_delta_log`` at the table's location with ``spark``
    (:func:`lakescore.runtime.delta_log.app_txn_version`): Spark-Connect-safe.

    Where the location refuses path reads (a Unity Catalog managed table on a standard-access or
    serverless session) it answers None, "unknown". What that costs: the loop cannot detect a
    commit of this app whose receipt is in neither the log nor the receipts table
    (``cdf_recovery_required``), a case that needs a process killed between its commit and the
    receipts-table append *and* the log cleaned before the next run (which back-fills receipts).
    It never causes a second write: Delta skips a recorded ``txnVersion``, and a landed commit
    without a readable receipt stops the loop.
    """
    from lakescore.runtime.delta_log import app_txn_version  # base layer: the log reader

    def read(location: str, app_id: str, version: int) -> int | None:
        try:
            return app_txn_version(spark, location, app_id, version)
        except Exception as err:  # pyspark AnalysisException / SparkConnectGrpcException
            if any(code in str(err) for code in PATH_REFUSED):
                return None
            raise

    return read


def spark_later_commits(spark: Any, location: str, history: list[dict[str, Any]], after: int | None,
                        version: int) -> tuple[LaterCommit, ...]:
    """The commits ``after < v <= version`` of the table at ``location``, read from its log with
    Spark (:func:`lakescore.runtime.delta_log.later_commit_facts`; nothing is read when there are
    none). Where the location refuses path reads (:data:`PATH_REFUSED`), from ``history`` alone
    (``DESCRIBE HISTORY``'s operation and mode; ``data_removes`` unknown, so
    :func:`lakescore.publish.plan.removes_rows` judges by the operation)."""
    from lakescore.runtime.delta_log import later_commit_facts  # base layer: the log reader

    if after is None or after >= version:
        return ()
    try:
        facts = later_commit_facts(spark, location, after, version)
    except Exception as err:  # pyspark AnalysisException / SparkConnectGrpcException
        if not any(code in str(err) for code in PATH_REFUSED):
            raise
        facts = [{"version": int(h["version"]), "operation": str(h.get("operation") or "UNKNOWN"),
                  "mode": h.get("mode"), "data_removes": None}
                 for h in sorted(history, key=lambda h: int(h["version"])) if after < int(h["version"]) <= version]
    return tuple(LaterCommit(**f) for f in facts)


def _missing_table(err: Exception) -> bool:
    text = str(err)
    return any(code in text for code in ("DELTA_MISSING_DELTA_TABLE", "PATH_NOT_FOUND", "TABLE_OR_VIEW_NOT_FOUND",
                                         "DELTA_TABLE_NOT_FOUND", "DELTA_TABLE_ONLY_OPERATION"))


@dataclass(frozen=True)
class TableRef:
    """A Delta table addressed by path or by name.

    ``text`` is a three-part name (``catalog.schema.table``: :data:`lakescore.config.TABLE_NAME`)
    or anything else, a storage path (a folder, ``file:/...``, ``s3://...``, ``/Volumes/...``).
    """

    text: str

    @property
    def is_name(self) -> bool:
        """Whether the table is addressed by its catalog name (``saveAsTable``), not its path."""
        return bool(TABLE_NAME.match(self.text))

    @property
    def sql(self) -> str:
        """The table in Spark SQL: ```c`.`s`.`t``` or ``delta.`<path>```."""
        if self.is_name:
            return ".".join(map(quoted_name, self.text.split(".")))
        return f"delta.`{self.text}`"

    @property
    def receipts(self) -> TableRef:
        """The receipts table beside it (``<name or path>_lakescore_receipts``)."""
        return TableRef(self.text.rstrip("/") + RECEIPTS_SUFFIX)

    def read(self, spark: Any, version: int | None = None) -> Any:
        """The table (at ``version``) as a Spark DataFrame, through Delta's reader."""
        reader = spark.read if version is None else spark.read.option("versionAsOf", version)
        return reader.table(self.text) if self.is_name else reader.format("delta").load(self.text)

    def write(self, writer: Any) -> None:
        """Run a configured Delta ``DataFrameWriter``: ``saveAsTable(name)`` or ``save(path)``."""
        if self.is_name:
            writer.saveAsTable(self.text)
        else:
            writer.save(self.text)


def write_options(request: PublishRequest, decision: Decision, receipt: dict[str, Any],
                  period: Period | None = None) -> tuple[str, dict[str, str]]:
    """The ``DataFrameWriter`` save mode and Delta options that carry out ``decision``.

    Parameters
    ----------
    request : PublishRequest
    decision : Decision
        ``append``, ``replace_period`` or ``replace_table``.
    receipt : dict
        The receipt this commit carries (:func:`lakescore.publish.plan.build_receipt`).
    period : Period or None
        The rows a ``replace_period`` decision replaces.

    Returns
    -------
    (str, dict of str to str)
        ``"append"`` or ``"overwrite"``, and the options.

    Raises
    ------
    ValueError
        For a decision that writes nothing (``noop``, ``create``), or a period replacement
        without a period.
    """
    if decision.action not in ("append", "replace_period", "replace_table"):
        raise ValueError(f"decision {decision.action!r} writes nothing; only append and replace_* have options")
    options = {"txnAppId": request.app_id, "txnVersion": str(decision.txn_version),
               "userMetadata": json.dumps(receipt, sort_keys=True)}
    if decision.action == "replace_period":
        if period is None:
            raise ValueError(f"replacing a period of {request.prediction_table} needs period_column and bounds")
        options["replaceWhere"] = period.predicate("`")
    if decision.schema_mode == "merge":
        options["mergeSchema"] = "true"
    elif decision.schema_mode == "overwrite":
        options["overwriteSchema"] = "true"
    return ("append" if decision.action == "append" else "overwrite"), options


def target_state(name: str, *, table_id: str, schema: list[tuple[str, str]], num_files: int,
                 history: list[dict[str, Any]], stored: list[dict[str, Any]] = (),  # type: ignore[assignment]
                 app_id: str | None = None, app_txn: int | None = None,
                 later: Callable[[int | None, int], tuple[LaterCommit, ...]] | None = None) -> TargetState:
    """A :class:`TargetState` from the table id, its schema (name, ``DataType.typeName()``), its
    file count, ``DESCRIBE HISTORY`` rows (version, timestamp in ms, userMetadata), the receipts
    table's receipts (``stored``), the app transaction read for ``app_id``, and ``later``:
    ``(newest receipt's version or None, version) ->`` the commits in between
    (:func:`spark_later_commits`; None: not read).

    The version is the newest in the history (maintenance commits included): the history is
    never empty, since log cleanup keeps the commits after the last checkpoint.
    """
    ordered = sorted(history, key=lambda h: -int(h["version"]))
    version = int(ordered[0]["version"]) if ordered else 0
    found = merge_receipts(history_receipts(ordered), list(stored), table_id)
    return TargetState(name, True, version, table_id, tuple(schema), num_files > 0, tuple(found), app_id, app_txn,
                       later(newest_receipt_version(found, table_id), version) if later else ())


def period_nulls(frame: Any, column: str) -> int:
    """Rows of the Spark DataFrame ``frame`` whose ``column`` is null (counted on the executors),
    for :func:`lakescore.publish.plan.check_period_nulls`."""
    from pyspark.sql import functions as F  # Spark only on this engine

    return int(frame.where(F.col(column).isNull()).count())


def _exact_bound(kind: Any) -> bool:
    """Whether a key bound of Spark type ``kind`` crosses to the driver and back as a literal
    exactly (integers, strings, dates; not timestamps, whose driver value depends on time zones)."""
    from pyspark.sql.types import DateType, IntegralType, StringType

    return isinstance(kind, (IntegralType, StringType, DateType))


KeyRange = tuple[str, Any, Any, bool]  # (key column, smallest, largest, whether a new key is null)
MayHold = Callable[[list[tuple[str, str, Any]]], bool]  # (column, op, value) filters -> may a file match


def _ranges(frame: Any, existing: Any, keys: list[str], totals: Any) -> list[KeyRange]:
    """The bounds of the new rows' keys (``totals``: ``_lo<i>``, ``_hi<i>``, ``_null<i>`` per key)
    that can filter ``existing``: keys of an exact-bound type, the same in both frames."""
    ranges = []
    for i, key in enumerate(keys):
        kind = frame.schema[key].dataType
        if _exact_bound(kind) and existing.schema[key].dataType == kind:
            ranges.append((key, totals[f"_lo{i}"], totals[f"_hi{i}"], bool(totals[f"_null{i}"])))
    return ranges


def _within(existing: Any, ranges: list[KeyRange]) -> Any:
    """The rows of ``existing`` whose keys lie within ``ranges`` (or are null where a new key is):
    a filter Delta answers from its file statistics, so files that cannot hold a new key are
    never read. Keys without a range are not filtered on (a superset: the join decides)."""
    from pyspark.sql import functions as F  # Spark only on this engine

    for key, low, high, nulls in ranges:
        kind = existing.schema[key].dataType
        inside = F.lit(False) if low is None else F.col(key).between(F.lit(low).cast(kind), F.lit(high).cast(kind))
        existing = existing.where(inside | F.col(key).isNull() if nulls else inside)
    return existing


@dataclass(frozen=True)
class KeyCheck:
    """The within-run half of the key check, computed once per publication from the rows' keys
    (:func:`check_keys_within`), before any attempt and before the rows themselves are computed.

    Attributes
    ----------
    keys : pyspark.sql.DataFrame
        The rows whose keys were checked: the predictions, or, on the one pass, the source read
        they are scored from (the keys of the output are the keys of the input rows: the UDF is
        a row-for-row select and a lookup refuses duplicate feature keys before it joins).
    totals : dict
        ``twice`` (keys seen more than once), ``rows`` (rows in all) and, per key column ``i``,
        ``_lo<i>``, ``_hi<i>``, ``_null<i>`` (bounds and null keys); with a period column,
        ``nulls``, ``low``, ``high`` of it (a timestamp's bounds in microseconds since the epoch).
    repeated : RepeatedKeys or None
        Keys repeated ``within this run`` (None: every key once).
    """

    keys: Any
    totals: dict[str, Any]
    repeated: RepeatedKeys | None


def check_keys_within(rows: Any, keys: list[str], *, period_column: str | None = None) -> KeyCheck:
    """The :class:`KeyCheck` of ``rows``: :func:`key_check` built and run at once."""
    return key_check(rows, keys, period_column=period_column)()


def key_check(rows: Any, keys: list[str], *, period_column: str | None = None) -> Callable[[], KeyCheck]:
    """The :class:`KeyCheck` of ``rows``, its query built now and run when the returned function
    is called: one aggregate of their key columns (and the period column) on the executors; one
    row of totals, and up to three repeated keys, reach the driver.

    The query is built on the calling thread as Spark SQL text (a handful of round trips to the
    JVM where a column built call by call takes one per function and name), so that a thread that
    only runs it (:meth:`lakescore.workflows.routes.spark.SparkRoute.check_ahead`) holds Python's
    lock for one call while the JVM plans and runs it.

    One integer key column (the usual record key) is checked by :func:`_word_query`, which groups
    64 keys per row of the shuffle; any other key (compound, text, dates), and a key that
    repeats there (to name the keys), by a ``groupBy`` of the keys themselves.

    Parameters
    ----------
    rows : pyspark.sql.DataFrame of shape (n_rows, >= len(keys))
        The rows about to be committed, or the source read they are scored from.
    keys : list of str
        The record key columns.
    period_column : str, optional
        ``publication.period_column``: its nulls and bounds are counted in the same aggregate
        (nothing when it is not a column of ``rows``).

    Returns
    -------
    callable
        ``() -> KeyCheck``; it runs the query (and, when a key repeats, the group-by that names
        the keys) each time it is called.
    """
    from pyspark.sql.types import IntegralType, TimestampType

    per_period: list[str] = []
    period: list[str] = []
    if period_column and period_column in rows.columns:
        name = quoted_name(period_column)
        value = f"unix_micros({name})" if isinstance(rows.schema[period_column].dataType, TimestampType) else name
        per_period = [f"min({value}) AS _plo", f"max({value}) AS _phi", f"sum(CAST({name} IS NULL AS BIGINT)) AS _pnull"]
        period = ["sum(_pnull) AS nulls", "min(_plo) AS low", "max(_phi) AS high"]
    words = None
    if len(keys) == 1 and isinstance(rows.schema[keys[0]].dataType, IntegralType):
        words = _word_query(rows, keys[0], per_period, period)
    grouped = None if words is not None else _group_query(rows, keys, per_period, period)

    def run() -> KeyCheck:
        if words is not None:
            totals = _word_totals(words.first().asDict())
            if not totals["twice"]:
                return KeyCheck(rows, totals, None)
        per_key, query = grouped or _group_query(rows, keys, per_period, period)  # a repeated word key: named
        totals = query.first().asDict()
        twice = int(totals["twice"] or 0)
        repeated = RepeatedKeys(twice, _examples(per_key.where("_rows > 1"), keys), WITHIN_RUN) if twice else None
        return KeyCheck(rows, totals, repeated)

    return run


def _group_query(rows: Any, keys: list[str], per_period: list[str], period: list[str]) -> tuple[Any, Any]:
    """:func:`key_check`'s ``groupBy`` of the keys themselves (any key columns), and its one-row
    query of the totals: ``twice`` (keys seen more than once), ``rows``, and per key column ``i``
    ``_lo<i>``, ``_hi<i>``, ``_null<i>``, then ``period``'s texts."""
    per_key = rows.groupBy(*_exprs(list(map(quoted_name, keys)))).agg(*_exprs(["count(1) AS _rows", *per_period]))
    bounds = [text for i, key in enumerate(map(quoted_name, keys))
              for text in (f"min({key}) AS _lo{i}", f"max({key}) AS _hi{i}", f"sum(CAST({key} IS NULL AS BIGINT)) AS _null{i}")]
    return per_key, per_key.selectExpr("sum(CAST(_rows > 1 AS BIGINT)) AS twice", "sum(_rows) AS rows", *bounds, *period)


def _exprs(texts: list[str]) -> list[Any]:
    """Spark SQL texts as columns (``F.expr``), one round trip to the JVM each."""
    from pyspark.sql import functions as F  # Spark only on this engine

    return [F.expr(text) for text in texts]


def _word_query(rows: Any, key: str, per_period: list[str], period: list[str]) -> Any:
    """:func:`key_check`'s one-row query of the totals of one integer ``key``, grouped 64 keys to a
    word; :func:`_word_totals` reads its row.

    Each row sets bit ``key & 63`` of the word of group ``key >> 6`` (``bit_or``); the distinct
    keys are the bits set over all words (``bit_count``), one more for the null key when there
    is one. Dense keys (an identity column, a source's row number) fill their words, so the
    shuffle carries one row per 64 keys rather than one per key: on the project's 2-core machine,
    0.40 s against 0.71 s for a million keys (a ``groupBy`` of the key; the scan alone about
    0.22 s). Sparse keys cost what a ``groupBy`` costs. ``bit_or`` and ``bit_count`` are plain
    aggregates, kept in Spark's hash aggregation (``bitmap_construct_agg`` is not: it sorts every
    row).

    Parameters
    ----------
    rows : pyspark.sql.DataFrame
    key : str
        The integer key column.
    per_period, period : list of str
        SQL texts of the period column's aggregates per word (``_plo``, ``_phi``, ``_pnull``)
        and over the words (``low``, ``high``, ``nulls``); empty without a period column.
    """
    name = quoted_name(key)
    words = rows.groupBy(*_exprs([f"shiftright({name}, 6) AS _word"])).agg(*_exprs([
        f"bit_or(shiftleft(1L, CAST({name} & 63 AS INT))) AS _bits", "count(1) AS _rows", f"min({name}) AS _lo",
        f"max({name}) AS _hi", f"sum(CAST({name} IS NULL AS BIGINT)) AS _nulls", *per_period]))
    return words.selectExpr("sum(bit_count(_bits)) AS _keys", "sum(_rows) AS rows", "min(_lo) AS _lo0",
                            "max(_hi) AS _hi0", "sum(_nulls) AS _null0", *period)


def _word_totals(found: dict[str, Any]) -> dict[str, Any]:
    """The totals of :func:`_word_query`'s row ``found``: a key repeats exactly when the rows
    outnumber the distinct keys, so ``twice`` is that surplus (rows, not keys; 0 when no key
    repeats), beside the row's own totals (``_keys`` left out)."""
    totals = dict(found)
    rows_in, nulls = int(totals["rows"] or 0), int(totals["_null0"] or 0)
    distinct = int(totals.pop("_keys") or 0) + min(nulls, 1)
    return {"twice": rows_in - distinct, **totals}


def repeated_keys(frame: Any, existing: Any, *, keys: list[str], table: str,
                  may_hold: MayHold | None = None, checked: KeyCheck | None = None) -> RepeatedKeys | None:
    """Record keys of ``frame`` that repeat within it, else that ``existing`` already holds.

    Computed on the executors; only counts, key bounds and at most three example keys reach the
    driver. Passes over the rows:

    1. one aggregate of the new rows grouped by key (one shuffle of the key columns): keys seen
       twice, and each key column's bounds and whether it has a null key
       (:func:`check_keys_within`; not repeated when ``checked`` gives it);
    2. only when ``existing`` is given and no key repeats: the table's rows within those bounds,
       a filter answered from the files' statistics (by ``may_hold`` when given, else by Delta's
       data skipping in a probe for one row): a window of new, increasing keys reads no file of
       the table. Only when some rows are left, a null-safe semi-join of the new keys with them
       counts the keys already held.

    Parameters
    ----------
    frame : pyspark.sql.DataFrame of shape (n_rows, >= len(keys))
        The rows about to be committed.
    existing : pyspark.sql.DataFrame or None
        The table's rows at the snapshot planned against (None when the commit replaces them, or
        the snapshot has no rows).
    keys : list of str
        The record key columns.
    table : str
        The prediction table, for ``where``.
    may_hold : callable, optional
        ``[(column, op, value), ...] -> bool``: whether any data file of that snapshot may hold a
        row matching all the filters, from file statistics (a path table:
        ``deltalake.DeltaTable.file_uris(file_pruning_predicate=...)``, milliseconds).
    checked : KeyCheck, optional
        Pass 1 already done (once per publication, on ``frame`` or on the source read it is
        scored from): its keys are the ones checked against ``existing``, and ``frame`` is not read.

    Returns
    -------
    RepeatedKeys or None
        Keys repeated ``within this run`` (counted first), else keys ``already in <table>``; None
        when no key repeats.
    """
    from functools import reduce

    from pyspark.sql import functions as F  # Spark only on this engine

    checked = checked or check_keys_within(frame, keys)
    if checked.repeated is not None:
        return checked.repeated
    if existing is None:
        return None
    new = checked.keys
    ranges = _ranges(new, existing, keys, checked.totals)
    if may_hold is not None and ranges and all(low is not None and not nulls for _, low, _, nulls in ranges):
        filters = [(key, op, value) for key, low, high, _ in ranges for op, value in ((">=", low), ("<=", high))]
        if not may_hold(filters):
            return None
    held = _within(existing, ranges)
    if held.isEmpty():
        return None
    held = held.select(*[F.col(k).cast(new.schema[k].dataType).alias(f"_held{i}") for i, k in enumerate(keys)])
    same = reduce(lambda a, b: a & b, [F.col(k).eqNullSafe(F.col(f"_held{i}")) for i, k in enumerate(keys)])
    found = new.select(*keys).join(held, on=same, how="left_semi")  # each new key once: none repeats
    count = int(found.count())
    return RepeatedKeys(count, _examples(found, keys), f"already in {table}") if count else None


def _examples(offending: Any, keys: list[str]) -> tuple[dict[str, Any], ...]:
    """The three smallest keys of ``offending`` (for the message)."""
    return tuple(row.asDict() for row in offending.select(*keys).orderBy(*keys).limit(3).collect())


class SparkDeltaTarget:
    """The publication state of the Delta table ``ref``: the reading half of
    :class:`SparkDeltaWriter`, usable without a frame (``lakescore score`` plans against it,
    ``lakescore receipts`` and ``lakescore monitor`` list its receipts).

    A table addressed by name is read with Spark SQL: one :meth:`read` costs ``DESCRIBE
    HISTORY``, ``DESCRIBE DETAIL``, the schema at the newest version, one read of the receipts
    table and the app transaction read (and, only when commits followed the newest receipt, one
    aggregate of their log files: :func:`spark_later_commits`). The receipts table's rows are kept
    until the next :meth:`read`, so :meth:`keep_receipts` appends what they lack without reading
    them again; a row another publisher appended meanwhile is not repeated (a ``MERGE`` on the
    receipt's key).

    A table addressed by path (the local placement) is read, and its receipts table written,
    with delta-rs (:class:`lakescore.publish.state.DeltaRsTarget`: the same log, the same facts,
    from one snapshot, in milliseconds), as its app transaction always was: ``DESCRIBE DETAIL``
    and ``DESCRIBE HISTORY`` each cost a Spark job of log replay (0.6-2 s on ``local[2]``), and a
    Spark append to the receipts table another. The rows themselves are always written by Spark.

    Parameters
    ----------
    ref : str or TableRef
        The prediction table: its location, or its three-part name (see :class:`TableRef`).
    spark : pyspark.sql.SparkSession
    table : str
        The three-part name (for messages).
    app_id : str or None
        The job's app transaction id, read into ``TargetState.app_txn`` (None: not read).
    app_txn : callable, optional
        ``(location, app_id, version) -> int or None``: the seam that reads the app transaction
        with Spark SQL. Default: :func:`delta_rs_app_txn` for a path, :func:`spark_log_app_txn`
        for a name.
    state_engine : {"auto", "spark"}, default "auto"
        What reads the state: ``auto``, delta-rs for a path (its app transaction included) and
        Spark SQL for a name; ``spark``, Spark SQL for both (storage delta-rs cannot reach, and
        the tests that hold the two readers to the same answers).
    """

    def __init__(self, ref: str | TableRef, spark: Any, *, table: str, app_id: str | None = None,
                 app_txn: AppTxnReader | None = None, state_engine: Literal["auto", "spark"] = "auto") -> None:
        self.ref = ref if isinstance(ref, TableRef) else TableRef(str(ref))
        self.spark, self.table, self.app_id = spark, table, app_id
        self._app_txn = app_txn or (spark_log_app_txn(spark) if self.ref.is_name else delta_rs_app_txn)
        self.version: int | None = None  # the snapshot the last read() was pinned to (None: no table)
        self.has_rows = False  # whether that snapshot has data files
        self._held: list[dict[str, Any]] | None = None  # the receipts table's rows at the last read()
        self._by_path = None if self.ref.is_name or state_engine == "spark" else DeltaRsTarget(
            self.ref.text, table=table, app_id=app_id)  # a path table: read with delta-rs

    def at(self, version: int) -> Any:
        """The table at ``version`` as a Spark DataFrame."""
        return self.ref.read(self.spark, version)

    @property
    def may_hold(self) -> MayHold | None:
        """For a path table read with delta-rs: whether a data file of the snapshot the last
        :meth:`read` pinned may hold rows matching ``(column, op, value)`` filters, from the
        files' statistics (:meth:`deltalake.DeltaTable.file_uris`); None otherwise."""
        snapshot = None if self._by_path is None else self._by_path.snapshot
        if snapshot is None:
            return None
        return lambda filters: bool(snapshot.file_uris(file_pruning_predicate=filters))

    def stored(self) -> list[dict[str, Any]]:
        """The receipts kept in the receipts table (any order, maybe repeated; empty without one)."""
        if self._by_path is not None:
            return stored_receipts(self.ref.text)
        try:
            rows = self.ref.receipts.read(self.spark).select("receipt").collect()
        except Exception as err:  # AnalysisException: no receipts table yet
            if _missing_table(err):
                return []
            raise
        return [json.loads(r["receipt"]) for r in rows]

    def _facts(self) -> tuple[list[dict[str, Any]], Any] | None:
        """``DESCRIBE HISTORY`` rows and ``DESCRIBE DETAIL`` (history first: the detail is of that
        version or a later one), or None when the table does not exist."""
        try:
            history = [r.asDict() for r in self.spark.sql(f"DESCRIBE HISTORY {self.ref.sql}")
                       .selectExpr("version", "unix_millis(timestamp) AS timestamp", "userMetadata", "operation",
                                   "operationParameters['mode'] AS mode").collect()]
            detail = self.spark.sql(f"DESCRIBE DETAIL {self.ref.sql}").first()
        except Exception as err:  # AnalysisException [DELTA_MISSING_DELTA_TABLE] / [TABLE_OR_VIEW_NOT_FOUND]
            if _missing_table(err):
                return None
            raise
        return history, detail

    def read(self) -> TargetState:
        """The table's :class:`TargetState` at its newest version (``exists=False`` when missing).

        ``has_rows`` comes from ``DESCRIBE DETAIL``'s ``numFiles``, read after the history: a
        commit landing in between can only make it say "rows" where the pinned version had none,
        which refuses (never duplicates) an unreceipted table.
        """
        return self._read()

    def read_landed(self, run_id: str, txn_version: int) -> TargetState:
        """The state after a commit, enough for :func:`lakescore.publish.commit.landed` to tell
        whether run ``run_id``'s commit at ``txn_version`` landed: the history, the table id and
        the app transaction. The receipts table is read only when the history lacks that receipt
        (an engine that dropped ``userMetadata``), and the schema not at all."""
        def lacks(history: list[dict[str, Any]]) -> bool:
            return not any(r.get("run_id") == run_id and r.get("txn_version") == txn_version
                           for r in history_receipts(history))

        return self._read(needs_stored=lacks, schema=False)

    def _read(self, *, needs_stored: Callable[[list[dict[str, Any]]], bool] = lambda history: True,
              schema: bool = True) -> TargetState:
        if self._by_path is not None:
            state = self._by_path.read()
            self.version, self.has_rows = (state.version, state.has_rows) if state.exists else (None, False)
            return state
        facts = self._facts()
        if facts is None:
            self.version, self._held = None, []
            return TargetState(self.table, exists=False, app_id=self.app_id)
        history, detail = facts
        version = max(int(h["version"]) for h in history)  # the snapshot every other read is pinned to
        self.version, self.has_rows = version, int(detail["numFiles"] or 0) > 0
        stored: list[dict[str, Any]] = []
        if needs_stored(history):
            stored = self._held = self.stored()
        fields = [(f.name, f.dataType.typeName()) for f in self.at(version).schema.fields] if schema else []
        location = str(detail["location"]) if self.ref.is_name else self.ref.text
        app_txn = self._app_txn(location, self.app_id, version) if self.app_id else None
        return target_state(self.table, table_id=detail["id"], schema=fields, num_files=int(detail["numFiles"] or 0),
                            history=history, stored=stored, app_id=self.app_id, app_txn=app_txn,
                            later=lambda after, upto: spark_later_commits(self.spark, location, history, after, upto))

    def receipts(self) -> list[dict[str, Any]]:
        """Every lakescore receipt of the table, newest first (log and receipts table merged;
        empty when it does not exist): what ``lakescore receipts`` lists."""
        if self._by_path is not None:
            return self._by_path.receipts()
        facts = self._facts()
        if facts is None:
            return []
        history, detail = facts
        ordered = sorted(history, key=lambda h: -int(h["version"]))
        return merge_receipts(history_receipts(ordered), self.stored(), str(detail["id"]))

    def keep_receipts(self, found: list[dict[str, Any]]) -> int:
        """Append to the receipts table the receipts of ``found`` that it lacked at the last
        :meth:`read`, each once however many publishers race (a ``MERGE`` on
        :data:`~lakescore.publish.state.RECEIPT_KEY`); returns how many (0: nothing written)."""
        if self._by_path is not None:
            return self._by_path.keep_receipts(found)
        held = self.stored() if self._held is None else self._held
        rows = receipt_rows(found, held)
        if not rows:
            return 0
        schema = ", ".join(f"{f.name} {'bigint' if f.name == 'table_version' else 'string'}" for f in RECEIPTS_SCHEMA)
        added = spark_insert_new(self.spark.createDataFrame(rows, schema), sql=self.ref.receipts.sql,
                                 save=self.ref.receipts.write, keys=RECEIPT_KEY)  # once, however many race
        self._held = [*held, *(json.loads(r["receipt"]) for r in rows)]
        return added


class SparkDeltaWriter:
    """A :class:`lakescore.publish.commit.Writer` on Spark Delta for the Delta table ``path``: a
    :class:`SparkDeltaTarget` (what it reads) and the rows (what it writes).

    Parameters
    ----------
    path : str or TableRef
        The prediction table: its location (a folder here) or its three-part name (a Unity
        Catalog table on a workspace), see :class:`TableRef`.
    frame : pyspark.sql.DataFrame of shape (n_rows, n_columns)
        The predictions, on the executors (with ``run_id``).
    table : str
        The three-part name (for messages).
    app_id : str
        The job's app transaction id.
    app_txn : callable, optional
        The app transaction reader (see :class:`SparkDeltaTarget`).
    facts : FrameFacts, optional
        The facts of ``frame`` already computed (observed when the run was staged,
        :func:`lakescore.publish.run.observe_facts`): its period nulls are not counted again.
    state_engine : {"auto", "spark"}, default "auto"
        What reads the table's state (see :class:`SparkDeltaTarget`).
    key_source : pyspark.sql.DataFrame, optional
        The rows whose keys are checked instead of ``frame``'s (default ``frame``): on the one
        pass, the source read that ``frame`` scores, so the check runs before the UDF and never
        computes ``frame``. Its within-run check is done once for all attempts.
    checked : KeyCheck, optional
        That within-run check already done (:func:`check_keys_within`), e.g. with the run's facts.
    properties : dict of str to str, optional
        The table properties a missing table is created with
        (:func:`lakescore.publish.layout.new_table_properties`); a table that exists keeps its own.

    A missing table addressed by path is created by the commit of the rows (:meth:`create`): Delta
    writes the table's protocol and schema into the same version 0 as the rows, the app transaction
    and the receipt. An empty table created first costs a metadata commit, and then the app
    transaction of the next write makes Delta compute the new snapshot's state (Delta 4.4 reads app
    transactions only from the state): 0.4 s of a first publication on the project's 2-core
    machine. A table addressed by name is created empty first (Delta drops the receipt of a
    ``saveAsTable`` that creates it).
    """

    def __init__(self, path: str | TableRef, frame: Any, *, table: str, app_id: str,
                 app_txn: AppTxnReader | None = None, facts: FrameFacts | None = None,
                 state_engine: Literal["auto", "spark"] = "auto", key_source: Any = None,
                 checked: KeyCheck | None = None, properties: dict[str, str] | None = None) -> None:
        self.target = SparkDeltaTarget(path, frame.sparkSession, table=table, app_id=app_id, app_txn=app_txn,
                                       state_engine=state_engine)
        self.ref, self.frame, self.table, self.app_id = self.target.ref, frame, table, app_id
        self.properties = dict(properties or {})
        self.facts, self.key_source, self.checked = facts, (key_source if key_source is not None else frame), checked
        self.path, self.spark = self.ref.text, frame.sparkSession

    def read(self) -> TargetState:
        return self.target.read()

    def read_landed(self, run_id: str, txn_version: int) -> TargetState:
        return self.target.read_landed(run_id, txn_version)

    def keep_receipts(self, found: list[dict[str, Any]]) -> int:
        return self.target.keep_receipts(found)

    def create(self) -> bool:
        """A table addressed by path: nothing, its commit creates it with the rows (see the
        class); False.

        A table addressed by name: the empty table with the rows' schema, ``CREATE TABLE IF NOT
        EXISTS <table> (<columns>) USING DELTA`` (:func:`lakescore.runtime.sql_text.schema_ddl`),
        one commit of the table's metadata and no data file, with no Spark job; True. A
        ``saveAsTable`` that creates the table drops the commit's ``userMetadata`` (the receipt).
        Only the rows' schema is read: no action runs on the rows (whose commit, on the one pass,
        observes their counts)."""
        if not self.ref.is_name:
            return False
        statement = f"CREATE TABLE IF NOT EXISTS {self.ref.sql} ({schema_ddl(self.frame.schema)}) USING DELTA"
        if self.properties:
            statement += " TBLPROPERTIES (" + ", ".join(f"{sql_literal(k)} = {sql_literal(v)}"
                                                        for k, v in self.properties.items()) + ")"
        # another publisher creating it at the same time: tried again until theirs is there (then
        # IF NOT EXISTS leaves it as it is), and the next plan is made against it
        retry_races(lambda: self.spark.sql(statement))
        return True

    def period_nulls(self, column: str) -> int:
        if column not in self.frame.columns:
            return 0
        if self.facts is not None and self.facts.has_period:
            return self.facts.period_nulls  # counted when the run was staged: no second pass
        return period_nulls(self.frame, column)

    def repeated_keys(self, keys: list[str], *, against_table: bool) -> RepeatedKeys | None:
        """As :func:`repeated_keys` of the key source's keys (checked within the run once, for
        every attempt); the table is not read when the snapshot has no data files."""
        if self.checked is None:
            self.checked = check_keys_within(self.key_source, keys)
        version = self.target.version
        held = against_table and version is not None and self.target.has_rows
        return repeated_keys(self.frame, self.target.at(version) if held else None, keys=keys, table=self.table,  # type: ignore[arg-type]  # held implies a version
                             may_hold=self.target.may_hold, checked=self.checked)

    def stage(self, decision: Decision) -> None:
        """Nothing: Spark writes the files and commits them in one ``save``."""
        return None

    def commit(self, staged: None, request: PublishRequest, decision: Decision, receipt: dict[str, Any],
               period: Period | None) -> None:
        mode, options = write_options(request, decision, receipt, period)
        if decision.read_version is None:  # this commit creates the table (see create)
            options.update(self.properties)
        try:
            self.ref.write(self.frame.write.format("delta").mode(mode).options(**options))
        except Exception as err:
            if spark_raced(err):
                raise CommitLost(str(err).splitlines()[0][:300]) from err
            raise

    def discard(self, staged: None) -> None:
        """Nothing to do from here: the files of a Spark write that lost the race are not known to
        the driver; they are never referenced, and VACUUM removes them."""


def publish(path: str | TableRef, frame: Any, request: PublishRequest, *, allow_empty: bool = False,
            model_change_mode: ModelChangeMode = "incremental_append", migrate: bool = False,
            period_column: str | None = None, keys: list[str] | None = None,
            app_txn: AppTxnReader | None = None, frame_facts: FrameFacts | None = None,
            key_source: Any = None, checked: KeyCheck | None = None,
            **facts: Any) -> tuple[Decision, int | None, dict[str, Any] | None]:
    """Commit the Spark DataFrame ``frame`` to the Delta table ``path`` exactly once for ``request``.

    The twin of :func:`lakescore.publish.delta_rs.publish`: builds a :class:`SparkDeltaWriter`
    and runs :func:`lakescore.publish.commit.publish_once`. A table it creates keeps file
    statistics on ``keys``, ``period_column``, ``run_id`` and ``model_version`` only
    (:mod:`lakescore.publish.layout`).

    Parameters
    ----------
    path : str or TableRef
        The prediction table: its location, or its three-part name (what
        ``Tables.table_ref(name)`` of the runtime gives: the location locally, the name on
        Databricks).
    frame : pyspark.sql.DataFrame of shape (request.rows, n_columns)
        The predictions, with ``run_id``.
    request : PublishRequest
    app_txn : callable, optional
        The app transaction reader (default: see :class:`SparkDeltaWriter`).
    frame_facts : FrameFacts, optional
        The facts of ``frame`` already computed (see :class:`SparkDeltaWriter`).
    key_source, checked : optional
        Whose keys are checked, and that check done (see :class:`SparkDeltaWriter`).
    allow_empty, model_change_mode, migrate, period_column, keys, **facts
        As :func:`~lakescore.publish.commit.publish_once`.

    Returns
    -------
    (Decision, int or None, dict or None)
        As :func:`~lakescore.publish.commit.publish_once`.

    Raises
    ------
    NullPeriodError, PublishConflictError, ReceiptUnreadableError, PublishError
        As :func:`~lakescore.publish.commit.publish_once`; nothing is written.
    """
    writer = SparkDeltaWriter(path, frame, table=request.prediction_table, app_id=request.app_id, app_txn=app_txn,
                              facts=frame_facts, key_source=key_source, checked=checked,
                              properties=new_table_properties(frame.columns, keys=keys or (), period_column=period_column))
    return publish_once(writer, request, allow_empty=allow_empty, model_change_mode=model_change_mode,
                        migrate=migrate, period_column=period_column, keys=keys, **facts)
