"""A scored run: the predictions of one ``lakescore score``, what they were scored from, and their
tally.

The score workflow stages it in the runtime's run store (:func:`lakescore.workflows.score.stage_run`)
so that ``lakescore publish`` can publish it later, or again, exactly once. The predictions are a
pandas frame on the single-node route and a Spark DataFrame (read back from the staged files) on
the Spark route; either way the counts and the summary come from one :class:`Tally`: rows per
``(scoring_status, exclusion_reason)``, computed where the rows are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


from lakescore.config import BatchCompute, EnvManager
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.spark import spark_tally
from lakescore.scoring.tally import Tally, pandas_tally


def tally_of(predictions: Any) -> Tally:
    """The :class:`Tally` of a pandas frame, or of a Spark DataFrame with one aggregate on the
    executors (:func:`lakescore.scoring.spark.spark_tally`): only the groups reach the driver."""
    return spark_tally(predictions) if hasattr(predictions, "sparkSession") else pandas_tally(predictions)


@dataclass(frozen=True)
class ScoredRun:
    """A scored, not yet published, run.

    ``predictions`` is a pandas DataFrame (single-node route, or a run with nothing to score) or a
    Spark DataFrame over the staged files (Spark route); :attr:`tally` is computed once, on first
    use, where those rows are.
    """

    run_id: str
    plan: ScorePlan
    batch_compute: BatchCompute
    env_manager: EnvManager
    batch_rows: int
    predictions: Any
    scope: dict[str, Any] = field(default_factory=dict)  # lakescore.publish.plan.Scope as JSON
    facts: dict[str, Any] = field(default_factory=dict)  # lakescore.publish.run.observe_facts, as staged

    @property
    def on_spark(self) -> bool:
        """Whether the predictions are a Spark DataFrame (published with Spark Delta)."""
        return hasattr(self.predictions, "sparkSession")

    @cached_property
    def tally(self) -> Tally:
        """Rows per ``(scoring_status, exclusion_reason)`` (:func:`tally_of`)."""
        return tally_of(self.predictions)

    @property
    def counts(self) -> dict[str, int]:
        return {"rows_in": self.tally.rows(), "predicted": self.tally.rows("predicted"),
                "excluded": self.tally.rows("excluded")}

    def summary(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "source": f"{self.plan.source_table}@v{self.plan.source_version}",
                "model": f"{self.plan.model_name} v{self.plan.model_version}", "batch_compute": self.batch_compute,
                **self.counts, "exclusions": self.tally.exclusions,
                "scope": self.scope.get("reason"),
                **({"feature_lookups": self.plan.lookup_record} if self.plan.feature_tables else {}),
                **({"components": [c["name"] for c in self.plan.components]} if self.plan.components else {}),
                **({"warnings": list(self.plan.warnings)} if self.plan.warnings else {})}
