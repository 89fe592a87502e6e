"""Where ``lakescore monitor`` computes a run's aggregates: :class:`PandasRuns` reads the rows into
pandas (``batch_compute: single_node``); :class:`SparkRuns` reads them as Spark DataFrames at the
same versions, joins inputs and labels on the record keys in Spark and computes every aggregate
on the executors (``batch_compute: spark``): only aggregates reach the driver.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import pandas as pd

from lakescore.config import ProjectConfig
from lakescore.monitoring.aggregates import RunAggregates, pandas_aggregates
from lakescore.monitoring.labels import LabelSnapshot, label_snapshot
from lakescore.monitoring.outputs import Kind, set_outputs
from lakescore.monitoring.quality import model_rows, model_versions
from lakescore.monitoring.report import ReportBins, pandas_report_bins
from lakescore.monitoring.spark_aggregates import (spark_aggregates, spark_calibration_bins, spark_histogram_bins,
                                                   spark_labels)
from lakescore.lookup import lookup_inputs
from lakescore.runtime import Runtime
from lakescore.workflows.lookups import read_feature_tables, run_lookups, spark_join_lookups

Facts = Callable[[int], tuple[list[str] | None, dict[str, Any] | None]]
LABEL = "_label"  # the label's column in a Spark run frame


class Runs(Protocol):
    """Where a run's aggregates are computed: :class:`PandasRuns` or :class:`SparkRuns`."""

    snapshot: LabelSnapshot

    def aggregates(self, receipt: dict[str, Any], *, versions: list[int] | None = None,
                   facts: Facts | None = None) -> dict[int, RunAggregates]:
        """Aggregates of a run's rows per model version (``versions``, or those in its rows).

        ``facts`` gives a version's input columns and drift profile; without it, inputs and
        drift bins are not read (re-measuring needs performance and the label hash only).
        """
        ...

    def report_bins(self, run_id: str) -> ReportBins:
        """Histogram bins of the prediction table and calibration bins of run ``run_id``."""
        ...


def read_label_snapshot(project: ProjectConfig, runtime: Runtime, *, rows: bool = True) -> LabelSnapshot:
    """The configured label table at its current version (empty when none is configured or it
    does not exist yet); with ``rows=False`` its version only (the Spark engine reads the rows)."""
    mon = project.monitoring
    if not (mon.label_table and mon.label_column and runtime.table_exists(mon.label_table)):
        return LabelSnapshot(None, None)
    version = runtime.table_version(mon.label_table)
    if not rows:
        return LabelSnapshot(version, None)
    return label_snapshot(runtime.read_table(mon.label_table, version=version), version, mon,
                          list(project.training.data.record_keys))


def run_rows(runtime: Runtime, table: str, receipt: dict[str, Any]) -> pd.DataFrame:
    """The rows a run committed, read at the table version its commit created."""
    only_run = [("run_id", "=", receipt["run_id"])]
    try:
        return runtime.read_table(table, version=int(receipt["table_version"]), filters=only_run)
    except Exception:  # that version was vacuumed: what is left of the run now
        return runtime.read_table(table, filters=only_run)


def run_inputs(runtime: Runtime, receipt: dict[str, Any], keys: list[str], frame: pd.DataFrame,
               columns: list[str], *, model_version: int) -> pd.DataFrame:
    """The model's input ``columns`` of ``frame``'s rows, from the source at the version the run
    pinned (joined on ``keys``, row order kept); a lookup model's joined inputs from its feature
    tables at the versions the run joined (:func:`lakescore.workflows.lookups.run_lookups`)."""
    source = receipt["source_table"]
    specs, versions = run_lookups(runtime, receipt, model_version)
    read = list(dict.fromkeys([*keys, *lookup_inputs(specs, columns)]))
    try:
        data = runtime.read_table(source, version=int(receipt["source_version_to"]), columns=read)
    except Exception:  # the pinned version is gone: the rows as they are now
        data = runtime.read_table(source, columns=read)
    if specs:  # the joined inputs: each feature table at the version the run joined
        data = read_feature_tables(runtime, specs, versions=versions).join(data, specs)
    data = data.astype({k: frame[k].dtype for k in keys}, errors="ignore")
    return frame[keys].merge(data, on=keys, how="left")[columns]


def pandas_kinds(frame: pd.DataFrame) -> dict[str, Kind]:
    """Column -> ``numeric`` | ``label`` (boolean and text columns) of a prediction frame."""
    return {c: "numeric" if pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_bool_dtype(t) else "label"
            for c, t in frame.dtypes.items()}


class PandasRuns:
    """The single-node engine: a run's rows, inputs and labels read into pandas on this process."""

    def __init__(self, project: ProjectConfig, runtime: Runtime) -> None:
        self.project, self.runtime = project, runtime
        self.keys = list(project.training.data.record_keys)
        self.snapshot = read_label_snapshot(project, runtime)

    def aggregates(self, receipt: dict[str, Any], *, versions: list[int] | None = None,
                   facts: Facts | None = None) -> dict[int, RunAggregates]:
        """See :meth:`Runs.aggregates`."""
        frame = run_rows(self.runtime, self.project.inference.prediction_table, receipt)
        labels = self.snapshot.for_rows(frame, self.keys)
        outputs = set_outputs(pandas_kinds(frame), receipt, self.keys)
        out = {}
        for version in versions or model_versions(frame, receipt):
            mask, part = model_rows(frame, version)
            columns, profile = facts(int(version)) if facts else (None, None)
            inputs = (run_inputs(self.runtime, receipt, self.keys, part, columns, model_version=int(version))
                      if columns and len(part) else None)
            out[int(version)] = pandas_aggregates(
                part, inputs=inputs, profile=profile, keys=self.keys, outputs=outputs,
                labels=None if labels is None else labels[mask].reset_index(drop=True))
        return out

    def report_bins(self, run_id: str) -> ReportBins:
        """See :meth:`Runs.report_bins`."""
        table = self.runtime.read_table(self.project.inference.prediction_table)
        latest = table[table["run_id"] == run_id].reset_index(drop=True)
        return pandas_report_bins(table, run_id, self.snapshot.for_rows(latest, self.keys))


def spark_kinds(frame: Any) -> dict[str, Kind]:
    """Column -> ``numeric`` | ``label`` (boolean and text columns) of a Spark prediction frame."""
    from pyspark.sql import types as T  # noqa: N812  (Spark engine only)

    return {f.name: "numeric" if isinstance(f.dataType, T.NumericType) else "label" for f in frame.schema.fields}


class SparkRuns:
    """The Spark engine: a run's rows, inputs and labels as Spark DataFrames (read through Delta at
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
        from pyspark.sql import functions as F  # noqa: N812  (Spark engine only)

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
        :func:`run_inputs`), each renamed ``_in_<i>``, and column -> its new name."""
        from pyspark.sql import functions as F  # noqa: N812  (Spark engine only)

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
        """See :meth:`Runs.aggregates`."""
        from pyspark.sql import functions as F  # noqa: N812  (Spark engine only)

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
        """See :meth:`Runs.report_bins`."""
        from pyspark.sql import functions as F  # noqa: N812  (Spark engine only)

        table = self.project.inference.prediction_table
        frame = self.runtime.spark_source(table, version=self.runtime.table_version(table))
        column, histograms = spark_histogram_bins(frame)
        labels = self.labels()
        calibration = None
        if labels is not None and "probability" in frame.columns:
            latest = frame.where(F.col("run_id") == run_id).join(labels, on=self.keys, how="left")
            calibration = spark_calibration_bins(latest, LABEL)
        return ReportBins(column, histograms, calibration)
