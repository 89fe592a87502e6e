"""Table state for the guard: the target's receipts and state read with delta-rs
(:class:`DeltaRsTarget`, :func:`read_target`, :func:`receipts`, :func:`stored_receipts`,
:func:`later_commits`;
:func:`keep_receipts` appends to the receipts table, see :mod:`lakescore.publish.plan` for why it
exists), and the source's state and change feed from what the runtime read (:func:`read_source`
and :func:`split_changes` are pure; :func:`spark_change_kinds` counts a Spark window's change
kinds on the executors). :mod:`lakescore.publish.plan` decides; the writers in
:mod:`lakescore.publish.delta_rs` and :mod:`lakescore.publish.spark_delta` write.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from lakescore.publish.plan import LaterCommit, SourceState, TargetState
from lakescore.publish.receipts import RECEIPTS_SUFFIX, merge_receipts, parse_receipt, receipt_rows

RECEIPTS_SCHEMA = pa.schema([("target_table_id", pa.large_string()), ("table_version", pa.int64()),
                             ("run_id", pa.large_string()), ("committed_at", pa.large_string()),
                             ("receipt", pa.large_string())])


def delta_schema(schema: Any) -> tuple[tuple[str, str], ...]:
    """``(column, type)`` pairs of a ``deltalake.Schema`` or an Arrow schema, with Delta's primitive
    type names (``long``, ``double``, ``string``, ``timestamp``, ...), the names Spark's
    ``DataType.typeName()`` gives too."""
    from deltalake import Schema

    if not isinstance(schema, Schema):
        schema = Schema.from_arrow(schema)
    return tuple((f.name, getattr(f.type, "type", None) or str(f.type)) for f in schema.fields)


def history_receipts(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lakescore receipts of a table history (newest first), each with ``table_version`` and
    ``committed_at`` (UTC ISO 8601)."""
    out = []
    for entry in history:
        receipt = parse_receipt(entry.get("userMetadata"))
        if receipt is not None:
            stamp = datetime.fromtimestamp(entry.get("timestamp", 0) / 1000, tz=UTC)
            out.append({**receipt, "table_version": int(entry["version"]),
                        "committed_at": stamp.isoformat(timespec="seconds")})
    return out


def receipts_path(path: str) -> str:
    """Folder of the receipts table of the prediction table at ``path`` (a sibling folder, i.e. the
    table :func:`lakescore.publish.plan.receipts_table_for` names)."""
    return str(path).rstrip("/") + RECEIPTS_SUFFIX


def stored_receipts(path: str) -> list[dict[str, Any]]:
    """The receipts kept in the receipts table of the prediction table at ``path`` (any order,
    possibly repeated; empty when it does not exist yet)."""
    from deltalake import DeltaTable

    folder = receipts_path(path)
    if not DeltaTable.is_deltatable(folder):
        return []
    return [json.loads(text) for text in DeltaTable(folder).to_pyarrow_table(columns=["receipt"])["receipt"].to_pylist()]


RECEIPT_KEY = ("target_table_id", "table_version")
"""One receipts-table row per prediction-table commit, however many publishers back-fill at once."""


def keep_receipts(path: str, found: Iterable[dict[str, Any]]) -> int:
    """Append to the receipts table every receipt of ``found`` that it does not hold yet, once
    however many writers race (a merge-insert on :data:`RECEIPT_KEY`,
    :func:`lakescore.runtime.appends.insert_new`).

    Parameters
    ----------
    path : str
        Folder of the prediction table.
    found : iterable of dict
        Receipts with ``table_version`` and ``committed_at`` (from the log, or merged).

    Returns
    -------
    int
        Receipts appended (0 when all were kept already, maybe by a concurrent writer).
    """
    from lakescore.runtime.appends import insert_new

    rows = receipt_rows(list(found), stored_receipts(path))
    if not rows:
        return 0
    return insert_new(receipts_path(path), pa.Table.from_pylist(rows, schema=RECEIPTS_SCHEMA), keys=RECEIPT_KEY)


def newest_receipt_version(found: list[dict[str, Any]], table_id: str | None) -> int | None:
    """The table version of the newest receipt of the table ``table_id`` in ``found`` (merged,
    newest first), or None: the version after which :func:`later_commits` are read."""
    return int(found[0]["table_version"]) if found and found[0].get("target_table_id") == table_id else None


def later_commits(path: str, after: int | None, upto: int) -> tuple[LaterCommit, ...]:
    """The commits ``after < version <= upto`` of the Delta table at ``path`` that its log still
    holds, oldest first, each as :func:`lakescore.runtime.delta_log.commit_facts` reads its JSON
    commit file (a few files, read directly: delta-rs shows no ``remove`` actions of a commit).
    ``after=None`` (no receipt) reads nothing."""
    from pyarrow import fs

    from lakescore.runtime.delta_log import commit_facts  # the one parser of a commit's actions

    if after is None:
        return ()
    system, root = fs.FileSystem.from_uri(path) if "://" in path else (fs.LocalFileSystem(), path)
    found = []
    for version in range(after + 1, upto + 1):
        try:
            with system.open_input_stream(f"{root.rstrip('/')}/_delta_log/{version:020d}.json") as stream:
                lines = stream.read().decode().splitlines()
        except FileNotFoundError:  # log cleanup took it (older than delta.logRetentionDuration)
            continue
        found.append(LaterCommit(**commit_facts(version, (json.loads(line) for line in lines if line.strip()))))
    return tuple(found)


def read_target(path: str, name: str, *, app_id: str | None = None) -> tuple[Any, TargetState]:
    """The prediction table and its :class:`TargetState`, read from one snapshot.

    Parameters
    ----------
    path : str
        Folder of the Delta table.
    name : str
        Its three-part name (for messages).
    app_id : str or None
        The job's app transaction id, whose recorded version is read into ``app_txn``.

    Returns
    -------
    (deltalake.DeltaTable or None, TargetState)
        The table loaded at its current version (None when it does not exist) and its state at
        that version: id, schema, whether it has files, its receipts (log and receipts table
        merged), its app transaction version and the commits after its newest receipt
        (:func:`later_commits`). The writer commits against that same table object.
    """
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return None, TargetState(name, exists=False, app_id=app_id)
    table = DeltaTable(path)
    table_id = table.metadata().id
    found = merge_receipts(history_receipts(table.history()), stored_receipts(path), table_id)  # type: ignore[arg-type]  # deltalake types Metadata.id as int; it is the table's id text
    return table, TargetState(name, True, table.version(), table_id, delta_schema(table.schema()),  # type: ignore[arg-type]  # as above
                              bool(table.file_uris()), tuple(found), app_id,
                              table.transaction_version(app_id) if app_id else None,
                              later_commits(path, newest_receipt_version(found, table_id), table.version()))  # type: ignore[arg-type]  # as above


def receipts(path: str) -> list[dict[str, Any]]:
    """Every lakescore receipt of the table at ``path`` (``lakescore receipts``).

    Returns
    -------
    list of dict
        Newest first (:func:`~lakescore.publish.plan.merge_receipts`), each with ``table_version``
        and ``committed_at``; empty when the table does not exist. Receipts of commits older than
        the log (cleaned after ``delta.logRetentionDuration``, 30 days by default) come from the
        receipts table.
    """
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return []
    table = DeltaTable(path)
    return merge_receipts(history_receipts(table.history()), stored_receipts(path), table.metadata().id)  # type: ignore[arg-type]  # as above


class DeltaRsTarget:
    """The publication state of the Delta table at ``path`` read with delta-rs: a
    :class:`lakescore.publish.commit.PublicationTarget` (:func:`read_target`, :func:`receipts`).

    Parameters
    ----------
    path : str
        Folder of the prediction table.
    table : str
        Its three-part name (for messages).
    app_id : str or None
        The job's app transaction id, read into ``TargetState.app_txn``.
    """

    def __init__(self, path: str, *, table: str, app_id: str | None = None) -> None:
        self.path, self.table, self.app_id = str(path), table, app_id
        self.snapshot: Any = None  # the deltalake.DeltaTable the last read() loaded (None: no table)

    def read(self) -> TargetState:
        self.snapshot, state = read_target(self.path, self.table, app_id=self.app_id)
        return state

    def receipts(self) -> list[dict[str, Any]]:
        return receipts(self.path)

    def keep_receipts(self, found: Iterable[dict[str, Any]]) -> int:
        return keep_receipts(self.path, found)


def window_history(version: int, window_from: int | None) -> int | None:
    """How many of the newest commits up to ``version`` an incremental window starting at
    ``window_from`` needs in the log (None: no window, the log is not read)."""
    return version - window_from + 1 if window_from is not None and window_from <= version else None


def read_source(name: str, *, table_id: str, version: int, properties: dict[str, str],
                kept: list[int] | None = None) -> SourceState:
    """The source's :class:`SourceState` at the pinned ``version``.

    Parameters
    ----------
    name : str
        Three-part name (for messages).
    table_id : str
        The source's Delta id.
    properties : dict
        Its table properties (``delta.enableChangeDataFeed``).
    kept : list of int or None
        Versions of the commits the log still holds among the :func:`window_history` newest
        (None: no window). ``oldest_version`` is the smallest; none kept means ``version + 1``.
    """
    oldest = None if kept is None else (min(kept) if kept else version + 1)
    return SourceState(name, table_id, version,
                       str(properties.get("delta.enableChangeDataFeed", "false")).lower() == "true", oldest)


def split_changes(data: pa.Table, columns: list[str]) -> tuple[pd.DataFrame, dict[int, list[str]]]:
    """The inserted rows of a change data feed read, and the other change types per version.

    Parameters
    ----------
    data : pyarrow.Table
        ``columns`` plus ``_change_type`` and ``_commit_version``
        (:meth:`lakescore.runtime.base.Tables.read_changes`).
    columns : list of str
        The columns to keep of the inserted rows.

    Returns
    -------
    (DataFrame of shape (n_inserted, len(columns)), dict of int to list of str)
        The inserted rows (integers as ``Int64``, booleans as ``boolean``, like a table read) and,
        per source version, the non-insert change types found (updates and deletes).
    """
    from lakescore.frames import nullable_pandas_type  # the same dtypes as a table read

    inserted = pc.equal(data["_change_type"], "insert")
    changes: dict[int, list[str]] = {}
    other = data.filter(pc.invert(inserted)).select(["_change_type", "_commit_version"])
    for kind, version in zip(other["_change_type"].to_pylist(), other["_commit_version"].to_pylist()):
        changes.setdefault(int(version), []).append(str(kind))
    return data.filter(inserted).select(columns).to_pandas(types_mapper=nullable_pandas_type), changes


def spark_change_kinds(changes: Any, *, table: str, first: int, last: int) -> tuple[int, dict[int, list[str]]]:
    """Inserted rows and, per source version, the other change types of a Spark change data feed
    read, from one ``groupBy(_change_type, _commit_version).count()`` on the executors (only the
    groups reach the driver): the Spark counterpart of :func:`split_changes`.

    Parameters
    ----------
    changes : pyspark.sql.DataFrame
        With ``_change_type`` and ``_commit_version``
        (:meth:`lakescore.runtime.base.Engines.spark_changes`).
    table, first, last
        The source and the window's versions (for the error).

    Returns
    -------
    (int, dict of int to list of str)
        Rows with ``_change_type = insert``, and per version the non-insert types found.

    Raises
    ------
    ChangeFeedReadError
        Computing the feed failed because its files were vacuumed from under it (a lost window).
    ChangeFeedQueryError
        Computing the feed failed for another reason, named.
    """
    from lakescore.change_feed_errors import change_feed_error
    from lakescore.errors import spark_errors

    try:
        groups = changes.groupBy("_change_type", "_commit_version").count().collect()
    except spark_errors() as err:
        raise change_feed_error(table, first, last, err) from err
    inserted, kinds = 0, {}  # type: ignore[var-annotated]  # str keys, int counts
    for row in groups:
        if row["_change_type"] == "insert":
            inserted += int(row["count"])
        else:
            kinds.setdefault(int(row["_commit_version"]), []).append(str(row["_change_type"]))
    return inserted, kinds
