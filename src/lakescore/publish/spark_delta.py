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
the writer then re-plans, exactly like the local one. It cannot run here (no Delta jars); its
option building is unit-tested.
"""

from __future__ import annotations

import json
from typing import Any

from lakescore.errors import PublishConflictError
from lakescore.publish.delta_rs import period_predicate
from lakescore.publish.plan import Decision, PublishRequest, TargetState, build_receipt, decide
from lakescore.publish.state import history_receipts

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
                 history: list[dict[str, Any]]) -> TargetState:
    """A :class:`TargetState` from ``DESCRIBE DETAIL`` (id, numFiles), the table schema (name,
    ``DataType.typeName()``) and ``DESCRIBE HISTORY`` rows (version, timestamp in ms, userMetadata)."""
    ordered = sorted(history, key=lambda h: -int(h["version"]))
    version = int(ordered[0]["version"]) if ordered else 0
    return TargetState(name, True, version, table_id, tuple(schema), num_files > 0,
                       tuple(history_receipts(ordered)))


def read_target(spark: Any, name: str) -> TargetState:
    """The prediction table's :class:`TargetState`, read with Spark SQL."""
    if not spark.catalog.tableExists(name):
        return TargetState(name, exists=False)
    detail = spark.sql(f"DESCRIBE DETAIL {name}").first()
    history = [{"version": r["version"], "timestamp": int(r["timestamp"].timestamp() * 1000),
                "userMetadata": r["userMetadata"]}
               for r in spark.sql(f"DESCRIBE HISTORY {name}").select("version", "timestamp", "userMetadata").collect()]
    schema = [(f.name, f.dataType.typeName()) for f in spark.table(name).schema.fields]
    return target_state(name, table_id=detail["id"], schema=schema, num_files=int(detail["numFiles"]),
                        history=history)


def publish(spark: Any, frame: Any, request: PublishRequest, *, allow_empty: bool = False,
            model_change_mode: str = "incremental_append", migrate: bool = False,
            period_column: str | None = None, **facts: Any) -> tuple[Decision, int | None, dict[str, Any] | None]:
    """Commit the Spark DataFrame ``frame`` to the Unity Catalog table of ``request`` exactly once.

    Same contract as :func:`lakescore.publish.delta_rs.publish`.

    Raises
    ------
    PublishConflictError
        Still not committed after 8 attempts.
    """
    last: Exception | None = None
    for _ in range(MAX_ATTEMPTS):
        state = read_target(spark, request.prediction_table)
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
            return decision, landed[0]["table_version"], landed[0]
    raise PublishConflictError(f"could not commit to {request.prediction_table} after {MAX_ATTEMPTS} attempts "
                               f"({last}); nothing was written by this run, re-run the publish.",
                               table=request.prediction_table)
