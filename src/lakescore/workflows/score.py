"""``lakescore score``: preflight, decide what to score, read it, score it on the configured route,
stage the result for publication.

Which rows a run scores is decided against the prediction table's watermark before scoring
(:func:`lakescore.publish.plan.plan_scope`): the pinned snapshot, or the inserted rows of a change
data feed window, read here once and handed to the route (a pandas frame to the single-node route,
a lazy Spark DataFrame to the Spark route). The route is chosen once per run
(:func:`lakescore.workflows.routes.choose_route`): how a Spark run differs (reads, lookups, the
UDF, staging) is in :mod:`lakescore.workflows.routes.spark`. A model with feature lookups gets them
joined on its route, each feature table at the version preflight pinned. A scored run is staged in
the runtime's run store (``<runs_dir>/<run_id>/``: run.json beside predictions.parquet, or beside
the ``predictions/`` Parquet folder that the Spark route's executors write) so that ``lakescore
publish`` can publish it later, or again, exactly once. On the Spark route no source or prediction row reaches the driver:
the ``spark_udf`` runs once, when the executors write the staged files, and the counts come from
one aggregate of them; or, for ``score --publish`` (:func:`score_then`), in one pass: the UDF runs
in the commit that publishes its output, and nothing is staged.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict
from typing import Any, TypeVar

from lakescore import progress
from lakescore.config import ProjectConfig
from lakescore.errors import ChangeFeedReadError, ConfigError, LakescoreError
from lakescore.publish.commit import check_keys
from lakescore.publish.plan import (
    Scope,
    TargetState,
    app_id_for,
    cdf_recovery,
    check_period_nulls,
    plan_scope,
    publication_pass,
    settle_window,
)
from lakescore.publish.scope import PreparedScope, empty_predictions
from lakescore.publish.state import read_source, window_history
from lakescore.runtime import Runtime
from lakescore.scoring.preflight import ScorePlan, preflight
from lakescore.scoring.run import ScoredRun
from lakescore.workflows.routes import Route, choose_route
from lakescore.workflows.routes.base import finish_frame, source_rows

T = TypeVar("T")

__all__ = ["score", "score_then", "prepare_scope", "decide_scope", "noop_before_spark", "finish_run", "source_rows", "stage_run",
           "load_scored"]


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
    return score_then(project, runtime, recover=recover)[0]


def score_then(project: ProjectConfig, runtime: Runtime, *, recover: bool = False,
               publish: Callable[[ScoredRun], T] | None = None) -> tuple[ScoredRun, T | None]:
    """Score (as :func:`score`), then, with ``publish``, publish the run: in one pass where
    :func:`~lakescore.publish.plan.publication_pass` says so, else the staged run.

    One pass (a Spark run published with Spark Delta): the run is not staged; the route checks
    its keys and counts its facts on the source read, on a thread of its own while the driver
    copies the model and sets up the UDF (:meth:`~lakescore.workflows.routes.base.Route.check_ahead`,
    :meth:`~lakescore.workflows.routes.base.Route.one_pass`), and ``publish`` runs while the
    model the workers read and the session's read settings are still in place: the UDF runs in
    its commit, once.

    Parameters
    ----------
    publish : callable, optional
        ``run -> result``: the publication of the scored run (``lakescore score --publish``).

    Returns
    -------
    (ScoredRun, result or None)
        The run (staged, or published in one pass with its tally as its commit observed it) and
        what ``publish`` returned (None without it).

    Raises
    ------
    ConfigError, PublishError
        As :func:`score`, and whatever ``publish`` raises (the table is left as it was); on the
        one pass, a record key repeated in the rows scored, before the table is read.
    """
    inf = project.inference
    route = choose_route(runtime, inf.batch_compute)  # once for the run: every step below asks it
    runtime.mlflow()
    plan = preflight(project, runtime)
    # a replay that writes nothing is decided before a JVM starts, where delta-rs can read the table
    prepared = (noop_before_spark(project, runtime, plan, recover=recover, route=route)
                or prepare_scope(project, runtime, plan, recover=recover, route=route))
    if prepared.empty:
        run = stage_run(runtime, finish_run(project, runtime, plan, prepared, empty_predictions(plan.record_keys),
                                            route=route), route=route)
        return run, (publish(run) if publish is not None else None)
    one = publication_pass(batch_compute=route.name, engine=route.engine, publishing=publish is not None,
                           scope=prepared.scope) == "one_pass"
    model_dir = runtime.runs_dir() / "models" / uuid.uuid4().hex  # this run's copy of the model
    column = inf.publication.period_column
    published: T | None = None
    try:
        with progress.step(f"score ({route.name}) {plan.source_table}@v{plan.source_version}") as shown, \
                route.session_kept(), \
                (route.check_ahead(plan, prepared, period_column=column) if one else nullcontext()) as checking:
            # one pass: the executors check the source's keys while the driver sets up the UDF
            scored = route.score(plan, prepared, batch_rows=inf.spark_udf_prediction_batch_rows,
                                 env_manager=inf.spark_udf_env_manager, model_dir=model_dir, period_column=column)
            run = finish_run(project, runtime, plan, prepared, scored, route=route)
            if checking is not None and publish is not None:
                checked = checking.result()
                # a repeated key refuses the run here: before the prediction table is read or written
                check_keys(checked.repeated, table=inf.prediction_table)
                run = route.one_pass(run, checked, model_dir=model_dir, period_column=column)
                published = publish(run)  # the UDF runs here, in the commit
                # the tally its commit observed; a replay found at the commit counts it now, while the model is here
                shown.total_rows(run.counts["rows_in"])
            else:
                run = stage_run(runtime, run, period_column=column, route=route)
                shown.total_rows(run.counts["rows_in"])
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)  # the staged files (or the commit) hold the predictions
    if publish is not None and not one:
        published = publish(run)
    return run, published


def finish_run(project: ProjectConfig, runtime: Runtime, plan: ScorePlan, prepared: PreparedScope,
               scored: Any, *, route: Route | None = None) -> ScoredRun:
    """The :class:`ScoredRun` of ``scored``: the period column (when set) and the model's name and
    version added (by the route, :meth:`~lakescore.workflows.routes.base.Route.finish`: lazily in
    Spark on the Spark route), under a new run id.

    Parameters
    ----------
    scored : pandas.DataFrame or pyspark.sql.DataFrame
        The route's predictions; for a run with nothing to score (``prepared.empty``), the empty
        pandas frame of :func:`lakescore.publish.scope.empty_predictions` on either route.
    route : Route, optional
        The run's route (default: the project's, :func:`~lakescore.workflows.routes.choose_route`).
    """
    inf = project.inference
    route = route or choose_route(runtime, inf.batch_compute)
    column = inf.publication.period_column
    if prepared.empty:  # nothing scored: a pandas frame on either route, no session for it
        scored, frame = finish_frame(runtime, scored, plan, prepared, period_column=column), "pandas"
    else:
        scored, frame = route.finish(scored, plan, prepared, period_column=column)
    return ScoredRun(uuid.uuid4().hex, plan, route.name, inf.spark_udf_env_manager,
                     inf.spark_udf_prediction_batch_rows, scored, prepared.scope.to_json(), frame=frame)  # type: ignore[arg-type]  # 'pandas' or 'spark'


def prepare_scope(project: ProjectConfig, runtime: Runtime, plan: ScorePlan, *,
                  recover: bool = False, route: Route | None = None) -> PreparedScope:
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
    route : Route, optional
        The run's route (default: the project's, :func:`~lakescore.workflows.routes.choose_route`).

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
    route = route or choose_route(runtime, inf.batch_compute)
    target = route.target(inf.prediction_table, app_id=_app_id(project, runtime)).read()
    scope = decide_scope(project, runtime, plan, target, recover=recover)
    if scope.read != "cdf":
        return PreparedScope(scope)
    first, last = int(scope.source_version_from), int(scope.source_version_to)  # type: ignore[arg-type]
    columns = list(dict.fromkeys([*plan.record_keys, *plan.source_columns, *([pub.period_column] if pub.period_column else [])]))
    try:
        rows, inserted, kinds = route.window(name, first=first, last=last, columns=columns)
    except ChangeFeedReadError as err:
        raise cdf_recovery(name, inf.prediction_table, first, last,
                           f"reading it failed ({err.fields.get('reason', err)})") from err
    settled = settle_window(scope, pub, source_table=name, inserted=inserted, changes=kinds)
    return (PreparedScope(settled, rows, inserted) if settled.read == "cdf" else PreparedScope(settled))


def _app_id(project: ProjectConfig, runtime: Runtime) -> str:
    """The job's app transaction id on the prediction table (:func:`~lakescore.publish.plan.app_id_for`)."""
    inf = project.inference
    return app_id_for(inf.job_name, runtime.target, inf.prediction_table)


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
                      recover: bool = False, route: Route | None = None) -> PreparedScope | None:
    """A replay no-op of a Spark run, decided with delta-rs before any Spark session starts; None
    when this cannot be decided so (the Spark route's own reader then plans the run).

    Only where the route has a reader that starts no session
    (:meth:`~lakescore.workflows.routes.base.Route.early_target`: the Spark route, where the
    placement reads prediction tables with delta-rs as well as Spark Delta, the local one: both
    engines read the receipts either wrote), only for ``publication.mode:
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
    route = route or choose_route(runtime, inf.batch_compute)
    early = route.early_target(inf.prediction_table, app_id=_app_id(project, runtime))
    if recover or inf.publication.mode != "incremental" or early is None:
        return None
    try:
        scope = decide_scope(project, runtime, plan, early.read())
    except Exception:  # noqa: BLE001 - a refusal or an unreadable table: the Spark reader decides, and raises it
        return None
    return PreparedScope(scope) if scope.action == "noop" else None


def stage_run(runtime: Runtime, run: ScoredRun, *, period_column: str | None = None,
              route: Route | None = None) -> ScoredRun:
    """Stage ``run`` in the run store, ``<runs_dir>/<run_id>/``: ``run.json`` beside the run's
    predictions as its route stages them (:meth:`~lakescore.workflows.routes.base.Route.stage`):
    ``predictions.parquet`` for a pandas frame, or ``predictions/``, the Parquet folder the
    executors write for a Spark run (the ``spark_udf`` runs here, once).

    A Spark run's facts (rows, and ``period_column``'s nulls and bounds) are observed during that
    write (:func:`lakescore.publish.run.observe_facts`) and saved in ``run.json``: publishing
    reads them instead of aggregating the staged files again.

    Parameters
    ----------
    period_column : str or None
        ``publication.period_column`` (default None: no period facts).
    route : Route, optional
        The run's route (default: :func:`~lakescore.workflows.routes.choose_route` of ``run.batch_compute``).

    Returns
    -------
    ScoredRun
        ``run`` itself for a pandas frame; for a Spark run, ``run`` over the staged files (what
        :func:`load_scored` reads back), with its facts, so that publishing never scores again.
    """
    route = route or choose_route(runtime, run.batch_compute)
    folder = runtime.runs_dir() / run.run_id
    folder.mkdir(parents=True)
    run = route.stage(run, folder, period_column=period_column)
    meta = {"run_id": run.run_id, "plan": asdict(run.plan), "batch_compute": run.batch_compute,
            "env_manager": run.env_manager, "batch_rows": run.batch_rows, "scope": run.scope, "facts": run.facts}
    (folder / "run.json").write_text(json.dumps(meta, indent=1))
    return run


def load_scored(runtime: Runtime, run_id: str | None = None) -> ScoredRun:
    """Read a staged run (the newest when ``run_id`` is None) through its route
    (:meth:`~lakescore.workflows.routes.base.Route.load`): a pandas frame from
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
    route = choose_route(runtime, meta["batch_compute"])
    predictions, frame = route.load(runs[-1].parent)
    return ScoredRun(meta["run_id"], plan, route.name, meta["env_manager"], meta["batch_rows"], predictions,
                     meta.get("scope", {}), meta.get("facts") or {}, frame=frame)
