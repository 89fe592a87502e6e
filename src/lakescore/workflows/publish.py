"""``lakescore publish``: publish a scored run to the prediction table exactly once (``lakescore score
--publish``: score, then publish); ``lakescore receipts``: list a prediction table's receipts."""

from __future__ import annotations

from typing import Any

from lakescore.config import ProjectConfig
from lakescore.publish import delta_rs
from lakescore.publish.plan import Scope
from lakescore.publish.run import PublishResult, build_request, counts
from lakescore.publish.state import receipts
from lakescore.runtime import Runtime
from lakescore.scoring.run import ScoredRun
from lakescore.workflows.score import load_scored, score


def publish(project: ProjectConfig, runtime: Runtime, run: ScoredRun, *, migrate: bool = False) -> PublishResult:
    """Publish ``run`` to ``prediction_table`` exactly once.

    The run's scope (decided before scoring) says what to commit: an append of a CDF window or a
    first snapshot, a replacement of the snapshot's UTC days (``publication.mode: snapshot``), or
    a replacement of the whole table (full rebuild, ``rebuild_on_change``, recovery). The commit
    carries the receipt; publishing the same request again writes nothing (``replay: no-op``).

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
    data = delta_rs.to_arrow(run.predictions, run_id=run.run_id)
    request = build_request(project, run, data, target=runtime.target)
    if request.action == "noop":
        message = Scope.from_json(run.scope).reason
        return PublishResult(inf.prediction_table, "noop", message,
                             runtime.table_version(inf.prediction_table) if runtime.table_exists(inf.prediction_table)
                             else None, None)
    plan = run.plan
    decision, version, receipt = delta_rs.publish(
        runtime.table_location(inf.prediction_table), data, request, allow_empty=inf.publication.allow_empty,
        model_change_mode=inf.publication.model_change_mode, migrate=migrate,
        period_column=inf.publication.period_column, keys=list(plan.record_keys),
        read=Scope.from_json(run.scope).read,
        certificate_sha256=plan.certificate_sha256, **counts(data), batch_compute=run.batch_compute,
        env_manager=run.env_manager, batch_rows=run.batch_rows)
    return PublishResult(inf.prediction_table, decision.action, decision.message, version, receipt)


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
    """``lakescore score --publish`` (the bundle's score job): score, then publish that run.

    Returns
    -------
    dict
        The score summary, with the publish summary under ``publish``.
    """
    scored = score(project, runtime)
    return {**scored.summary(), "publish": publish(project, runtime, scored).summary()}


def list_receipts(runtime: Runtime, table: str) -> dict[str, Any]:
    """``lakescore receipts TABLE``: every lakescore receipt of ``table``, newest first.

    Raises
    ------
    TableNotFoundError
        The table does not exist (a missing table is an error, not an empty list).
    """
    runtime.table_version(table)  # a missing table raises, naming it and the fix
    return {"table": table, "receipts": receipts(runtime.table_location(table))}
