"""``lakescore publish``: publish a scored run to the prediction table exactly once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakescore.config import ProjectConfig
from lakescore.publish import delta_rs
from lakescore.publish.plan import PublishRequest, app_id_for


@dataclass(frozen=True)
class PublishResult:
    """What a publish did: the decision's message, the table version after, and the receipt."""

    table: str
    action: str
    message: str
    table_version: int | None
    receipt: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        return {"table": self.table, "action": self.action, "message": self.message,
                "table_version": self.table_version, "receipt": self.receipt}


def publish_scored(project: ProjectConfig, runtime: Any, run: Any) -> PublishResult:
    """Publish ``run`` (a :class:`lakescore.scoring.run.ScoredRun`) to ``prediction_table``.

    The commit carries the app transaction (``app_id`` from job name, target and table;
    ``version`` = the pinned source version) and the receipt. Publishing the same source version
    again writes nothing and reports ``replay: no-op``.

    Raises
    ------
    PublishError
        Schema mismatch or persistent commit conflicts; the table is left as it was.
    """
    inf = project.inference
    frame = run.predictions.assign(run_id=run.run_id)
    plan = run.plan
    request = PublishRequest(
        app_id=app_id_for(inf.job_name, runtime.target, inf.prediction_table), run_id=run.run_id,
        prediction_table=inf.prediction_table, source_table=plan.source_table,
        source_version=plan.source_version, model_name=plan.model_name, model_version=plan.model_version,
        artifact_sha256=plan.artifact_sha256, columns=tuple(frame.columns),
    )
    receipt = {
        "run_id": run.run_id, "request_digest": request.digest, "app_id": request.app_id,
        "source_table": plan.source_table, "source_version": plan.source_version,
        "model_name": plan.model_name, "model_version": plan.model_version,
        "artifact_sha256": plan.artifact_sha256, "certificate_sha256": plan.certificate_sha256,
        **run.counts, "batch_compute": run.batch_compute, "env_manager": run.env_manager,
        "batch_rows": run.batch_rows,
    }
    path = str(runtime.table_path(inf.prediction_table))
    runtime.table_path(inf.prediction_table).parent.mkdir(parents=True, exist_ok=True)
    data = pa.Table.from_pandas(frame, preserve_index=False)
    decision, version = delta_rs.commit(path, data, request, receipt)
    if decision.action == "noop":  # report what the table holds, not what this run would have written
        receipt = next((r for r in delta_rs.receipts(path) if r.get("app_id") == request.app_id), receipt)
    return PublishResult(inf.prediction_table, decision.action, decision.message, version, receipt)
