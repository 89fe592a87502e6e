"""A scored run's counts and summary come from one tally of (scoring_status, exclusion_reason),
the same for a pandas frame and a Spark DataFrame of the same rows."""

import dataclasses

import pandas as pd
import pytest

from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.run import ScoredRun
from lakescore.scoring.tally import Tally, pandas_tally

ROWS = pd.DataFrame({"flight_id": pd.array([1, 2, 3, 4, 5, 6], dtype="Int64"),
                     "scoring_status": pd.array(["predicted", "excluded", "predicted", "excluded", "excluded",
                                                 "predicted"], dtype="string"),
                     "exclusion_reason": pd.array([None, "ineligible:cancelled", None, "outlier:distance_outlier",
                                                   "ineligible:cancelled", None], dtype="string")})
WANT = Tally((("excluded", "ineligible:cancelled", 2), ("excluded", "outlier:distance_outlier", 1),
              ("predicted", None, 3)))


def _run(predictions) -> ScoredRun:
    plan = ScorePlan("main.s.src", 4, "main.s.model", 2, "models:/main.s.model/2", ("x",), ("flight_id",), "c", "a")
    return ScoredRun("r1", plan, "single_node", "local", 100, predictions, {"reason": "first publication"})


def test_the_tally_of_a_pandas_frame_gives_the_counts_and_the_exclusions():
    assert pandas_tally(ROWS) == WANT and pandas_tally(ROWS.iloc[:0]) == Tally()
    run = _run(ROWS)
    assert run.counts == {"rows_in": 6, "predicted": 3, "excluded": 3}
    summary = run.summary()
    assert summary["exclusions"] == {"ineligible:cancelled": 2, "outlier:distance_outlier": 1}
    assert (summary["source"], summary["model"], summary["scope"]) == ("main.s.src@v4", "main.s.model v2",
                                                                        "first publication")


@pytest.mark.spark
def test_the_tally_of_a_spark_frame_is_the_same_aggregate(spark):
    frame = spark.createDataFrame(ROWS.astype(object).where(ROWS.notna(), None),
                                  "flight_id long, scoring_status string, exclusion_reason string")
    run = dataclasses.replace(_run(frame), batch_compute="spark", frame="spark")
    assert run.on_spark and run.tally == WANT
    assert run.counts == {"rows_in": 6, "predicted": 3, "excluded": 3}


def test_the_tally_observed_by_the_action_that_computes_the_rows_is_the_aggregate(spark):
    from lakescore.scoring.spark import observe_tally

    odd = "rule:it's a \\ path ${x}"  # a reason a rule may name: a quote, a backslash and a variable mark in SQL text
    rows = ROWS.assign(exclusion_reason=ROWS["exclusion_reason"].replace("outlier:distance_outlier", odd))
    frame = spark.createDataFrame(rows.astype(object).where(rows.notna(), None),
                                  "flight_id long, scoring_status string, exclusion_reason string")
    tables = {"scoring_status": ("predicted", "excluded"), "exclusion_reason": ("ineligible:cancelled", odd)}
    observed, tally = observe_tally(frame, tables)
    observed.write.format("noop").mode("overwrite").save()  # the one action: the tally is counted on its way
    assert tally() == Tally((("excluded", "ineligible:cancelled", 2), ("excluded", odd, 1), ("predicted", None, 3)))
    # a reason outside the code tables: the groups do not add up, so the caller counts them itself
    observed, tally = observe_tally(frame, {**tables, "exclusion_reason": ("ineligible:cancelled",)})
    observed.write.format("noop").mode("overwrite").save()
    assert tally() is None


def test_the_observed_tally_of_many_groups_over_many_partitions_is_the_aggregate(spark):
    """300 reasons (602 groups), 37 of them present, in 8 partitions: each partition's histogram has
    its own bin per group, and merging them keeps one exact count per group."""
    from pyspark.sql import functions as F

    from lakescore.scoring.spark import observe_tally, spark_tally

    reasons = tuple(f"invalid:column_{i}" for i in range(300))
    frame = (spark.range(20_000).repartition(8)
             .withColumn("exclusion_reason", F.when(F.col("id") % 3 == 0, F.concat(
                 F.lit("invalid:column_"), ((F.col("id") * 7) % 37 * 8).cast("string"))))
             .withColumn("scoring_status", F.when(F.col("exclusion_reason").isNull(), F.lit("predicted"))
                         .otherwise(F.lit("excluded"))))
    observed, tally = observe_tally(frame, {"scoring_status": ("predicted", "excluded"), "exclusion_reason": reasons})
    observed.write.format("noop").mode("overwrite").save()
    got = tally()
    assert got is not None and got == spark_tally(frame)
    assert len(got.groups) == 38 and got.rows() == 20_000
