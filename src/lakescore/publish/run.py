"""``lakescore publish``: publish a scored run to the prediction table exactly once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakescore.config import ProjectConfig
from lakescore.errors import StalePlanError
from lakescore.publish import delta_rs
from lakescore.publish.plan import (
    PublishRequest,
    Scope,
    app_id_for,
    check_period_nulls,
    config_digest,
    period_bounds,
)
from lakescore.publish.state import delta_schema


@dataclass(frozen=True)
class PublishResult:
    """What a publish did: the decision's message, the table version after, and the receipt."""

    table: str
    action: str
    message: str
    table_version: int | None
    receipt: dict[str, Any] | None

    def summary(self) -> dict[str, Any]:
        return {"table": self.table, "action": self.action, "message": self.message,
                "table_version": self.table_version, "receipt": self.receipt}


def build_request(project: ProjectConfig, runtime: Any, run: Any, data: pa.Table) -> PublishRequest:
    """The :class:`PublishRequest` of a scored run (``run`` is a ``ScoredRun`` with its scope).

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
    if inf.publication.mode == "snapshot" and column and column in data.column_names:
        check_period_nulls(f"scored run {run.run_id} of {plan.source_table}", scope.source_version_to, column,
                           data[column].null_count)
    if scope.action == "replace_period" and data.num_rows and column:
        start, end = period_bounds(run.predictions[column].min(), run.predictions[column].max())
    return PublishRequest(
        app_id=app_id_for(inf.job_name, runtime.target, inf.prediction_table), run_id=run.run_id,
        prediction_table=inf.prediction_table, source_table=plan.source_table,
        source_table_id=scope.source_table_id, mode=inf.publication.mode, action=scope.action,
        source_version_from=scope.source_version_from, source_version_to=scope.source_version_to,
        period_start=start, period_end=end, model_name=plan.model_name, model_version=plan.model_version,
        artifact_sha256=plan.artifact_sha256, config_digest=config_digest(inf.publication),
        schema=delta_schema(data.schema), rows=data.num_rows, recovery=scope.recovery,
    )


def _counts(data: pa.Table) -> dict[str, int]:
    """rows_in, predicted and excluded of the predictions (as ``ScoredRun.counts``, from Arrow)."""
    predicted = int(pc.sum(pc.equal(data["scoring_status"], "predicted")).as_py() or 0)
    excluded = int(pc.sum(pc.equal(data["scoring_status"], "excluded")).as_py() or 0)
    return {"rows_in": data.num_rows, "predicted": predicted, "excluded": excluded}


def publish_scored(project: ProjectConfig, runtime: Any, run: Any, *, migrate: bool = False) -> PublishResult:
    """Publish ``run`` (a :class:`lakescore.scoring.run.ScoredRun`) to ``prediction_table`` exactly once.

    The run's scope (decided before scoring) says what to commit: an append of a CDF window or a
    first snapshot, a replacement of the snapshot's UTC days (``publication.mode: snapshot``), or
    a replacement of the whole table (full rebuild, ``rebuild_on_change``, recovery). The commit
    carries the receipt; publishing the same request again writes nothing (``replay: no-op``).

    Parameters
    ----------
    migrate : bool, default False
        ``lakescore publish --migrate``: let the commit evolve the table's schema.

    Raises
    ------
    PublishError
        Conflict, stale plan, refused model or schema change; the table is left as it was.
    """
    inf = project.inference
    data = delta_rs.to_arrow(run.predictions, run_id=run.run_id)
    request = build_request(project, runtime, run, data)
    if request.action == "noop":
        message = Scope.from_json(run.scope).reason
        return PublishResult(inf.prediction_table, "noop", message,
                             runtime.table_version(inf.prediction_table) if runtime.table_exists(inf.prediction_table)
                             else None, None)
    plan = run.plan
    path = runtime.table_path(inf.prediction_table)
    decision, version, receipt = delta_rs.publish(
        str(path), data, request, allow_empty=inf.publication.allow_empty,
        model_change_mode=inf.publication.model_change_mode, migrate=migrate,
        period_column=inf.publication.period_column, keys=list(plan.record_keys),
        read=Scope.from_json(run.scope).read,
        certificate_sha256=plan.certificate_sha256, **_counts(data), batch_compute=run.batch_compute,
        env_manager=run.env_manager, batch_rows=run.batch_rows)
    return PublishResult(inf.prediction_table, decision.action, decision.message, version, receipt)
