"""The local writer: delta-rs, with the guard applied to the snapshot it commits against.

Each attempt loads the prediction table, reads its receipts, decides with
:func:`lakescore.publish.plan.decide`, and commits against that same snapshot with
``max_commit_retries=0``: the commit lands at exactly the version after the one it planned
against, or fails. On ``CommitFailedError`` (another commit landed first) the writer reloads and
decides again, so a racing replay becomes a no-op and a stale plan an error, never a duplicate.

Appends and full replacements are two steps: the Parquet files are written first, then one
``create_write_transaction`` commits them. A process killed in between leaves only unreferenced
files (``vacuum`` removes them) and an unchanged table, so the re-run publishes each row once.
Replacing a period (``predicate`` overwrite) and schema migrations go through ``write_deltalake``.

After the commit its receipt is appended to the receipts table, and every attempt first
back-fills that table from the log, so a receipt survives the maintenance that erases the log
(OPTIMIZE, VACUUM, checkpoints, log cleanup); see :mod:`lakescore.publish.plan`.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakescore.errors import PublishConflictError
from lakescore.publish.plan import Decision, PublishRequest, TargetState, build_receipt, check_keys, decide
from lakescore.publish.state import history_receipts, keep_receipts, read_target

MAX_ATTEMPTS = 8
ROWS_PER_FILE = 1_000_000
FAULT_ENV = "LAKESCORE_FAULT_PAUSE"  # fault tests only: "<before_commit|after_commit>:<marker path>"


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


def period_predicate(column: str, start: str, end: str, *, delta_type: str, quote: str = '"') -> str:
    """SQL predicate of ``start <= column < end`` (dates compare on their day)."""
    if "date" in delta_type and "timestamp" not in delta_type:
        start, end = start[:10], end[:10]
    return f"{quote}{column}{quote} >= '{start}' AND {quote}{column}{quote} < '{end}'"


def _stat(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        text = value.isoformat()
        return text.replace("+00:00", "Z") if "T" in text else text
    return value


def file_stats(data: pa.Table) -> str:
    """Delta ``stats`` JSON of one file: numRecords, and nullCount/minValues/maxValues for numbers,
    dates, timestamps and strings up to 32 characters (longer ones get no bounds)."""
    stats: dict[str, Any] = {"numRecords": data.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name, column in zip(data.column_names, data.columns):
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


def write_files(path: str, data: pa.Table, *, rows_per_file: int = ROWS_PER_FILE) -> list[Any]:
    """Write ``data`` as Parquet files in the table folder, not committed; return their AddActions.

    Dictionary encoding is used for text columns only (trying it on every float column and
    falling back costs more than half the write).

    Parameters
    ----------
    rows_per_file : int, default 1000000
        Rows per file.
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
        actions.append(AddAction(name, info.st_size, {}, int(info.st_mtime * 1000), True, file_stats(chunk)))
    return actions


def fault_pause(point: str) -> None:
    """Fault-injection hook for the crash and race tests; does nothing unless ``LAKESCORE_FAULT_PAUSE``
    is ``<point>:<marker>``. Then it writes the marker (with the pid) and waits, up to 120 s, for
    ``<marker>.go`` to appear: the test kills the process meanwhile, or releases it."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith(f"{point}:"):
        return
    marker = Path(spec.split(":", 1)[1])
    marker.write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not marker.with_name(marker.name + ".go").exists():
        time.sleep(0.01)


def _create(path: str, data: pa.Table) -> None:
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    Path(path).mkdir(parents=True, exist_ok=True)
    try:
        DeltaTable.create(path, data.schema, mode="error")
    except DeltaError as err:  # another publisher created it first: plan against theirs
        if "already exists" not in str(err):
            raise


def _commit(table: Any, path: str, data: pa.Table, decision: Decision, properties: Any,
            predicate: str | None) -> None:
    from deltalake import write_deltalake

    if decision.schema_mode is None and decision.action in ("append", "replace_table"):
        actions = write_files(path, data)
        fault_pause("before_commit")
        mode = "append" if decision.action == "append" else "overwrite"
        try:
            table.create_write_transaction(actions, mode, table.schema(), commit_properties=properties)
        except Exception:
            for action in actions:  # never committed: nobody else can reference them
                (Path(path) / action.path).unlink(missing_ok=True)
            raise
        return
    mode = "append" if decision.action == "append" else "overwrite"
    write_deltalake(table, data, mode=mode, schema_mode=decision.schema_mode,
                    predicate=predicate if decision.action == "replace_period" else None,
                    commit_properties=properties)


def publish(path: str, data: pa.Table, request: PublishRequest, *, allow_empty: bool = False,
            model_change_mode: str = "incremental_append", migrate: bool = False,
            period_column: str | None = None, keys: list[str] | None = None,
            **facts: Any) -> tuple[Decision, int | None, dict[str, Any] | None]:
    """Commit ``data`` to the Delta table at ``path`` exactly once for ``request``.

    Parameters
    ----------
    data : pyarrow.Table of shape (request.rows, n_columns)
        The predictions, already :func:`normalize`-d.
    request : PublishRequest
    allow_empty, model_change_mode, migrate
        Passed to :func:`lakescore.publish.plan.decide`.
    period_column : str or None
        The column ``replace_period`` filters on.
    keys : list of str, optional
        Record keys: an append is refused when it would store a key the snapshot already holds
        (:func:`~lakescore.publish.plan.check_keys`).
    **facts
        Run facts for the receipt (certificate_sha256, rows_in, predicted, excluded, ...).

    Returns
    -------
    (Decision, int or None, dict or None)
        The decision, the table version after it (unchanged for a no-op), and the receipt
        committed (for a replay: the receipt found).

    Raises
    ------
    PublishConflictError
        Still losing the commit race after 8 attempts (the table is unchanged by this writer).
    PublishError
        Any refusal of :func:`~lakescore.publish.plan.decide`.
    """
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError

    last_error: Exception | None = None
    for attempt in range(MAX_ATTEMPTS):
        table, state = read_target(path, request.prediction_table, app_id=request.app_id)
        if state.exists:
            keep_receipts(path, state.receipts)  # back-fill: the log may be cleaned before the next run
        decision = decide(request, state, allow_empty=allow_empty, model_change_mode=model_change_mode,
                          migrate=migrate)
        if decision.action == "noop":
            return decision, state.version, decision.replayed
        if decision.action == "create":
            _create(path, data)
            continue
        if keys:
            existing = table.to_pyarrow_table(columns=keys).to_pandas() if decision.action == "append" else None
            check_keys(data.select(keys).to_pandas(), existing, keys=keys, table=request.prediction_table)
        receipt = build_receipt(request, decision, state, **facts)
        properties = CommitProperties(
            custom_metadata={"userMetadata": json.dumps(receipt, sort_keys=True)}, max_commit_retries=0,
            app_transactions=[Transaction(request.app_id, decision.txn_version)])
        try:
            _commit(table, path, data, decision, properties, _predicate(request, state, period_column))
        except CommitFailedError as err:  # another commit landed on top of read_version: plan again
            last_error = err
            time.sleep(0.05 * attempt)
            continue
        fault_pause("after_commit")
        _record(path, request, decision)
        return decision, decision.txn_version, {**receipt, "table_version": decision.txn_version}
    raise PublishConflictError(
        f"could not commit to {request.prediction_table} after {MAX_ATTEMPTS} attempts: other commits kept "
        f"landing first ({last_error}). Nothing was written by this run; re-run the publish, it is safe "
        "to repeat.", table=request.prediction_table)


def _record(path: str, request: PublishRequest, decision: Decision) -> None:
    """Append the receipt of the commit just made, read back from the log with its timestamp (a
    receipt not found among the newest commits is back-filled by the next publication)."""
    from deltalake import DeltaTable

    logged = history_receipts(DeltaTable(path).history(limit=16))
    keep_receipts(path, [r for r in logged if (r["table_version"], r["run_id"]) == (decision.txn_version, request.run_id)])


def _predicate(request: PublishRequest, state: TargetState, column: str | None) -> str | None:
    if request.period_start is None or request.period_end is None or column is None:
        return None
    return period_predicate(column, request.period_start, request.period_end,
                            delta_type=dict(state.schema).get(column, "timestamp"))
