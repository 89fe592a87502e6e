"""The single-node route (``batch_compute: single_node``): a run's rows as pandas frames in this
process.

- Read: the pinned snapshot (``runtime.read_table`` at ``versionAsOf``), or a change data feed
  window read with delta-rs into pandas (:func:`lakescore.publish.state.split_changes`).
- Lookups: each feature table read at the version preflight pinned and joined in pandas
  (:func:`lakescore.workflows.lookups.read_feature_tables`).
- Score: one frame through the pyfunc (:func:`lakescore.scoring.local.score_single_node`).
- Tally, stage: a pandas frame; ``<runs_dir>/<run_id>/predictions.parquet``.
- Publish: the placement's engine for the route, delta-rs locally (Spark Delta on Databricks).
- Monitor: a run's rows, inputs and labels read into pandas (:class:`PandasRuns`).
- Unmatched keys: counted in pandas.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pandas as pd

from lakescore.config import BatchCompute, EnvManager, ProjectConfig
from lakescore.lookup import FeatureLookup, lookup_inputs, same_time_type
from lakescore.monitoring.aggregates import RunAggregates, pandas_aggregates
from lakescore.monitoring.outputs import Kind, set_outputs
from lakescore.monitoring.quality import model_rows, model_versions
from lakescore.monitoring.report import ReportBins, pandas_report_bins
from lakescore.publish.commit import PublicationTarget
from lakescore.publish.scope import PreparedScope
from lakescore.publish.spark_delta import KeyCheck
from lakescore.publish.state import split_changes
from lakescore.runtime import Runtime
from lakescore.runtime.ahead import Ahead
from lakescore.runtime.base import publication_engine
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.run import FrameKind, ScoredRun
from lakescore.workflows.lookups import read_feature_tables, run_lookups
from lakescore.workflows.placement import prediction_target
from lakescore.workflows.routes.base import (
    Facts,
    Writer,
    finish_frame,
    load_frame,
    lookup_name,
    read_label_snapshot,
    source_rows,
    stage_frame,
)
from lakescore.workflows.routes.writers import writer_for


class SingleNodeRoute:
    """The single-node route on ``runtime``'s placement (see the module note)."""

    name: BatchCompute = "single_node"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.engine = publication_engine(runtime, self.name)

    def session_kept(self) -> AbstractContextManager[None]:
        """Nothing to restore: no session."""
        return nullcontext()

    def target(self, table: str, *, app_id: str | None = None) -> PublicationTarget:
        """See :meth:`lakescore.workflows.routes.base.Route.target`."""
        return prediction_target(self.runtime, table, batch_compute=self.name, app_id=app_id)

    def early_target(self, table: str, *, app_id: str) -> PublicationTarget | None:
        """None: this route's reader starts no session anyway."""
        return None

    def window(self, table: str, *, first: int, last: int, columns: list[str]) -> tuple[Any, int, dict[int, list[str]]]:
        """The window read with delta-rs into pandas; only its inserted rows kept."""
        rows, kinds = split_changes(self.runtime.read_changes(table, first=first, last=last, columns=columns), columns)
        return rows, len(rows), kinds

    def score(self, plan: ScorePlan, prepared: PreparedScope, *, batch_rows: int, env_manager: EnvManager,
              model_dir: Path, period_column: str | None) -> pd.DataFrame:
        """The rows (record keys and the columns the model reads), each lookup joined in pandas at
        the version preflight pinned (its current one), scored as one frame."""
        from lakescore.scoring.local import score_single_node  # mlflow: only when rows are scored

        rows = source_rows(self.runtime, plan, prepared, list(dict.fromkeys([*plan.record_keys, *plan.source_columns])))
        if plan.feature_lookups:
            tables = read_feature_tables(self.runtime, plan.lookups, versions=plan.feature_tables)
            rows = tables.join(rows, plan.lookups)
        return score_single_node(rows, plan, batch_rows=batch_rows, model_dir=model_dir)

    def finish(self, scored: Any, plan: ScorePlan, prepared: PreparedScope, *,
               period_column: str | None) -> tuple[Any, FrameKind]:
        """:func:`~lakescore.workflows.routes.base.finish_frame`."""
        return finish_frame(self.runtime, scored, plan, prepared, period_column=period_column), "pandas"

    def stage(self, run: ScoredRun, folder: Path, *, period_column: str | None) -> ScoredRun:
        """``<folder>/predictions.parquet``."""
        return stage_frame(run, folder)

    def load(self, folder: Path) -> tuple[Any, FrameKind]:
        """The staged ``predictions.parquet``."""
        return load_frame(folder), "pandas"

    def check_ahead(self, plan: ScorePlan, prepared: PreparedScope, *, period_column: str | None) -> Ahead[KeyCheck]:
        """Never: a single-node run is staged (:func:`lakescore.publish.plan.publication_pass`)."""
        raise ValueError("the single-node route stages its runs; it has no one pass")

    def one_pass(self, run: ScoredRun, checked: KeyCheck, *, model_dir: Path, period_column: str | None) -> ScoredRun:
        """Never: a single-node run is staged (:func:`lakescore.publish.plan.publication_pass`)."""
        raise ValueError("the single-node route stages its runs; it has no one pass")

    def writer(self, *, period_column: str | None = None) -> Writer:
        """The writer of :attr:`engine` (delta-rs locally, Spark Delta on Databricks)."""
        return writer_for(self.runtime, self.engine, period_column=period_column)

    def monitor_runs(self, project: ProjectConfig) -> PandasRuns:
        """:class:`PandasRuns`."""
        return PandasRuns(project, self.runtime)

    def unmatched_rows(self, source: str, specs: tuple[FeatureLookup, ...] | list[FeatureLookup], *,
                       version: int, versions: dict[str, int]) -> dict[str, int]:
        """See :meth:`lakescore.workflows.routes.base.Route.unmatched_rows`: counted in pandas."""
        return {lookup_name(spec): _pandas_unmatched(self.runtime, source, spec, version=version,
                                                     feature_version=int(versions[spec.table_name]))
                for spec in specs}


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
    """The single-node route's monitoring: a run's rows, inputs and labels read into pandas on this process."""

    def __init__(self, project: ProjectConfig, runtime: Runtime) -> None:
        self.project, self.runtime = project, runtime
        self.keys = list(project.training.data.record_keys)
        self.snapshot = read_label_snapshot(project, runtime)

    def aggregates(self, receipt: dict[str, Any], *, versions: list[int] | None = None,
                   facts: Facts | None = None) -> dict[int, RunAggregates]:
        """See :meth:`lakescore.workflows.routes.base.Runs.aggregates`."""
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
        """See :meth:`lakescore.workflows.routes.base.Runs.report_bins`."""
        table = self.runtime.read_table(self.project.inference.prediction_table)
        latest = table[table["run_id"] == run_id].reset_index(drop=True)
        return pandas_report_bins(table, run_id, self.snapshot.for_rows(latest, self.keys))


_FIRST = "__lakescore_first_feature_time__"


def _pandas_unmatched(runtime: Runtime, source: str, spec: FeatureLookup, *, version: int,
                      feature_version: int) -> int:
    keys = list(spec.lookup_key)
    rows = runtime.read_table(source, version=version, columns=list(spec.row_columns))
    table = runtime.read_table(spec.table_name, version=feature_version, columns=spec.table_key).dropna()
    firsts = (table.groupby(keys, as_index=False)[spec.feature_timestamp_key].min() if spec.point_in_time
              else table.drop_duplicates().assign(**{_FIRST: True}))
    if spec.point_in_time:
        firsts = firsts.rename(columns={spec.feature_timestamp_key: _FIRST})
    joined = rows.dropna().merge(firsts, how="left", on=keys)
    matched = joined[_FIRST].notna()
    if spec.point_in_time:  # compared as the join compares them (naive against aware: refused)
        when, first = same_time_type(joined[spec.timestamp_lookup_key], joined[_FIRST], spec)
        matched &= when >= first
    return int(len(rows) - matched.sum())
