"""``lakescore score``: preflight, decide what to score, read it, score it on the configured route,
stage the result for publication.

Which rows a run scores is decided against the prediction table's watermark before scoring
(:func:`lakescore.publish.plan.plan_scope`): the pinned snapshot, or the inserted rows of a change
data feed window, read here once and handed to the route (a pandas frame to the single-node route,
a lazy Spark DataFrame to the Spark route). A model with feature lookups gets them joined on its
route (pandas on the single-node route, Spark on the Spark route, before the UDF), each feature
table at the version preflight pinned. A scored run is staged in the runtime's run store
(``<runs_dir>/<run_id>/``: run.json beside predictions.parquet, or beside the ``predictions/``
Parquet folder that the Spark route's executors write) so that ``lakescore publish`` can publish it
later, or again, exactly once. On the Spark route no source or prediction row reaches the driver:
the ``spark_udf`` runs once, when the executors write the staged files, and the counts come from
one aggregate of them.
"""

from __future__ import annotations

import json
import shutil
import uuid
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pandas as pd

from lakescore import progress
from lakescore.config import ProjectConfig
from lakescore.errors import ChangeFeedReadError, ConfigError, LakescoreError
from lakescore.publish.plan import (Scope, TargetState, app_id_for, cdf_recovery, check_period_nulls, plan_scope,
                                    settle_window)
from lakescore.publish.scope import PreparedScope, attach_period, empty_predictions
from lakescore.publish.state import read_source, spark_change_kinds, split_changes, window_history
from lakescore.runtime import Runtime
from lakescore.runtime.base import BatchCompute, DeltaEngine, publication_engine
from lakescore.scoring.preflight import ScorePlan, preflight
from lakescore.scoring.run import ScoredRun
from lakescore.workflows.lookups import read_feature_tables, score_spark_route
from lakescore.workflows.placement import prediction_target

SPARK_STAGED = "predictions"  # <runs_dir>/<run_id>/predictions/: a Spark run's Parquet folder


def score(project: ProjectConfig, runtime: Runtime, *, recover: bool = False) -> ScoredRun:
    """Score the project's source table with the selected model (``lakescore score``), and stage it.

    Parameters
    ----------
    recover : bool, default False
        ``--recover-predictions``: score the whole pinned snapshot, to replace the table.

    Returns
    -------
    ScoredRun
        Predictions of shape (n_source_rows, n_keys + 6): keys, ``prediction``, ``probability``,
        ``scoring_status``, ``exclusion_reason``, ``model_name``, ``model_version``; staged. On
        the Spark route a Spark DataFrame over the staged files, in no particular row order.

    Raises
    ------
    ConfigError
        From :func:`lakescore.scoring.preflight.preflight`, before any work.
    PublishError
        From :func:`prepare_scope`: which rows to score is decided against the prediction
        table's watermark before scoring.
    """
    inf = project.inference
    runtime.mlflow()
    plan = preflight(project, runtime)
    # a replay that writes nothing is decided before a JVM starts, where delta-rs can read the table
    prepared = (noop_before_spark(project, runtime, plan, recover=recover)
                or prepare_scope(project, runtime, plan, recover=recover))
    if prepared.empty:
        return stage_run(runtime, finish_run(project, runtime, plan, prepared, empty_predictions(plan.record_keys)))
    model_dir = runtime.runs_dir() / "models" / uuid.uuid4().hex  # this run's copy of the model
    try:
        with progress.step(f"score ({inf.batch_compute}) {plan.source_table}@v{plan.source_version}") as shown, \
                _split_size_kept(runtime, inf.batch_compute):
            scored = _score_route(project, runtime, plan, prepared, model_dir)
            run = stage_run(runtime, finish_run(project, runtime, plan, prepared, scored),
                            period_column=inf.publication.period_column)
            shown.total_rows(run.counts["rows_in"])
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)  # the staged files are what publish reads; the UDF has run
    return run


def _split_size_kept(runtime: Runtime, batch_compute: BatchCompute) -> AbstractContextManager[None]:
    """On the Spark route, the session's split size as it was once the run is staged."""
    if batch_compute != "spark":
        return nullcontext()
    from lakescore.scoring.splits import reads_restored  # pyspark: only on the Spark route

    return reads_restored(runtime.spark())


def _score_route(project: ProjectConfig, runtime: Runtime, plan: ScorePlan, prepared: PreparedScope,
                 model_dir: Path) -> Any:
    """The rows to score, in the route's own form, through that route (lazy on Spark), with the
    model copied under ``model_dir``."""
    inf = project.inference
    if inf.batch_compute == "spark":
        column = inf.publication.period_column  # carried through the UDF's select: no join back to the source
        rows = _spark_rows(runtime, plan, prepared)
        # lookups joined in Spark at the pinned versions, or by Feature Engineering's score_batch (Databricks)
        return score_spark_route(runtime, rows, plan, batch_rows=inf.spark_udf_prediction_batch_rows,
                                 env_manager=inf.spark_udf_env_manager, model_dir=model_dir,
                                 carry=(column,) if column and column not in plan.record_keys else ())
    from lakescore.scoring.local import score_single_node

    rows = source_rows(runtime, plan, prepared, list(dict.fromkeys([*plan.record_keys, *plan.source_columns])))
    if plan.feature_lookups:  # each feature table at the version preflight pinned (its current one)
        rows = read_feature_tables(runtime, plan.lookups, versions=plan.feature_tables).join(rows, plan.lookups)
    return score_single_node(rows, plan, batch_rows=inf.spark_udf_prediction_batch_rows, model_dir=model_dir)


def _spark_rows(runtime: Runtime, plan: ScorePlan, prepared: PreparedScope) -> Any:
    """The rows a Spark run scores, as a lazy Spark DataFrame: the window's inserted rows, or the
    pinned snapshot read through Delta (``versionAsOf``)."""
    if prepared.rows is not None:
        return prepared.rows
    return runtime.spark_source(plan.source_table, version=plan.source_version)


def source_rows(runtime: Runtime, plan: ScorePlan, prepared: PreparedScope, columns: list[str]) -> pd.DataFrame:
    """``columns`` of the rows a run scores: the window's inserted rows, or the pinned snapshot."""
    if prepared.rows is not None:
        return prepared.rows[columns].copy()
    return runtime.read_table(plan.source_table, version=plan.source_version, columns=columns)


def finish_run(project: ProjectConfig, runtime: Runtime, plan: ScorePlan, prepared: PreparedScope,
               scored: Any) -> ScoredRun:
    """The :class:`ScoredRun` of ``scored``: the period column (when set) and the model's name and
    version added, under a new run id.

    ``scored`` is a pandas frame, or a Spark DataFrame for the Spark route, whose columns are
    added in Spark (:func:`lakescore.scoring.spark.with_model_columns`), lazily.
    """
    inf = project.inference
    column = inf.publication.period_column
    keys = list(plan.record_keys)
    if hasattr(scored, "sparkSession"):
        from lakescore.scoring.spark import with_model_columns  # pyspark: only on the Spark route

        scored = with_model_columns(scored, _spark_rows(runtime, plan, prepared) if column else None, keys=keys,
                                    period_column=column, model_name=plan.model_name,
                                    model_version=plan.model_version)
    else:
        if column and column not in scored.columns and len(scored):
            scored = attach_period(scored, source_rows(runtime, plan, prepared, [*keys, column]), keys=keys,
                                   column=column)
        scored["model_name"] = pd.array([plan.model_name] * len(scored), dtype="string")
        scored["model_version"] = pd.array([plan.model_version] * len(scored), dtype="Int64")
    return ScoredRun(uuid.uuid4().hex, plan, inf.batch_compute, inf.spark_udf_env_manager,
                     inf.spark_udf_prediction_batch_rows, scored, prepared.scope.to_json())


def prepare_scope(project: ProjectConfig, runtime: Runtime, plan: ScorePlan, *,
                  recover: bool = False) -> PreparedScope:
    """Plan what a run scores: read target receipts and source metadata, decide, read the window.

    The prediction table is read on the engine the placement gives the route
    (:func:`lakescore.workflows.placement.prediction_target`): by name with Spark Delta on
    Databricks, the engine that will publish the run locally.

    A CDF window is read on the route's engine: with delta-rs into pandas for the single-node
    route, or as a lazy Spark DataFrame for the Spark route, whose change kinds are counted by
    one aggregate on the executors (:func:`lakescore.publish.state.spark_change_kinds`). Either
    way only inserted rows are kept, and the decision (:func:`~lakescore.publish.plan.settle_window`)
    is the same.

    Parameters
    ----------
    project : ProjectConfig
    runtime : Runtime
    plan : ScorePlan
        The preflight plan (pinned ``source_version``, model, keys and input columns).
    recover : bool, default False
        ``--recover-predictions``: rebuild the table from the pinned snapshot.

    Raises
    ------
    ConfigError
        ``publication.period_column`` is not a column of the source.
    NullPeriodError
        A snapshot whose ``publication.period_column`` has null rows
        (:func:`~lakescore.publish.plan.check_period_nulls`): refused before scoring.
    PublishError
        Any refusal of :func:`~lakescore.publish.plan.plan_scope` or
        :func:`~lakescore.publish.plan.settle_window` (recovery required, source changed, model
        change rejected, change feed disabled, stale).
    """
    inf = project.inference
    pub = inf.publication
    name = plan.source_table
    scope = decide_scope(project, runtime, plan, _target_state(project, runtime, inf.batch_compute), recover=recover)
    if scope.read != "cdf":
        return PreparedScope(scope)
    first, last = int(scope.source_version_from), int(scope.source_version_to)  # type: ignore[arg-type]
    columns = list(dict.fromkeys([*plan.record_keys, *plan.source_columns, *([pub.period_column] if pub.period_column else [])]))
    try:
        if inf.batch_compute == "spark":
            changes = runtime.spark_changes(name, first=first, last=last, columns=columns)
            inserted, kinds = spark_change_kinds(changes, table=name, first=first, last=last)
            rows: Any = changes.where("_change_type = 'insert'").select(*columns)
        else:
            rows, kinds = split_changes(runtime.read_changes(name, first=first, last=last, columns=columns), columns)
            inserted = len(rows)
    except ChangeFeedReadError as err:
        raise cdf_recovery(name, inf.prediction_table, first, last,
                           f"reading it failed ({err.fields.get('reason', err)})") from err
    settled = settle_window(scope, pub, source_table=name, inserted=inserted, changes=kinds)
    return (PreparedScope(settled, rows, inserted) if settled.read == "cdf" else PreparedScope(settled))


def _target_state(project: ProjectConfig, runtime: Runtime, batch_compute: BatchCompute) -> TargetState:
    """The prediction table's publication state, read by the engine the placement gives ``batch_compute``."""
    inf = project.inference
    return prediction_target(runtime, inf.prediction_table, batch_compute=batch_compute,
                             app_id=app_id_for(inf.job_name, runtime.target, inf.prediction_table)).read()


def decide_scope(project: ProjectConfig, runtime: Runtime, plan: ScorePlan, target: TargetState, *,
                 recover: bool = False) -> Scope:
    """What a run scores (:func:`~lakescore.publish.plan.plan_scope`) against ``target``: the
    source's state at the pinned version read from its metadata (its log only as far back as the
    window needs), and a snapshot's null periods refused.

    Raises
    ------
    ConfigError, NullPeriodError, PublishError
        As :func:`prepare_scope` (before any window is read).
    """
    pub = project.inference.publication
    name, version = plan.source_table, plan.source_version
    if pub.period_column and pub.period_column not in runtime.table_columns(name):
        raise ConfigError([f"{project.shown('inference')}: publication.period_column {pub.period_column!r} is not a "
                           f"column of {name}; available: {', '.join(sorted(runtime.table_columns(name)))}"])
    wm = target.watermark
    window_from = wm.source_version + 1 if wm and pub.mode == "incremental" and not recover else None
    limit = window_history(version, window_from)
    source = read_source(name, table_id=runtime.table_id(name), version=version,
                         properties=runtime.table_properties(name, version=version),
                         kept=None if limit is None else runtime.history_versions(name, version=version, limit=limit))
    scope = plan_scope(pub, source, target, model_name=plan.model_name, model_version=plan.model_version,
                       recover=recover)
    if pub.mode == "snapshot" and scope.read == "snapshot" and pub.period_column:
        check_period_nulls(name, version, pub.period_column, runtime.null_rows(name, pub.period_column, version=version))
    return scope


def noop_before_spark(project: ProjectConfig, runtime: Runtime, plan: ScorePlan, *,
                      recover: bool = False) -> PreparedScope | None:
    """A replay no-op of a Spark run, decided with delta-rs before any Spark session starts; None
    when this cannot be decided so (the Spark route's own reader then plans the run).

    Only where the placement reads prediction tables with delta-rs as well as Spark Delta (the
    local one: both engines read the receipts either wrote), only for ``publication.mode:
    incremental`` without recovery (the only plans that can be a no-op), and only a no-op is taken
    from this reading: the same :func:`decide_scope` and :func:`~lakescore.publish.plan.plan_scope`
    decide it, on the table's current log. Anything else (a window to score, a refusal, a table
    delta-rs cannot read) is left to the Spark route's reader, so nothing is ever written, or
    skipped, on this reading's word but a run that writes nothing.

    Returns
    -------
    PreparedScope or None
        The no-op scope, or None.
    """
    inf = project.inference
    if (recover or inf.batch_compute != "spark" or inf.publication.mode != "incremental"
            or publication_engine(runtime, "spark") is not DeltaEngine.SPARK_DELTA
            or publication_engine(runtime, "single_node") is not DeltaEngine.DELTA_RS):
        return None
    try:
        scope = decide_scope(project, runtime, plan, _target_state(project, runtime, "single_node"))
    except Exception:  # noqa: BLE001 - a refusal or an unreadable table: the Spark reader decides, and raises it
        return None
    return PreparedScope(scope) if scope.action == "noop" else None


def stage_run(runtime: Runtime, run: ScoredRun, *, period_column: str | None = None) -> ScoredRun:
    """Stage ``run`` in the run store, ``<runs_dir>/<run_id>/``: ``run.json`` beside
    ``predictions.parquet`` (a pandas frame) or beside ``predictions/``, the Parquet folder the
    executors write for a Spark run (the ``spark_udf`` runs here, once).

    A Spark run's facts (rows, and ``period_column``'s nulls and bounds) are observed during that
    write (:func:`lakescore.publish.run.observe_facts`) and saved in ``run.json``: publishing
    reads them instead of aggregating the staged files again.

    Parameters
    ----------
    period_column : str or None
        ``publication.period_column`` (default None: no period facts).

    Returns
    -------
    ScoredRun
        ``run`` itself for a pandas frame; for a Spark run, ``run`` over the staged files (what
        :func:`load_scored` reads back), with its facts, so that publishing never scores again.
    """
    folder = runtime.runs_dir() / run.run_id
    folder.mkdir(parents=True)
    if run.on_spark:
        from lakescore.publish.run import observe_facts  # pyspark: only on the Spark route

        observed, facts = observe_facts(run.predictions, period_column)
        observed.write.mode("error").parquet(str(folder / SPARK_STAGED))
        run = replace(run, predictions=runtime.spark().read.parquet(str(folder / SPARK_STAGED)), facts=facts())
    else:
        run.predictions.to_parquet(folder / "predictions.parquet", index=False)
    meta = {"run_id": run.run_id, "plan": asdict(run.plan), "batch_compute": run.batch_compute,
            "env_manager": run.env_manager, "batch_rows": run.batch_rows, "scope": run.scope, "facts": run.facts}
    (folder / "run.json").write_text(json.dumps(meta, indent=1))
    return run


def load_scored(runtime: Runtime, run_id: str | None = None) -> ScoredRun:
    """Read a staged run (the newest when ``run_id`` is None): a pandas frame from
    ``predictions.parquet``, or a Spark DataFrame over a Spark run's ``predictions/`` folder.

    Raises
    ------
    LakescoreError
        When no scored run exists (run ``lakescore score`` first) or ``run_id`` is unknown.
    """
    runs = sorted(runtime.runs_dir().glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    if run_id is not None:
        runs = [p for p in runs if p.parent.name == run_id]
    if not runs:
        which = f"scored run {run_id}" if run_id else "scored run"
        raise LakescoreError(f"no {which} under {runtime.runs_dir()}; run `lakescore score` first")
    meta: dict[str, Any] = json.loads(runs[-1].read_text())
    plan = meta["plan"]
    plan = ScorePlan(**{**plan, "input_columns": tuple(plan["input_columns"]),
                        "record_keys": tuple(plan["record_keys"]), "warnings": tuple(plan.get("warnings", ())),
                        "feature_lookups": tuple(plan.get("feature_lookups", ())),
                        "components": tuple(plan.get("components", ()))})
    staged = runs[-1].parent / SPARK_STAGED
    frame = (runtime.spark().read.parquet(str(staged)) if staged.is_dir() else
             pd.read_parquet(runs[-1].parent / "predictions.parquet", dtype_backend="numpy_nullable"))
    return ScoredRun(meta["run_id"], plan, meta["batch_compute"], meta["env_manager"], meta["batch_rows"], frame,
                     meta.get("scope", {}), meta.get("facts") or {})
