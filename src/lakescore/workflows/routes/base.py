"""What a run does that differs by engine: the :class:`Route` Protocol, and what both routes share.

``inference.batch_compute`` picks one route once per run (:func:`lakescore.workflows.routes.choose_route`):
the single-node route (:mod:`~lakescore.workflows.routes.single_node`: pandas frames in this
process, delta-rs locally) or the Spark route (:mod:`~lakescore.workflows.routes.spark`: lazy Spark
DataFrames on the executors, Spark Delta). The workflows ask the route; nothing else tests which
engine it has. The engine that publishes is the placement's for the route
(:func:`lakescore.runtime.base.publication_engine`): the route carries it as :attr:`Route.engine`
and hands the writer for it (:mod:`~lakescore.workflows.routes.writers`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from lakescore.config import BatchCompute, EnvManager, ProjectConfig
from lakescore.lookup import FeatureLookup
from lakescore.monitoring.aggregates import RunAggregates
from lakescore.monitoring.labels import LabelSnapshot, label_snapshot
from lakescore.monitoring.report import ReportBins
from lakescore.publish.commit import PublicationTarget
from lakescore.publish.run import FrameFacts
from lakescore.publish.scope import PreparedScope, attach_period
from lakescore.publish.spark_delta import KeyCheck
from lakescore.runtime import Runtime
from lakescore.runtime.ahead import Ahead
from lakescore.runtime.base import DeltaEngine
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.run import FrameKind, ScoredRun

Facts = Callable[[int], tuple[list[str] | None, dict[str, Any] | None]]
STAGED_FRAME = "predictions.parquet"  # <runs_dir>/<run_id>/predictions.parquet: a pandas run's staged rows


class Runs(Protocol):
    """Where ``lakescore monitor`` computes a run's aggregates (:meth:`Route.monitor_runs`)."""

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


class Writer(Protocol):
    """The publication of a staged run on one engine (:mod:`lakescore.workflows.routes.writers`)."""

    engine: DeltaEngine

    def rows(self, run: ScoredRun) -> tuple[Any, FrameFacts]:
        """The rows to commit (the predictions with the constant ``run_id`` column) and their facts."""
        ...

    def publish(self, table: str, rows: Any, request: Any, *, facts: FrameFacts,
                **options: Any) -> tuple[Any, int | None, dict[str, Any] | None]:
        """Commit ``rows`` to ``table`` exactly once: ``(decision, table version, receipt)``."""
        ...


class Route(Protocol):
    """What a run does that differs by engine; one implementation per engine.

    Attributes
    ----------
    name : {"single_node", "spark"}
        The ``inference.batch_compute`` it carries out.
    engine : DeltaEngine
        The engine that reads and writes the prediction table for this route on this placement.
    """

    name: BatchCompute
    engine: DeltaEngine

    def session_kept(self) -> AbstractContextManager[None]:
        """Around a run: the engine's session settings for the run, put back as they were once
        the run is staged or published."""
        ...

    def target(self, table: str, *, app_id: str | None = None) -> PublicationTarget:
        """The reader of ``table``'s publication state (TargetState, receipts) on :attr:`engine`."""
        ...

    def early_target(self, table: str, *, app_id: str) -> PublicationTarget | None:
        """A reader of ``table`` that starts no session, for a replay no-op decided before this
        route's engine starts; None when the route's own reader is already that (or none can)."""
        ...

    def window(self, table: str, *, first: int, last: int, columns: list[str]) -> tuple[Any, int, dict[int, list[str]]]:
        """A change data feed window: its inserted rows (``columns``), how many, and the other
        change types per version."""
        ...

    def score(self, plan: ScorePlan, prepared: PreparedScope, *, batch_rows: int, env_manager: EnvManager,
              model_dir: Path, period_column: str | None) -> Any:
        """The rows a run scores, read (and their feature lookups joined) and scored on this route."""
        ...

    def finish(self, scored: Any, plan: ScorePlan, prepared: PreparedScope, *,
               period_column: str | None) -> tuple[Any, FrameKind]:
        """``scored`` with the period column (when set) and the model's name and version, and its form."""
        ...

    def stage(self, run: ScoredRun, folder: Path, *, period_column: str | None) -> ScoredRun:
        """Write ``run``'s predictions under ``folder`` (a new folder of the run store); the run as staged."""
        ...

    def load(self, folder: Path) -> tuple[Any, FrameKind]:
        """A staged run's predictions from ``folder``, and their form."""
        ...

    def check_ahead(self, plan: ScorePlan, prepared: PreparedScope, *, period_column: str | None) -> Ahead[KeyCheck]:
        """The one pass's key check of the rows a run scores, started now and computed while the
        driver sets up the scoring; leave it (``with``) inside :meth:`session_kept`. Only the
        Spark route publishes in one pass (the single-node route raises)."""
        ...

    def one_pass(self, run: ScoredRun, checked: KeyCheck, *, model_dir: Path, period_column: str | None) -> ScoredRun:
        """``run`` ready to be published in one pass (:func:`lakescore.publish.plan.publication_pass`):
        not staged; its keys checked and its facts counted on the source read (``checked``, from
        :meth:`check_ahead`); its tally observed by the commit. Only the Spark route publishes so
        (the single-node route raises)."""
        ...

    def writer(self, *, period_column: str | None = None) -> Writer:
        """The writer of :attr:`engine` (``period_column``: ``publication.period_column``, for the facts)."""
        ...

    def monitor_runs(self, project: ProjectConfig) -> Runs:
        """Where ``lakescore monitor`` computes the aggregates of the published runs."""
        ...

    def unmatched_rows(self, source: str, specs: tuple[FeatureLookup, ...] | list[FeatureLookup], *,
                       version: int, versions: dict[str, int]) -> dict[str, int]:
        """Per lookup, how many rows of ``source`` at ``version`` find no feature row (and so get
        nulls that the recipe imputes), counted where the rows are.

        Returns
        -------
        dict of str to int
            ``"<table> by <keys>"`` -> rows without a feature row, in lookup order. A row misses
            when a key (or its timestamp) is null, no feature row has its key, or, point in time,
            the earliest feature row of its key is after the row's timestamp: the rows that
            :func:`lakescore.lookup.join_features` gives nulls.
        """
        ...


def lookup_name(spec: FeatureLookup) -> str:
    """A lookup as :meth:`Route.unmatched_rows` names it: ``"<table> by <keys>"``."""
    return f"{spec.table_name} by {', '.join(spec.row_columns)}"


def source_rows(runtime: Runtime, plan: ScorePlan, prepared: PreparedScope, columns: list[str]) -> pd.DataFrame:
    """``columns`` of the rows a run scores, in pandas: the window's inserted rows, or the pinned snapshot."""
    if prepared.rows is not None:
        return prepared.rows[columns].copy()
    return runtime.read_table(plan.source_table, version=plan.source_version, columns=columns)


def finish_frame(runtime: Runtime, scored: pd.DataFrame, plan: ScorePlan, prepared: PreparedScope, *,
                 period_column: str | None) -> pd.DataFrame:
    """A pandas frame of predictions with ``period_column`` joined from the source (when set and
    not there), then constant ``model_name`` (string) and ``model_version`` (Int64) columns: the
    single-node route's last step, and every route's for a run with nothing to score."""
    keys = list(plan.record_keys)
    if period_column and period_column not in scored.columns and len(scored):
        scored = attach_period(scored, source_rows(runtime, plan, prepared, [*keys, period_column]), keys=keys,
                               column=period_column)
    scored["model_name"] = pd.array([plan.model_name] * len(scored), dtype="string")
    scored["model_version"] = pd.array([plan.model_version] * len(scored), dtype="Int64")
    return scored


def stage_frame(run: ScoredRun, folder: Path) -> ScoredRun:
    """Stage a pandas run: ``<folder>/predictions.parquet``."""
    run.predictions.to_parquet(folder / STAGED_FRAME, index=False)
    return run


def load_frame(folder: Path) -> pd.DataFrame:
    """A pandas run's staged predictions (nullable dtypes, as scored)."""
    return pd.read_parquet(folder / STAGED_FRAME, dtype_backend="numpy_nullable")


def read_label_snapshot(project: ProjectConfig, runtime: Runtime, *, rows: bool = True) -> LabelSnapshot:
    """The configured label table at its current version (empty when none is configured or it
    does not exist yet); with ``rows=False`` its version only (the Spark route reads the rows)."""
    mon = project.monitoring
    if not (mon.label_table and mon.label_column and runtime.table_exists(mon.label_table)):
        return LabelSnapshot(None, None)
    version = runtime.table_version(mon.label_table)
    if not rows:
        return LabelSnapshot(version, None)
    return label_snapshot(runtime.read_table(mon.label_table, version=version), version, mon,
                          list(project.training.data.record_keys))
