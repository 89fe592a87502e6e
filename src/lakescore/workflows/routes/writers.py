"""The writers a route publishes with, one per Delta engine; the placement picks the engine for
the route (:func:`lakescore.runtime.base.publication_engine`), so a single-node run on Databricks
publishes with Spark Delta as a Spark run does.

- :class:`SparkDeltaPublication`: Spark Delta from the executors
  (:func:`lakescore.publish.spark_delta.publish`, the table addressed by ``runtime.table_ref``), the
  rows read from the staged files and never brought to the driver; a Spark run's facts are those
  observed when it was staged.
- :class:`DeltaRsPublication`: delta-rs from this process (:func:`lakescore.publish.delta_rs.publish`,
  local placement only), the rows as one Arrow table.

Both run the same commit loop and write the same receipts.
"""

from __future__ import annotations

from typing import Any

from lakescore.publish import delta_rs
from lakescore.publish.run import FrameFacts, arrow_facts, saved_facts, spark_facts
from lakescore.runtime import Runtime
from lakescore.runtime.base import DeltaEngine
from lakescore.scoring.run import ScoredRun
from lakescore.workflows.routes.base import Writer


def writer_for(runtime: Runtime, engine: DeltaEngine, *, period_column: str | None) -> Writer:
    """The writer of ``engine`` (a route's :attr:`~lakescore.workflows.routes.base.Route.engine`)."""
    if engine is DeltaEngine.SPARK_DELTA:
        return SparkDeltaPublication(runtime, period_column=period_column)
    return DeltaRsPublication(runtime, period_column=period_column)


def spark_rows(runtime: Runtime, run: ScoredRun) -> Any:
    """A run's predictions with the constant ``run_id`` column, as a lazy Spark DataFrame (over the
    staged files; a pandas run, such as one with nothing scored, is made a Spark frame of its rows)."""
    from pyspark.sql import functions as F  # pyspark: only on the Spark Delta engine

    if run.frame == "pandas":
        return runtime.spark().createDataFrame(delta_rs.to_arrow(run.predictions, run_id=run.run_id))
    return run.predictions.withColumn("run_id", F.lit(run.run_id).cast("string"))


class SparkDeltaPublication:
    """Publication with Spark Delta (``engine: spark-delta``)."""

    engine = DeltaEngine.SPARK_DELTA

    def __init__(self, runtime: Runtime, *, period_column: str | None) -> None:
        self.runtime, self.period_column = runtime, period_column

    def rows(self, run: ScoredRun) -> tuple[Any, FrameFacts]:
        """:func:`spark_rows`, and the facts observed when the run was staged (else a Spark aggregate)."""
        data = spark_rows(self.runtime, run)
        return data, saved_facts(data, run.facts, self.period_column) or spark_facts(data, self.period_column)

    def publish(self, table: str, rows: Any, request: Any, *, facts: FrameFacts,
                **options: Any) -> tuple[Any, int | None, dict[str, Any] | None]:
        """:func:`lakescore.publish.spark_delta.publish` on ``runtime.table_ref(table)``."""
        from lakescore.publish import spark_delta  # pyspark: only on this engine

        return spark_delta.publish(self.runtime.table_ref(table), rows, request, frame_facts=facts, **options)


class DeltaRsPublication:
    """Publication with delta-rs from this process (``engine: delta-rs``)."""

    engine = DeltaEngine.DELTA_RS

    def __init__(self, runtime: Runtime, *, period_column: str | None) -> None:
        self.runtime, self.period_column = runtime, period_column

    def rows(self, run: ScoredRun) -> tuple[Any, FrameFacts]:
        """The predictions with ``run_id`` as one Arrow table, and their facts."""
        data = delta_rs.to_arrow(run.predictions, run_id=run.run_id)
        return data, arrow_facts(data, self.period_column)

    def publish(self, table: str, rows: Any, request: Any, *, facts: FrameFacts,
                **options: Any) -> tuple[Any, int | None, dict[str, Any] | None]:
        """:func:`lakescore.publish.delta_rs.publish` on ``runtime.table_location(table)``."""
        return delta_rs.publish(self.runtime.table_location(table), rows, request, **options)
