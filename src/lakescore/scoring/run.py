"""A scored run: the predictions of one ``lakescore score`` and what they were scored from.

The score workflow stages it in the runtime's run store (:func:`lakescore.workflows.score.stage_run`)
so that ``lakescore publish`` can publish it later, or again, exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from lakescore.scoring.preflight import ScorePlan


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
