"""The Spark route (``batch_compute: spark``): how a Spark run differs, in one file. Its rows are
lazy Spark DataFrames on the executors; no source or prediction row reaches the driver.

- Read: the pinned snapshot through Delta (``versionAsOf``), or a change data feed window as a lazy
  Spark DataFrame whose change kinds are counted by one aggregate on the executors
  (:func:`lakescore.publish.state.spark_change_kinds`). Where the placement also reads prediction
  tables with delta-rs (local), a replay no-op is decided with delta-rs before a session starts
  (:meth:`SparkRoute.early_target`).
- Lookups: joined in Spark at the versions preflight pinned (:func:`spark_join_lookups`), or by
  Databricks Feature Engineering's ``score_batch`` (:func:`score_spark_route`).
- Score: the admitted ``spark_udf`` in batches on the workers (:func:`lakescore.scoring.spark.score_spark`),
  once, when the executors write the staged files; the session's split size restored afterwards.
- Tally, stage: one aggregate on the executors; ``<runs_dir>/<run_id>/predictions/``, a Parquet
  folder, with the facts observed during that write (a run with nothing to score is staged as
  a pandas frame: no session for it).
- Publish: Spark Delta from the executors (:class:`~lakescore.workflows.routes.writers.SparkDeltaPublication`).
  ``score --publish`` does it in one pass (:meth:`SparkRoute.one_pass`): nothing staged, the UDF
  runs in the commit, the keys and facts come from the source read, the tally from the commit.
- Monitor: a run's rows, inputs and labels as Spark DataFrames, every aggregate on the executors
  (:class:`SparkRuns`).
- Unmatched keys: counted in Spark (one number reaches the driver).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from lakescore.config import BatchCompute, EnvManager, ProjectConfig
from lakescore.lookup import FeatureLookup
from lakescore.monitoring.aggregates import RunAggregates
from lakescore.monitoring.outputs import Kind, set_outputs
from lakescore.monitoring.report import ReportBins
from lakescore.monitoring.spark_aggregates import (
    spark_aggregates,
    spark_calibration_bins,
    spark_histogram_bins,
    spark_labels,
)
from lakescore.publish.commit import PublicationTarget
from lakescore.publish.scope import PreparedScope
from lakescore.publish.spark_delta import KeyCheck
from lakescore.runtime import Runtime
from lakescore.runtime.ahead import Ahead
from lakescore.runtime.base import DeltaEngine, publication_engine
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.run import FrameKind, OnePass, ScoredRun
from lakescore.workflows.lookups import run_lookups
from lakescore.workflows.placement import prediction_target
from lakescore.workflows.routes.base import (
    STAGED_FRAME,
    Facts,
    Writer,
    load_frame,
    lookup_name,
    read_label_snapshot,
    stage_frame,
)
from lakescore.workflows.routes.writers import writer_for

SPARK_STAGED = "predictions"  # <runs_dir>/<run_id>/predictions/: a Spark run's Parquet folder
LABEL = "_label"  # the label's column in a Spark run frame


class SparkRoute:
    """The Spark route on ``runtime``'s placement (see the module note)."""

    name: BatchCompute = "spark"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.engine = publication_engine(runtime, self.name)

    @contextmanager
    def session_kept(self) -> Iterator[None]:
        """The source read in one split per core for the run (:func:`lakescore.scoring.splits.spread_reads`,
        set before anything plans a read of it), and the split size put back as it was once the
        run is staged or published (:func:`~lakescore.scoring.splits.reads_restored`)."""
        from lakescore.scoring.splits import reads_restored, spread_reads  # pyspark: only on the Spark route

        spark = self.runtime.spark()
        with reads_restored(spark):
            spread_reads(spark)
            yield

    def target(self, table: str, *, app_id: str | None = None) -> PublicationTarget:
        """See :meth:`lakescore.workflows.routes.base.Route.target` (Spark Delta)."""
        return prediction_target(self.runtime, table, batch_compute=self.name, app_id=app_id)

    def early_target(self, table: str, *, app_id: str) -> PublicationTarget | None:
        """The delta-rs reader of ``table``, where the placement reads prediction tables with
        delta-rs as well as Spark Delta (the local one: both engines read the receipts either
        wrote); None elsewhere."""
        if (self.engine is not DeltaEngine.SPARK_DELTA
                or publication_engine(self.runtime, "single_node") is not DeltaEngine.DELTA_RS):
            return None
        return prediction_target(self.runtime, table, batch_compute="single_node", app_id=app_id)

    def window(self, table: str, *, first: int, last: int, columns: list[str]) -> tuple[Any, int, dict[int, list[str]]]:
        """The window as a lazy Spark DataFrame of its inserted rows, counted by one aggregate."""
        from lakescore.publish.state import spark_change_kinds

        changes = self.runtime.spark_changes(table, first=first, last=last, columns=columns)
        inserted, kinds = spark_change_kinds(changes, table=table, first=first, last=last)
        return changes.where("_change_type = 'insert'").select(*columns), inserted, kinds

    def rows(self, plan: ScorePlan, prepared: PreparedScope) -> Any:
        """The rows a Spark run scores, as a lazy Spark DataFrame: the window's inserted rows, or the
        pinned snapshot read through Delta (``versionAsOf``)."""
        if prepared.rows is not None:
            return prepared.rows
        return self.runtime.spark_source(plan.source_table, version=plan.source_version)

    def score(self, plan: ScorePlan, prepared: PreparedScope, *, batch_rows: int, env_manager: EnvManager,
              model_dir: Path, period_column: str | None) -> Any:
        """:func:`score_spark_route` of :meth:`rows`, lazily; ``period_column`` carried through the
        UDF's select (no join back to the source)."""
        carry = (period_column,) if period_column and period_column not in plan.record_keys else ()
        return score_spark_route(self.runtime, self.rows(plan, prepared), plan, batch_rows=batch_rows,
                                 env_manager=env_manager, model_dir=model_dir, carry=carry)

    def finish(self, scored: Any, plan: ScorePlan, prepared: PreparedScope, *,
               period_column: str | None) -> tuple[Any, FrameKind]:
        """The model columns added in Spark (:func:`lakescore.scoring.spark.with_model_columns`), lazily."""
        from lakescore.scoring.spark import with_model_columns  # pyspark: only on the Spark route

        source = self.rows(plan, prepared) if period_column else None
        return with_model_columns(scored, source, keys=list(plan.record_keys), period_column=period_column,
                                  model_name=plan.model_name, model_version=plan.model_version), "spark"

    def stage(self, run: ScoredRun, folder: Path, *, period_column: str | None) -> ScoredRun:
        """The executors write ``<folder>/predictions/`` (the ``spark_udf`` runs here, once), with the
        run's facts (rows, and ``period_column``'s nulls and bounds) observed during that write
        (:func:`lakescore.publish.run.observe_facts`): publishing reads them instead of aggregating
        the staged files again. The run comes back over the staged files. A pandas run (nothing
        scored) is staged as the single-node route stages it."""
        if run.frame == "pandas":
            return stage_frame(run, folder)
        from lakescore.publish.run import observe_facts  # pyspark: only on the Spark route

        observed, facts = observe_facts(run.predictions, period_column)
        observed.write.mode("error").parquet(str(folder / SPARK_STAGED))
        return replace(run, predictions=self.runtime.spark().read.parquet(str(folder / SPARK_STAGED)), facts=facts())

    def check_ahead(self, plan: ScorePlan, prepared: PreparedScope, *, period_column: str | None) -> Ahead[KeyCheck]:
        """The one pass's key check, started now on a thread of its own (:class:`lakescore.runtime.ahead.Ahead`):
        one aggregate over the key columns (and the period column) of the rows this run scores
        (:func:`lakescore.publish.spark_delta.key_check`), which the executors compute while the
        driver copies the model and sets up the UDF. Its query is built here, on the calling
        thread; the thread only runs it, so the two threads do not take turns at Python's lock
        for each round trip to the JVM. The keys of the output are the keys of the input rows,
        so no repeated key can reach the commit; the check gives the run's rows and period facts
        too (:func:`lakescore.publish.run.checked_facts`). Start it inside :meth:`session_kept`
        (the read's splits), and leave it (``with``) before that ends."""
        from lakescore.publish.spark_delta import key_check  # pyspark: only on the Spark route

        keys = list(plan.record_keys)
        source = self.rows(plan, prepared)
        columns = list(dict.fromkeys([*keys, *([period_column] if period_column in source.columns else [])]))
        return Ahead(source.sparkSession, key_check(source.select(*columns), keys, period_column=period_column))

    def one_pass(self, run: ScoredRun, checked: KeyCheck, *, model_dir: Path, period_column: str | None) -> ScoredRun:
        """``run`` as the one pass publishes it: nothing staged, nothing computed yet.

        - The key check: ``checked``, of the source read (:meth:`check_ahead`); its totals give the
          run's rows and period facts.
        - The tally: observed on the UDF's output (:func:`lakescore.scoring.spark.observe_tally`),
          counted by the commit's own write.

        ``model_dir`` holds the model downloaded for the workers (by :meth:`score`): its code
        tables enumerate the tally's groups. It must outlive the commit.
        """
        from lakescore.publish.run import checked_facts  # pyspark: only on the Spark route
        from lakescore.scoring.spark import observe_tally
        from lakescore.transport_codes import saved_code_tables

        # the one copy this run downloaded (local_model): its MLmodel at <model_dir>/<copy>/ or, for a
        # Feature Engineering model, deeper (its pyfunc's own folder): the shallowest one
        folder = min(model_dir.rglob("MLmodel"), key=lambda path: len(path.parts)).parent
        observed, tally = observe_tally(run.predictions, saved_code_tables(folder))
        return replace(run, predictions=observed, facts=checked_facts(observed, checked.totals, period_column),
                       one_pass=OnePass(checked, tally))

    def load(self, folder: Path) -> tuple[Any, FrameKind]:
        """A Spark DataFrame over the staged ``predictions/`` folder, or the pandas frame of a run
        staged with nothing scored."""
        if (folder / STAGED_FRAME).exists() or not (folder / SPARK_STAGED).is_dir():
            return load_frame(folder), "pandas"
        return self.runtime.spark().read.parquet(str(folder / SPARK_STAGED)), "spark"

    def writer(self, *, period_column: str | None = None) -> Writer:
        """The writer of :attr:`engine` (Spark Delta on every placement)."""
        return writer_for(self.runtime, self.engine, period_column=period_column)

    def monitor_runs(self, project: ProjectConfig) -> SparkRuns:
        """:class:`SparkRuns`."""
        return SparkRuns(project, self.runtime)

    def unmatched_rows(self, source: str, specs: tuple[FeatureLookup, ...] | list[FeatureLookup], *,
                       version: int, versions: dict[str, int]) -> dict[str, int]:
        """See :meth:`lakescore.workflows.routes.base.Route.unmatched_rows`: counted in Spark."""
        return {lookup_name(spec): _spark_unmatched(self.runtime, source, spec, version=version,
                                                    feature_version=int(versions[spec.table_name]))
                for spec in specs}


def spark_kinds(frame: Any) -> dict[str, Kind]:
    """Column -> ``numeric`` | ``label`` (boolean and text columns) of a Spark prediction frame."""
    from pyspark.sql import types as T  # noqa: N812  (Spark route only)

    return {f.name: "numeric" if isinstance(f.dataType, T.NumericType) else "label" for f in frame.schema.fields}


class SparkRuns:
    """The Spark route's monitoring: a run's rows, inputs and labels as Spark DataFrames (read through Delta at
    the receipt's versions, joined on the record keys in Spark); every aggregate is computed on
    the executors (:mod:`lakescore.monitoring.spark_aggregates`)."""

    def __init__(self, project: ProjectConfig, runtime: Runtime) -> None:
        self.project, self.runtime = project, runtime
        self.keys = list(project.training.data.record_keys)
        self.snapshot = read_label_snapshot(project, runtime, rows=False)

    def labels(self) -> Any | None:
        """The label table at the snapshot's version: record keys and ``_label`` (None: no labels)."""
        mon = self.project.monitoring
        if self.snapshot.version is None or mon.label_table is None or mon.label_column is None:
            return None
        source = self.runtime.spark_source(mon.label_table, version=self.snapshot.version)
        return spark_labels(source, keys=self.keys, column=mon.label_column, expression=mon.label_expression,
                            empty=self.runtime.empty_frame(mon.label_table)).withColumnRenamed("_label", LABEL)

    def rows(self, receipt: dict[str, Any]) -> Any:
        """The rows a run committed, at the table version its commit created (the current version
        when that one is gone from the log), as a Spark DataFrame."""
        from pyspark.sql import functions as F  # noqa: N812  (Spark route only)

        table = self.project.inference.prediction_table
        try:
            frame = self.runtime.spark_source(table, version=int(receipt["table_version"]))
        except Exception:  # that version was cleaned from the log: what is left of the run now
            frame = self.runtime.spark_source(table, version=self.runtime.table_version(table))
        return frame.where(F.col("run_id") == receipt["run_id"])

    def inputs(self, frame: Any, receipt: dict[str, Any], columns: list[str], *,
               model_version: int) -> tuple[Any, dict[str, str]]:
        """``frame`` left-joined on the keys with the model's input ``columns`` from the source at
        the version the run pinned (a lookup model's joined inputs from its feature tables, as
        :func:`lakescore.workflows.routes.single_node.run_inputs`), each renamed ``_in_<i>``, and
        column -> its new name."""
        from pyspark.sql import functions as F  # noqa: N812  (Spark route only)

        source = receipt["source_table"]
        try:
            data = self.runtime.spark_source(source, version=int(receipt["source_version_to"]))
        except Exception:  # the pinned version is gone: the rows as they are now
            data = self.runtime.spark_source(source, version=self.runtime.table_version(source))
        specs, versions = run_lookups(self.runtime, receipt, model_version)
        if specs:  # the joined inputs, joined in Spark at the versions the run joined
            data = spark_join_lookups(self.runtime, data, specs, versions=versions)
        names = {c: f"_in_{i}" for i, c in enumerate(columns)}
        data = data.select(*self.keys, *[F.col(c).alias(n) for c, n in names.items()])
        return frame.join(data, on=self.keys, how="left"), names

    def aggregates(self, receipt: dict[str, Any], *, versions: list[int] | None = None,
                   facts: Facts | None = None) -> dict[int, RunAggregates]:
        """See :meth:`lakescore.workflows.routes.base.Runs.aggregates`."""
        from pyspark.sql import functions as F  # noqa: N812  (Spark route only)

        frame = self.rows(receipt)
        outputs = set_outputs(spark_kinds(frame), receipt, self.keys)
        counted = {int(r["model_version"]): int(r["count"])
                   for r in frame.groupBy("model_version").count().collect() if r["model_version"] is not None}
        labels = self.labels()
        if labels is not None:
            frame = frame.join(labels, on=self.keys, how="left")
        out = {}
        for version in versions or sorted(counted) or [int(receipt["model_version"])]:
            part = frame.where(F.col("model_version") == int(version))
            columns, profile = facts(int(version)) if facts else (None, None)
            inputs = None
            if columns and counted.get(int(version)):
                part, inputs = self.inputs(part, receipt, columns, model_version=int(version))
            out[int(version)] = spark_aggregates(part, inputs=inputs, profile=profile,
                                                 label=LABEL if labels is not None else None,
                                                 keys=self.keys if labels is not None else None, outputs=outputs)
        return out

    def report_bins(self, run_id: str) -> ReportBins:
        """See :meth:`lakescore.workflows.routes.base.Runs.report_bins`."""
        from pyspark.sql import functions as F  # noqa: N812  (Spark route only)

        table = self.project.inference.prediction_table
        frame = self.runtime.spark_source(table, version=self.runtime.table_version(table))
        column, histograms = spark_histogram_bins(frame)
        labels = self.labels()
        calibration = None
        if labels is not None and "probability" in frame.columns:
            latest = frame.where(F.col("run_id") == run_id).join(labels, on=self.keys, how="left")
            calibration = spark_calibration_bins(latest, LABEL)
        return ReportBins(column, histograms, calibration)


def spark_join_lookups(runtime: Runtime, rows: Any, specs: tuple[FeatureLookup, ...] | list[FeatureLookup], *,
                       versions: dict[str, int]) -> Any:
    """``rows`` with every lookup joined in Spark, lazily; each feature table read with the runtime's
    Spark reader (Delta ``versionAsOf``) at the version ``versions`` pins.

    Parameters
    ----------
    runtime : Runtime
    rows : pyspark.sql.DataFrame
        The rows to score (the pinned snapshot, or a window's inserted rows).
    specs : sequence of FeatureLookup
    versions : dict of str to int
        Table name -> Delta version to read (``ScorePlan.feature_tables``, pinned in preflight).

    Returns
    -------
    pyspark.sql.DataFrame
        As :func:`lakescore.scoring.spark_lookup.spark_join_all`; no row reaches the driver.

    Raises
    ------
    FeatureLookupError
        From :func:`lakescore.scoring.spark_lookup.spark_join_features` (a duplicate feature key, ...).
    """
    from lakescore.scoring.spark_lookup import spark_join_all  # pyspark: only on the Spark route

    names = dict.fromkeys(spec.table_name for spec in specs)
    tables = {name: runtime.spark_source(name, version=int(versions[name])) for name in names}
    return spark_join_all(rows, tables, specs)


def score_spark_route(runtime: Runtime, rows: Any, plan: ScorePlan, *, batch_rows: int, env_manager: EnvManager,
                      model_dir: Path, carry: tuple[str, ...]) -> Any:
    """The Spark route's scoring of ``rows`` (:func:`lakescore.scoring.spark.score_spark`), lazily,
    with the model's feature lookups joined where this placement joins them.

    - No lookups, or a placement without a feature store (``local``): the lookups joined in Spark
      (:func:`spark_join_lookups`, each table at the version preflight pinned), then the UDF.
    - Databricks Feature Engineering: ``score_batch`` on the rows (record keys, the source columns
      the model reads, the lookups' keys and ``carry``), with the same struct ``result_type`` and
      ``params`` as the UDF (so the same null-mask transport, decoded the same way). It joins each
      feature table at its current version; the versions preflight pinned are checked again once
      ``score_batch`` has resolved its reads (a commit after that, before the executors run, is not
      seen: the race accepted).

    Parameters
    ----------
    rows : pyspark.sql.DataFrame
        The rows to score (the pinned snapshot, or a window's inserted rows).
    plan : ScorePlan
    batch_rows, env_manager, model_dir, carry
        As :func:`lakescore.scoring.spark.score_spark`.

    Raises
    ------
    FeatureLookupError
        A duplicate feature key (local join), or a feature table that moved from its pinned version.
    """
    from lakescore.runtime.sql_text import quoted_name
    from lakescore.scoring.spark import exact_inputs, score_spark  # pyspark: only on the Spark route

    store = runtime.feature_engineering() if plan.feature_lookups else None
    if store is None:
        if plan.feature_lookups:
            rows = spark_join_lookups(runtime, rows, plan.lookups, versions=plan.feature_tables)
        return score_spark(rows, plan, batch_rows=batch_rows, env_manager=env_manager, model_dir=model_dir,
                           carry=carry)

    def score_batch(source: Any, *, result_type: str, params: dict[str, Any]) -> Any:
        from pyspark.sql import functions as F

        keys = list(dict.fromkeys([*plan.record_keys, *(c for spec in plan.lookups for c in spec.row_columns)]))
        inputs = [c for c in plan.source_columns if c not in keys]
        wanted = [*map(quoted_name, keys), *exact_inputs(source, inputs), *(quoted_name(c) for c in carry if c not in keys)]
        scored = store.score_batch(plan.model_uri, source.selectExpr(*wanted), result_type=result_type, params=params,
                                   env_manager=env_manager)
        store.check_versions(plan.feature_tables, what="scoring")
        return scored.select(*plan.record_keys, F.col("prediction").alias("_r"), *carry)

    return score_spark(rows, plan, batch_rows=batch_rows, env_manager=env_manager, model_dir=model_dir, carry=carry,
                       batch_scorer=score_batch)


_FIRST = "__lakescore_first_feature_time__"


def _spark_unmatched(runtime: Runtime, source: str, spec: FeatureLookup, *, version: int,
                     feature_version: int) -> int:
    from pyspark.sql import functions as F  # pyspark: only on the Spark route

    keys = list(spec.lookup_key)
    rows = runtime.spark_source(source, version=version).select(*spec.row_columns)
    table = runtime.spark_source(spec.table_name, version=feature_version).select(*spec.table_key).dropna()
    if spec.point_in_time:
        firsts = table.groupBy(*keys).agg(F.min(spec.feature_timestamp_key).alias(_FIRST))  # type: ignore[arg-type]  # a point-in-time lookup names both timestamp keys
        matched = F.col(spec.timestamp_lookup_key) >= F.col(_FIRST)  # type: ignore[arg-type]  # as above
    else:
        firsts = table.distinct().withColumn(_FIRST, F.lit(True))
        matched = F.col(_FIRST)
    joined = rows.join(firsts, on=keys, how="left")  # a null key matches nothing: _FIRST stays null
    return int(joined.where(F.coalesce(matched, F.lit(False)) == F.lit(False)).count())
