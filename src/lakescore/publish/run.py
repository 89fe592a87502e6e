"""A scored run as a publication: its :class:`PublishRequest`, its counts, and what a publish did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakescore.config import ProjectConfig
from lakescore.errors import StalePlanError
from lakescore.publish.plan import (
    PublishRequest,
    Scope,
    app_id_for,
    check_period_nulls,
    config_digest,
    period_bounds,
)
from lakescore.publish.state import delta_schema
from lakescore.scoring.run import ScoredRun


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


def build_request(project: ProjectConfig, run: ScoredRun, data: pa.Table, *, target: str) -> PublishRequest:
    """The :class:`PublishRequest` of a scored run (with its scope).

    Parameters
    ----------
    project : ProjectConfig
    run : ScoredRun
        The staged run; ``run.scope`` was decided before scoring.
    data : pyarrow.Table
        Its predictions with ``run_id`` (:func:`lakescore.publish.delta_rs.to_arrow`).
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
    if inf.publication.mode == "snapshot" and column and column in data.column_names:
        check_period_nulls(f"scored run {run.run_id} of {plan.source_table}", scope.source_version_to, column,
                           data[column].null_count)
    if scope.action == "replace_period" and data.num_rows and column:
        start, end = period_bounds(run.predictions[column].min(), run.predictions[column].max())
    return PublishRequest(
        app_id=app_id_for(inf.job_name, target, inf.prediction_table), run_id=run.run_id,
        prediction_table=inf.prediction_table, source_table=plan.source_table,
        source_table_id=scope.source_table_id, mode=inf.publication.mode, action=scope.action,
        source_version_from=scope.source_version_from, source_version_to=scope.source_version_to,
        period_start=start, period_end=end, model_name=plan.model_name, model_version=plan.model_version,
        artifact_sha256=plan.artifact_sha256, config_digest=config_digest(inf.publication),
        schema=delta_schema(data.schema), rows=data.num_rows, recovery=scope.recovery,
    )


def counts(data: pa.Table) -> dict[str, int]:
    """rows_in, predicted and excluded of the predictions (as ``ScoredRun.counts``, from Arrow)."""
    predicted = int(pc.sum(pc.equal(data["scoring_status"], "predicted")).as_py() or 0)
    excluded = int(pc.sum(pc.equal(data["scoring_status"], "excluded")).as_py() or 0)
    return {"rows_in": data.num_rows, "predicted": predicted, "excluded": excluded}
