"""``lakescore score``: preflight, score on the configured route, stage the result for publication.

A scored run is staged under ``<home>/runs/<run_id>/`` (predictions.parquet and run.json) so that
``lakescore publish`` can publish it later, or again, exactly once.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from lakescore import progress
from lakescore.config import ProjectConfig
from lakescore.errors import LakescoreError
from lakescore.scoring.preflight import ScorePlan, preflight


@dataclass(frozen=True)
class ScoredRun:
    """A scored, not yet published, run."""

    run_id: str
    plan: ScorePlan
    batch_compute: str
    env_manager: str
    batch_rows: int
    predictions: pd.DataFrame
    scope: dict[str, Any] = field(default_factory=dict)  # lakescore.publish.plan.Scope as JSON

    @property
    def counts(self) -> dict[str, int]:
        status = self.predictions["scoring_status"]
        return {"rows_in": len(self.predictions), "predicted": int((status == "predicted").sum()),
                "excluded": int((status == "excluded").sum())}

    def summary(self) -> dict[str, Any]:
        reasons = self.predictions["exclusion_reason"].value_counts().to_dict()
        return {"run_id": self.run_id, "source": f"{self.plan.source_table}@v{self.plan.source_version}",
                "model": f"{self.plan.model_name} v{self.plan.model_version}", "batch_compute": self.batch_compute,
                **self.counts, "exclusions": {str(k): int(v) for k, v in reasons.items()},
                "scope": self.scope.get("reason"),
                **({"warnings": list(self.plan.warnings)} if self.plan.warnings else {})}


def _score_route(inf: Any, source: Any, plan: Any) -> pd.DataFrame:
    if inf.batch_compute == "spark":
        from lakescore.scoring.spark import score_spark

        return score_spark(source, plan, batch_rows=inf.spark_udf_prediction_batch_rows,
                           env_manager=inf.spark_udf_env_manager)
    from lakescore.scoring.local import score_single_node

    return score_single_node(source, plan, batch_rows=inf.spark_udf_prediction_batch_rows)


def score_project(project: ProjectConfig, runtime: Any, *, recover: bool = False) -> ScoredRun:
    """Score the project's source table with the selected model (``lakescore score``).

    Returns
    -------
    ScoredRun
        Predictions of shape (n_source_rows, n_keys + 6): keys, ``prediction``, ``probability``,
        ``scoring_status``, ``exclusion_reason``, ``model_name``, ``model_version``.

    Raises
    ------
    ConfigError
        From :func:`lakescore.scoring.preflight.preflight`, before any work.
    PublishError
        From :func:`lakescore.publish.scope.prepare_scope`: which rows to score is decided against
        the prediction table's watermark before scoring (``recover``: the whole pinned snapshot).
    """
    from lakescore.publish.scope import attach_period, empty_predictions, prepare_scope

    inf = project.inference
    plan = preflight(project, runtime)
    prepared = prepare_scope(project, runtime, plan, recover=recover)
    source = prepared.source_runtime(runtime, plan.source_table)  # a CDF window: only its inserted rows
    if prepared.empty:
        scored = empty_predictions(plan.record_keys)
    else:
        with progress.step(f"score ({inf.batch_compute}) {plan.source_table}@v{plan.source_version}") as shown:
            scored = _score_route(inf, source, plan)
            shown.total_rows(len(scored))
    scored = attach_period(project, runtime, plan, prepared, scored)
    scored["model_name"] = pd.array([plan.model_name] * len(scored), dtype="string")
    scored["model_version"] = pd.array([plan.model_version] * len(scored), dtype="Int64")
    run = ScoredRun(uuid.uuid4().hex, plan, inf.batch_compute, inf.spark_udf_env_manager,
                    inf.spark_udf_prediction_batch_rows, scored, prepared.scope.to_json())
    _stage(runtime, run)
    return run


def _stage(runtime: Any, run: ScoredRun) -> None:
    folder = runtime.runs_dir() / run.run_id
    folder.mkdir(parents=True)
    run.predictions.to_parquet(folder / "predictions.parquet", index=False)
    meta = {"run_id": run.run_id, "plan": asdict(run.plan), "batch_compute": run.batch_compute,
            "env_manager": run.env_manager, "batch_rows": run.batch_rows, "scope": run.scope}
    (folder / "run.json").write_text(json.dumps(meta, indent=1))


def load_scored(runtime: Any, run_id: str | None = None) -> ScoredRun:
    """Read a staged run (the newest when ``run_id`` is None).

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
    meta = json.loads(runs[-1].read_text())
    plan = meta["plan"]
    plan = ScorePlan(**{**plan, "input_columns": tuple(plan["input_columns"]),
                        "record_keys": tuple(plan["record_keys"]), "warnings": tuple(plan.get("warnings", ()))})
    frame = pd.read_parquet(runs[-1].parent / "predictions.parquet", dtype_backend="numpy_nullable")
    return ScoredRun(meta["run_id"], plan, meta["batch_compute"], meta["env_manager"], meta["batch_rows"], frame,
                     meta.get("scope", {}))
