"""The Databricks writer: Spark Delta on Unity Catalog tables, carrying out the same decisions.

Every decision and message comes from :mod:`lakescore.publish.plan`; this module only reads the
target's metadata with Spark SQL (``DESCRIBE DETAIL``, ``DESCRIBE HISTORY``) and writes with the
Delta ``DataFrameWriter`` options:

- ``txnAppId`` / ``txnVersion``: the app id of the job and the target version the commit creates
  (Delta skips a write whose ``txnVersion`` it has already recorded for the app id, and two
  writers of one app id racing for the same version conflict);
- ``userMetadata``: the receipt (JSON), which :func:`lakescore.publish.state.history_receipts`
  reads back from ``DESCRIBE HISTORY``;
- ``replaceWhere`` for a snapshot period, ``mergeSchema`` / ``overwriteSchema`` for ``--migrate``.

A write that Delta skipped or that lost a race is detected by looking for its receipt afterwards;
the writer then re-plans, exactly like the local one. Receipts are kept beyond the log in the
receipts table (:func:`lakescore.publish.plan.receipts_table_for`), back-filled before each
attempt and appended after the commit, as the local writer does. Spark SQL cannot read a table's
app transactions, so ``TargetState.app_txn`` stays None here (no cross-check). It cannot run here
(no Delta jars); its option building and state reading are unit-tested.
"""

from __future__ import annotations

import json
from typing import Any

from lakescore.errors import PublishConflictError
from lakescore.publish.delta_rs import period_predicate
from lakescore.publish.plan import (
    Decision,
    PublishRequest,
    TargetState,
    build_receipt,
    check_period_nulls,
    decide,
)
from lakescore.publish.receipts import merge_receipts, receipt_rows, receipts_table_for
from lakescore.publish.state import RECEIPTS_SCHEMA, history_receipts

MAX_ATTEMPTS = 8


def write_options(request: PublishRequest, decision: Decision, receipt: dict[str, Any], *,
                  period_column: str | None = None, period_type: str = "timestamp") -> tuple[str, dict[str, str]]:
    """The ``DataFrameWriter`` save mode and Delta options that carry out ``decision``.

    Parameters
    ----------
    request : PublishRequest
    decision : Decision
        ``append``, ``replace_period`` or ``replace_table``.
    receipt : dict
        The receipt this commit carries (:func:`lakescore.publish.plan.build_receipt`).
    period_column : str or None
        The column a ``replace_period`` decision filters on.
    period_type : str, default "timestamp"
        Its Delta type (``date`` compares on the day).

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
        if not (period_column and request.period_start and request.period_end):
            raise ValueError(f"replacing a period of {request.prediction_table} needs period_column and bounds")
        options["replaceWhere"] = period_predicate(period_column, request.period_start, request.period_end,
                                                   delta_type=period_type, quote="`")
    if decision.schema_mode == "merge":
        options["mergeSchema"] = "true"
    elif decision.schema_mode == "overwrite":
        options["overwriteSchema"] = "true"
    return ("append" if decision.action == "append" else "overwrite"), options


def target_state(name: str, *, table_id: str, schema: list[tuple[str, str]], num_files: int,
                 history: list[dict[str, Any]], stored: list[dict[str, Any]] = ()) -> TargetState:  # type: ignore[assignment]
    """A :class:`TargetState` from ``DESCRIBE DETAIL`` (id, numFiles), the table schema (name,
    ``DataType.typeName()``), ``DESCRIBE HISTORY`` rows (version, timestamp in ms, userMetadata)
    and the receipts table's receipts (``stored``, parsed from its ``receipt`` column).

    The version is the newest in the history (maintenance commits included): the history is
    never empty, since log cleanup keeps the commits after the last checkpoint.
    """
    ordered = sorted(history, key=lambda h: -int(h["version"]))
    version = int(ordered[0]["version"]) if ordered else 0
    return TargetState(name, True, version, table_id, tuple(schema), num_files > 0,
                       tuple(merge_receipts(history_receipts(ordered), list(stored), table_id)))


def stored_receipts(spark: Any, name: str) -> list[dict[str, Any]]:
    """The receipts in the receipts table of ``name`` (empty when it does not exist yet)."""
    table = receipts_table_for(name)
    if not spark.catalog.tableExists(table):
        return []
    return [json.loads(r["receipt"]) for r in spark.table(table).select("receipt").collect()]


def keep_receipts(spark: Any, name: str, found: list[dict[str, Any]]) -> int:
    """Append to the receipts table of ``name`` the receipts of ``found`` it lacks (see
    :func:`lakescore.publish.state.keep_receipts`); returns how many."""
    rows = receipt_rows(found, stored_receipts(spark, name))
    if rows:
        schema = ", ".join(f"{f.name} {'bigint' if f.name == 'table_version' else 'string'}" for f in RECEIPTS_SCHEMA)
        spark.createDataFrame(rows, schema).write.format("delta").mode("append").saveAsTable(receipts_table_for(name))
    return len(rows)


def period_nulls(frame: Any, column: str) -> int:
    """Rows of the Spark DataFrame ``frame`` (the source at its pinned version) whose ``column`` is
    null, for :func:`lakescore.publish.plan.check_period_nulls`."""
    from pyspark.sql import functions as F  # Spark only on this engine

    return int(frame.where(F.col(column).isNull()).count())


def read_target(spark: Any, name: str) -> TargetState:
    """The prediction table's :class:`TargetState`, read with Spark SQL (receipts from its
    history and its receipts table)."""
    if not spark.catalog.tableExists(name):
        return TargetState(name, exists=False)
    detail = spark.sql(f"DESCRIBE DETAIL {name}").first()
    history = [{"version": r["version"], "timestamp": int(r["timestamp"].timestamp() * 1000),
                "userMetadata": r["userMetadata"]}
               for r in spark.sql(f"DESCRIBE HISTORY {name}").select("version", "timestamp", "userMetadata").collect()]
    schema = [(f.name, f.dataType.typeName()) for f in spark.table(name).schema.fields]
    return target_state(name, table_id=detail["id"], schema=schema, num_files=int(detail["numFiles"]),
                        history=history, stored=stored_receipts(spark, name))


def publish(spark: Any, frame: Any, request: PublishRequest, *, allow_empty: bool = False,
            model_change_mode: str = "incremental_append", migrate: bool = False,
            period_column: str | None = None, **facts: Any) -> tuple[Decision, int | None, dict[str, Any] | None]:
    """Commit the Spark DataFrame ``frame`` to the Unity Catalog table of ``request`` exactly once.

    Same contract as :func:`lakescore.publish.delta_rs.publish`.

    Raises
    ------
    NullPeriodError
        A snapshot whose ``period_column`` has null rows; nothing is written.
    PublishConflictError
        Still not committed after 8 attempts.
    """
    if request.mode == "snapshot" and period_column:
        check_period_nulls(request.source_table, request.source_version_to, period_column,
                           period_nulls(frame, period_column))
    last: Exception | None = None
    for _ in range(MAX_ATTEMPTS):
        state = read_target(spark, request.prediction_table)
        if state.exists:
            keep_receipts(spark, request.prediction_table, list(state.receipts))  # back-fill before log cleanup
        decision = decide(request, state, allow_empty=allow_empty, model_change_mode=model_change_mode,
                          migrate=migrate)
        if decision.action == "noop":
            return decision, state.version, decision.replayed
        if decision.action == "create":
            frame.limit(0).write.format("delta").mode("ignore").saveAsTable(request.prediction_table)
            continue
        receipt = build_receipt(request, decision, state, **facts)
        mode, options = write_options(request, decision, receipt, period_column=period_column,
                                      period_type=dict(state.schema).get(period_column or "", "timestamp"))
        try:
            frame.write.format("delta").mode(mode).options(**options).saveAsTable(request.prediction_table)
        except Exception as err:  # py4j wraps io.delta.exceptions.Concurrent*Exception
            if "Concurrent" not in f"{type(err).__name__} {err}":
                raise
            last = err
            continue
        landed = [r for r in read_target(spark, request.prediction_table).receipts
                  if r["run_id"] == request.run_id and r["request_digest"] == request.digest]
        if landed:  # else Delta skipped the write (txnVersion already seen): plan again
            keep_receipts(spark, request.prediction_table, landed[:1])
            return decision, landed[0]["table_version"], landed[0]
    raise PublishConflictError(f"could not commit to {request.prediction_table} after {MAX_ATTEMPTS} attempts "
                               f"({last}); nothing was written by this run, re-run the publish.",
                               table=request.prediction_table)
