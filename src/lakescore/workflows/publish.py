"""``lakescore publish``: publish a scored run to the prediction table exactly once (``lakescore score
--publish``: score, then publish); ``lakescore receipts``: list a prediction table's receipts.

The engine that writes is the placement's for the run's route
(:func:`lakescore.runtime.base.publication_engine`), and the route hands its writer
(:mod:`lakescore.workflows.routes.writers`): Spark Delta from the executors, its rows read from the
staged files and never brought to the driver; or, for a single-node run on the local placement,
delta-rs from this process. Both run the same commit loop and write the same receipts.
"""

from __future__ import annotations

from typing import Any

from lakescore import progress
from lakescore.config import BatchCompute, ProjectConfig
from lakescore.errors import StalePlanError
from lakescore.publish.plan import PublishRequest, Scope, app_id_for, check_period_nulls, config_digest, period_bounds
from lakescore.publish.run import FrameFacts, PublishResult
from lakescore.runtime import Runtime
from lakescore.scoring.run import ScoredRun
from lakescore.workflows.routes import choose_route
from lakescore.workflows.score import load_scored, score, score_then


def publish(project: ProjectConfig, runtime: Runtime, run: ScoredRun, *, migrate: bool = False) -> PublishResult:
    """Publish ``run`` to ``prediction_table`` exactly once.

    The run's scope (decided before scoring) says what to commit: an append of a CDF window or a
    first snapshot, a replacement of the snapshot's UTC days (``publication.mode: snapshot``), or
    a replacement of the whole table (full rebuild, ``rebuild_on_change``, recovery). The commit
    carries the receipt; publishing the same request again writes nothing (``replay: no-op``).
    The engine is the placement's for the run's route (:func:`~lakescore.runtime.base.publication_engine`,
    carried by :func:`~lakescore.workflows.routes.choose_route` of ``run.batch_compute``):
    Spark Delta (``engine: spark-delta``, its ``run_id`` column added in Spark, its facts those
    observed when the run was staged, else a Spark aggregate) for a Spark run, and for any run on
    Databricks; delta-rs for a single-node run on the local placement.

    Parameters
    ----------
    run : ScoredRun
        A staged run (:func:`lakescore.workflows.score.score` or ``load_scored``).
    migrate : bool, default False
        ``lakescore publish --migrate``: let the commit evolve the table's schema.

    Raises
    ------
    PublishError
        Conflict, stale plan, refused model or schema change; the table is left as it was.
    """
    inf = project.inference
    column, table = inf.publication.period_column, inf.prediction_table
    writer = choose_route(runtime, run.batch_compute).writer(period_column=column)  # the run's route, once
    engine = writer.engine
    if run.scope and Scope.from_json(run.scope).action == "noop":  # decided before scoring: no rows to look at
        return PublishResult(table, "noop", Scope.from_json(run.scope).reason,
                             runtime.table_version(table) if runtime.table_exists(table) else None, None, engine)
    with progress.step(f"publish ({engine}) {table}") as shown:
        data, facts = writer.rows(run)
        request = build_request(project, run, facts, target=runtime.target)
        plan, one = run.plan, run.one_pass
        # one pass: the rows are counted from the source before the commit, the tally by the commit itself
        counts = run.counts if one is None else {"rows_in": facts.rows}
        options: dict[str, Any] = dict(
            allow_empty=inf.publication.allow_empty, model_change_mode=inf.publication.model_change_mode,
            migrate=migrate, period_column=column, keys=list(plan.record_keys), read=Scope.from_json(run.scope).read,
            certificate_sha256=plan.certificate_sha256, decision_threshold=plan.decision_threshold or None,
            **counts, batch_compute=run.batch_compute,
            **({"checked": one.checked, "complete": one.complete} if one is not None else {}),
            env_manager=run.env_manager, batch_rows=run.batch_rows,
            **({"feature_lookups": plan.lookup_record} if plan.feature_tables else {}),
            **({"components": [dict(c) for c in plan.components]} if plan.components else {}))
        decision, version, receipt = writer.publish(table, data, request, facts=facts, **options)
        shown.total_rows(facts.rows)
    return PublishResult(table, decision.action, decision.message, version, receipt, engine)


def build_request(project: ProjectConfig, run: ScoredRun, facts: FrameFacts, *, target: str) -> PublishRequest:
    """The :class:`PublishRequest` of a scored run (with its scope).

    Parameters
    ----------
    project : ProjectConfig
    run : ScoredRun
        The staged run; ``run.scope`` was decided before scoring.
    facts : FrameFacts
        Schema, rows and period facts of its predictions with ``run_id``
        (:func:`lakescore.publish.run.arrow_facts` or :func:`~lakescore.publish.run.spark_facts`).
    target : str
        The bundle target: part of the job's app id (:func:`~lakescore.publish.plan.app_id_for`).

    Raises
    ------
    StalePlanError
        The run was staged without a scope (by an older lakescore): score it again.
    NullPeriodError
        A snapshot run whose predictions have null ``period_column`` values (staged before
        scoring refused them): nothing is written.
    """
    inf = project.inference
    if not getattr(run, "scope", None):
        raise StalePlanError(f"scored run {run.run_id} has no publication scope (staged by an older lakescore); "
                             "score again: lakescore score --publish", table=inf.prediction_table)
    scope = Scope.from_json(run.scope)
    plan, column = run.plan, inf.publication.period_column
    start = end = None
    if inf.publication.mode == "snapshot" and column and facts.has_period:
        check_period_nulls(f"scored run {run.run_id} of {plan.source_table}", scope.source_version_to, column,
                           facts.period_nulls)
    if scope.action == "replace_period" and facts.rows and column:
        start, end = period_bounds(facts.period_low, facts.period_high)
    return PublishRequest(
        app_id=app_id_for(inf.job_name, target, inf.prediction_table), run_id=run.run_id,
        prediction_table=inf.prediction_table, source_table=plan.source_table,
        source_table_id=scope.source_table_id, mode=inf.publication.mode, action=scope.action,
        source_version_from=scope.source_version_from, source_version_to=scope.source_version_to,
        period_start=start, period_end=end, model_name=plan.model_name, model_version=plan.model_version,
        artifact_sha256=plan.artifact_sha256, config_digest=config_digest(inf.publication),
        schema=facts.schema, rows=facts.rows, recovery=scope.recovery,
    )


def publish_staged(project: ProjectConfig, runtime: Runtime, *, run_id: str | None = None, migrate: bool = False,
                   recover: bool = False) -> PublishResult:
    """``lakescore publish``: publish a staged run (``run_id``, default the newest), or with
    ``recover`` (``--recover-predictions``) score the pinned snapshot again and replace the table.

    Raises
    ------
    LakescoreError
        No staged run (or no run ``run_id``); and as :func:`publish`.
    """
    run = score(project, runtime, recover=True) if recover else load_scored(runtime, run_id)
    return publish(project, runtime, run, migrate=migrate)


def score_and_publish(project: ProjectConfig, runtime: Runtime) -> dict[str, Any]:
    """``lakescore score --publish`` (the bundle's score job): score, then publish that run; on
    the Spark route in one pass (:func:`lakescore.workflows.score.score_then`): the UDF's output
    goes straight into the commit, nothing staged.

    Returns
    -------
    dict
        The score summary, with the publish summary under ``publish``.
    """
    scored, published = score_then(project, runtime, publish=lambda run: publish(project, runtime, run))
    return {**scored.summary(), "publish": published.summary()}  # type: ignore[union-attr]  # publish was given


def list_receipts(runtime: Runtime, table: str, *, batch_compute: BatchCompute = "single_node") -> dict[str, Any]:
    """``lakescore receipts TABLE``: every lakescore receipt of ``table``, newest first.

    Both engines read the receipts either wrote; ``batch_compute`` picks the route whose engine
    reads them (default ``single_node``: delta-rs locally, no JVM started; Spark Delta by name on
    Databricks).

    Raises
    ------
    TableNotFoundError
        The table does not exist (a missing table is an error, not an empty list).
    """
    runtime.table_version(table)  # a missing table raises, naming it and the fix
    return {"table": table, "receipts": choose_route(runtime, batch_compute).target(table).receipts()}
