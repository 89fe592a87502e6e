"""The delta-rs writer: the single-node route's engine for :mod:`lakescore.publish.commit`.

:class:`DeltaRsWriter` reads the target from one snapshot (:class:`lakescore.publish.state.DeltaRsTarget`)
and commits against that same snapshot with ``max_commit_retries=0``: the commit lands at exactly
the version after the one it planned against, or raises :class:`~lakescore.publish.commit.CommitLost`
and the loop plans again.

Appends and full replacements are two steps: the Parquet files are written first
(:meth:`DeltaRsWriter.stage`), then one ``create_write_transaction`` commits them. A process
killed in between leaves only unreferenced files (``vacuum`` removes them) and an unchanged table,
so the re-run publishes each row once. Replacing a period (``predicate`` overwrite) and schema
migrations go through ``write_deltalake``. Key checks run on Arrow, in the process that holds the
rows.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakescore.publish.commit import WITHIN_RUN, CommitLost, Period, RepeatedKeys, publish_once
from lakescore.publish.layout import named_stats_columns, new_table_properties
from lakescore.publish.plan import Decision, PublishRequest, TargetState
from lakescore.publish.state import DeltaRsTarget

if TYPE_CHECKING:  # annotations only
    from lakescore.config import ModelChangeMode

ROWS_PER_FILE = 1_000_000


def to_arrow(frame: Any, *, run_id: str) -> pa.Table:
    """The predictions as an Arrow table with a constant ``run_id`` column, :func:`normalize`-d.

    ``run_id`` is built from buffers rather than a repeated Python string (a 336,776-row column
    would otherwise cost as much as converting the rest of the frame).
    """
    import numpy as np

    data = pa.Table.from_pandas(frame, preserve_index=False)
    text = run_id.encode()
    offsets = np.arange(data.num_rows + 1, dtype="int64") * len(text)
    column = pa.LargeStringArray.from_buffers(data.num_rows, pa.py_buffer(offsets), pa.py_buffer(text * data.num_rows))
    return normalize(data.append_column("run_id", column))


def normalize(data: pa.Table) -> pa.Table:
    """Arrow types Delta readers take everywhere: microsecond timestamps, no ``string_view``, no
    pandas schema metadata (nanosecond timestamps would switch on the ``timestampNanos`` feature)."""
    fields = []
    for f in data.schema:
        kind = f.type
        if pa.types.is_timestamp(kind) and kind.unit == "ns":
            kind = pa.timestamp("us", tz=kind.tz)
        elif pa.types.is_string_view(kind):
            kind = pa.large_string()
        fields.append(pa.field(f.name, kind, f.nullable))
    return data.cast(pa.schema(fields)).replace_schema_metadata(None)


def _stat(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        text = value.isoformat()
        return text.replace("+00:00", "Z") if "T" in text else text
    return value


def file_stats(data: pa.Table, columns: frozenset[str] | None = None) -> str:
    """Delta ``stats`` JSON of one file: numRecords, and nullCount/minValues/maxValues for numbers,
    dates, timestamps and strings up to 32 characters (longer ones get no bounds), for every
    column or only those of ``columns`` (the table's ``delta.dataSkippingStatsColumns``,
    :func:`lakescore.publish.layout.named_stats_columns`)."""
    stats: dict[str, Any] = {"numRecords": data.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name, column in zip(data.column_names, data.columns):
        if columns is not None and name not in columns:
            continue
        kind = column.type
        stats["nullCount"][name] = column.null_count
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind)
                or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            continue
        if pa.types.is_floating(kind) and pc.any(pc.is_nan(column)).as_py():
            continue
        bounds = pc.min_max(column).as_py()
        low, high = bounds["min"], bounds["max"]
        if low is None or (isinstance(high, str) and len(high) > 32):
            continue
        stats["minValues"][name], stats["maxValues"][name] = _stat(low), _stat(high)
    return json.dumps(stats)


def write_files(path: str, data: pa.Table, *, rows_per_file: int = ROWS_PER_FILE,
                stats_on: frozenset[str] | None = None) -> list[Any]:
    """Write ``data`` as Parquet files in the table folder, not committed; return their AddActions.

    Dictionary encoding is used for text columns only (trying it on every float column and
    falling back costs more than half the write).

    Parameters
    ----------
    rows_per_file : int, default 1000000
        Rows per file.
    stats_on : frozenset of str, optional
        The only columns given file statistics (:func:`file_stats`); default every column.
    """
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    text = [f.name for f in data.schema if pa.types.is_large_string(f.type) or pa.types.is_string(f.type)]
    actions = []
    for part, start in enumerate(range(0, data.num_rows, rows_per_file)):
        chunk = data.slice(start, rows_per_file)
        name = f"part-{part:05d}-{uuid.uuid4()}-c000.snappy.parquet"
        target = Path(path) / name
        pq.write_table(chunk, target, compression="snappy", use_dictionary=text)
        info = target.stat()
        actions.append(AddAction(name, info.st_size, {}, int(info.st_mtime * 1000), True, file_stats(chunk, stats_on)))
    return actions




def repeated_keys(new: pa.Table, existing: pa.Table | None, *, keys: list[str], table: str,
                  within: bool = True) -> RepeatedKeys | None:
    """Record keys of ``new`` that repeat within it, else (when ``existing`` is given) that
    ``existing`` already holds, counted with Arrow.

    Parameters
    ----------
    new : pyarrow.Table of shape (n_rows, >= len(keys))
        The rows about to be committed.
    existing : pyarrow.Table or None
        The key columns already in the table (None when the commit replaces them).
    table : str
        The prediction table, for ``where``.
    within : bool, default True
        Count the keys repeated within ``new`` first; False when the caller already did.

    Returns
    -------
    RepeatedKeys or None
        None when no key repeats; else the count of distinct repeated keys and the three smallest.
    """
    order = [(k, "ascending") for k in keys]
    new = new.select(keys)
    repeated, where = new.slice(0, 0), WITHIN_RUN
    if within:
        counts = new.group_by(keys).aggregate([([], "count_all")])
        repeated = counts.filter(pc.greater(counts["count_all"], 1)).select(keys)
    if repeated.num_rows == 0 and existing is not None and existing.num_rows and new.num_rows:
        repeated = new.join(existing.select(keys).cast(new.schema), keys=keys, join_type="left semi")
        where = f"already in {table}"
    if repeated.num_rows == 0:
        return None
    return RepeatedKeys(repeated.num_rows, tuple(repeated.sort_by(order).slice(0, 3).to_pylist()), where)


class DeltaRsWriter:
    """A :class:`lakescore.publish.commit.Writer` on delta-rs for the Delta table at ``path``.

    Parameters
    ----------
    path : str
        Folder of the prediction table.
    data : pyarrow.Table of shape (n_rows, n_columns)
        The predictions, already :func:`normalize`-d.
    table : str
        Its three-part name (for messages).
    app_id : str
        The job's app transaction id, read into ``TargetState.app_txn``.
    properties : dict of str to str, optional
        The table properties a missing table is created with
        (:func:`lakescore.publish.layout.new_table_properties`); a table that exists keeps its own,
        and its files get statistics on the columns it names.
    """

    def __init__(self, path: str, data: pa.Table, *, table: str, app_id: str,
                 properties: dict[str, str] | None = None) -> None:
        self.path, self.data, self.table, self.app_id = str(path), data, table, app_id
        self.properties = dict(properties or {})
        self.target = DeltaRsTarget(self.path, table=table, app_id=app_id)
        self._own_keys_unique = False  # set once a key check found no key repeated within the rows

    @property
    def _snapshot(self) -> Any:
        """The table as the last :meth:`read` loaded it: the commit is pinned to it."""
        return self.target.snapshot

    def read(self) -> TargetState:
        return self.target.read()

    def read_landed(self, run_id: str, txn_version: int) -> TargetState:
        """A whole :meth:`read`: delta-rs reads the log and the receipts table in milliseconds."""
        return self.target.read()

    def keep_receipts(self, found: list[dict[str, Any]]) -> int:
        return self.target.keep_receipts(found)

    def create(self) -> bool:
        """Create the empty table (one metadata commit, milliseconds); True."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        Path(self.path).mkdir(parents=True, exist_ok=True)
        try:
            DeltaTable.create(self.path, self.data.schema, mode="error", configuration=self.properties or None)
        except DeltaError as err:  # another publisher created it first: plan against theirs
            if "already exists" not in str(err):
                raise
        return True

    def period_nulls(self, column: str) -> int:
        return self.data[column].null_count if column in self.data.column_names else 0

    def repeated_keys(self, keys: list[str], *, against_table: bool) -> RepeatedKeys | None:
        """As :func:`repeated_keys`; the rows' own keys are counted once for every attempt (a
        first publication checks them before it creates the table, then plans again)."""
        existing = self._snapshot.to_pyarrow_table(columns=keys) if against_table else None
        found = repeated_keys(self.data, existing, keys=keys, table=self.table, within=not self._own_keys_unique)
        self._own_keys_unique = found is None or found.where != WITHIN_RUN
        return found

    def stage(self, decision: Decision) -> list[Any] | None:
        """Write the Parquet files of an append or a full replacement (not committed); None for a
        period replacement or a schema migration, which ``write_deltalake`` writes in the commit."""
        if decision.schema_mode is None and decision.action in ("append", "replace_table"):
            return write_files(self.path, self.data,
                               stats_on=named_stats_columns(self._snapshot.metadata().configuration))
        return None

    def commit(self, staged: list[Any] | None, request: PublishRequest, decision: Decision,
               receipt: dict[str, Any], period: Period | None) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError

        properties = CommitProperties(
            custom_metadata={"userMetadata": json.dumps(receipt, sort_keys=True)}, max_commit_retries=0,
            app_transactions=[Transaction(request.app_id, decision.txn_version)])
        mode = "append" if decision.action == "append" else "overwrite"
        try:
            if staged is not None:
                self._snapshot.create_write_transaction(staged, mode, self._snapshot.schema(),
                                                        commit_properties=properties)
            else:
                write_deltalake(self._snapshot, self.data, mode=mode, schema_mode=decision.schema_mode,  # type: ignore[call-overload]  # mode is 'append' or 'overwrite'
                                predicate=period.predicate('"') if period else None, commit_properties=properties)
        except CommitFailedError as err:  # another commit landed on top of the snapshot
            raise CommitLost(str(err)) from err

    def discard(self, staged: list[Any] | None) -> None:
        for action in staged or []:
            (Path(self.path) / action.path).unlink(missing_ok=True)


def publish(path: str, data: pa.Table, request: PublishRequest, *, allow_empty: bool = False,
            model_change_mode: ModelChangeMode = "incremental_append", migrate: bool = False,
            period_column: str | None = None, keys: list[str] | None = None,
            **facts: Any) -> tuple[Decision, int | None, dict[str, Any] | None]:
    """Commit ``data`` to the Delta table at ``path`` exactly once for ``request``, with delta-rs.

    Builds a :class:`DeltaRsWriter` and runs :func:`lakescore.publish.commit.publish_once`. A
    table it creates keeps file statistics on ``keys``, ``period_column``, ``run_id`` and
    ``model_version`` only (:mod:`lakescore.publish.layout`).

    Parameters
    ----------
    path : str
        Folder of the prediction table.
    data : pyarrow.Table of shape (request.rows, n_columns)
        The predictions, already :func:`normalize`-d.
    request : PublishRequest
    allow_empty, model_change_mode, migrate, period_column, keys, **facts
        As :func:`~lakescore.publish.commit.publish_once`.

    Returns
    -------
    (Decision, int or None, dict or None)
        The decision, the table version after it, and the receipt (see
        :func:`~lakescore.publish.commit.publish_once`).

    Raises
    ------
    PublishConflictError, ReceiptUnreadableError, PublishError
        As :func:`~lakescore.publish.commit.publish_once`.
    """
    writer = DeltaRsWriter(path, data, table=request.prediction_table, app_id=request.app_id,
                           properties=new_table_properties(data.column_names, keys=keys or (),
                                                           period_column=period_column))
    return publish_once(writer, request, allow_empty=allow_empty, model_change_mode=model_change_mode,
                        migrate=migrate, period_column=period_column, keys=keys, **facts)
