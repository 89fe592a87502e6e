"""A scored run: the predictions of one ``lakescore score``, what they were scored from, and their
tally.

The score workflow stages it in the runtime's run store (:func:`lakescore.workflows.score.stage_run`)
so that ``lakescore publish`` can publish it later, or again, exactly once. The route it was scored
on (``batch_compute``) and the form of its predictions (``frame``) are fields: a pandas frame on the
single-node route (and for a run with nothing to score), a Spark DataFrame read back from the staged
files on the Spark route. Either way the counts and the summary come from one :class:`Tally`: rows
per ``(scoring_status, exclusion_reason)``, computed where the rows are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from lakescore.config import BatchCompute, EnvManager
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.spark import spark_tally
from lakescore.scoring.tally import Tally, pandas_tally

FrameKind = Literal["pandas", "spark"]  # what ScoredRun.predictions is: a pandas frame or a Spark DataFrame


@dataclass
class OnePass:
    """What a Spark run published in one pass carries instead of staged files: its predictions are
    the UDF's lazy output, computed once, by the commit that publishes them.

    Attributes
    ----------
    checked : lakescore.publish.spark_delta.KeyCheck
        The within-run key check of the source read, done before the UDF runs; its totals give
        the run's rows and period facts.
    observed : callable
        ``() -> Tally or None``: the tally observed while the commit wrote the rows
        (:func:`lakescore.scoring.spark.observe_tally`); only to be called once it has.
    written : bool
        Whether the commit that computed the rows landed (set by :meth:`complete`).
    """

    checked: Any
    observed: Callable[[], Tally | None]
    written: bool = False

    def tally(self) -> Tally | None:
        """The observed tally once the rows were written (None before, or when it does not add up)."""
        return self.observed() if self.written else None

    def complete(self, receipt: dict[str, Any]) -> dict[str, Any]:
        """The receipt of the commit that wrote the rows, with the counts observed in that pass
        (``predicted``, ``excluded``): what the receipts table keeps (the commit's own copy in
        ``userMetadata`` was written before they were known, with ``rows_in`` only)."""
        self.written = True
        tally = self.tally()
        return receipt if tally is None else {**receipt, "predicted": tally.rows("predicted"),
                                              "excluded": tally.rows("excluded")}


@dataclass(frozen=True)
class ScoredRun:
    """A scored, not yet published, run.

    Attributes
    ----------
    batch_compute : {"spark", "single_node"}
        The route that scored it (``inference.batch_compute`` when it was scored): with the
        placement, it picks the engine that publishes it
        (:func:`lakescore.runtime.base.publication_engine`).
    predictions : pandas.DataFrame or pyspark.sql.DataFrame
        As ``frame`` says.
    frame : {"pandas", "spark"}, default "pandas"
        ``spark``: a Spark DataFrame over the staged files (a Spark run that scored rows);
        ``pandas``: a pandas frame (a single-node run, or a run with nothing to score on either
        route). :attr:`tally` is computed once, on first use, where those rows are.
    """

    run_id: str
    plan: ScorePlan
    batch_compute: BatchCompute
    env_manager: EnvManager
    batch_rows: int
    predictions: Any
    scope: dict[str, Any] = field(default_factory=dict)  # lakescore.publish.plan.Scope as JSON
    facts: dict[str, Any] = field(default_factory=dict)  # lakescore.publish.run.observe_facts, as staged
    frame: FrameKind = "pandas"
    one_pass: OnePass | None = None  # a Spark run published in one pass: not staged, scored by its commit

    @property
    def on_spark(self) -> bool:
        """Whether the predictions are a Spark DataFrame (``frame == "spark"``)."""
        return self.frame == "spark"

    @cached_property
    def tally(self) -> Tally:
        """Rows per ``(scoring_status, exclusion_reason)``: one aggregate on the executors for a
        Spark frame (:func:`lakescore.scoring.spark.spark_tally`, only the groups reach the
        driver), else :func:`lakescore.scoring.tally.pandas_tally`. A run published in one pass
        has the tally its commit observed (counted again only when that commit did not write it:
        a replay found at the commit)."""
        observed = self.one_pass.tally() if self.one_pass is not None else None
        if observed is not None:
            return observed
        return spark_tally(self.predictions) if self.frame == "spark" else pandas_tally(self.predictions)

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
