"""The monitoring aggregates: the Spark engine against the pandas engine on real Delta tables of
demo-shaped data (2,000 real flights scored by the demo recipe), performance against
scikit-learn, and the label digest's definition across engines and versions."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F  # noqa: N812
from sklearn.metrics import log_loss, roc_auc_score

from lakescore.config import MonitoringConfig
from lakescore.monitoring.aggregates import java_double, pandas_aggregates, spark_text
from lakescore.monitoring.drift import training_profile
from lakescore.monitoring.labels import DIGEST_PREFIX, digest, label_snapshot, labels_changed
from lakescore.monitoring.performance import performance_figures
from lakescore.monitoring.quality import figures
from lakescore.monitoring.report import calibration_bins, histogram_bins
from lakescore.monitoring.spark_aggregates import (
    PERCENTILE_ACCURACY,
    spark_aggregates,
    spark_calibration_bins,
    spark_histogram_bins,
    spark_labels,
)

PREDICTIONS, SOURCE, LABELS = "main.m.predictions", "main.m.source", "main.m.labels"
FEATURES = ["month", "dep_time", "dep_delay", "distance", "hour", "carrier", "origin"]
MON = MonitoringConfig(quality_table="main.m.q", label_table=LABELS, label_column="is_late",
                       label_expression="arr_delay > 15")


@pytest.fixture
def lake(spark_runtime, flights_sample, small_chain):
    """Delta tables: the sample scored by the demo chain (model versions 1 and 2 alternating, one
    run), its inputs as the source, and its arrival delays as the label table (a third missing)."""
    scored = small_chain.predict(flights_sample)
    predictions = pd.concat([flights_sample[["flight_id"]], scored], axis=1).assign(
        model_version=np.where(np.arange(len(scored)) % 2 == 0, 1, 2), run_id="run-1")
    spark_runtime.write_table(PREDICTIONS, predictions)
    spark_runtime.write_table(SOURCE, flights_sample[["flight_id", *FEATURES]])
    delays = flights_sample[["flight_id", "arr_delay"]].iloc[::3]
    unknown = flights_sample[["flight_id"]].iloc[1::3].assign(arr_delay=np.nan)
    spark_runtime.write_table(LABELS, pd.concat([delays, unknown], ignore_index=True))
    early = flights_sample[flights_sample["month"] <= 6]
    profile = training_profile(early, feature_columns=FEATURES, predictions=small_chain.predict(early))
    return profile


def engines(runtime, profile, version):
    """(pandas aggregates, Spark aggregates, the pandas rows) of one model version's rows."""
    keys = ["flight_id"]
    table = runtime.read_table(PREDICTIONS)
    part = table[table["model_version"] == version].reset_index(drop=True)
    inputs = part[keys].merge(runtime.read_table(SOURCE), on=keys, how="left")[FEATURES]
    labels = label_snapshot(runtime.read_table(LABELS), 0, MON, keys).for_rows(part, keys)
    expected = pandas_aggregates(part, inputs=inputs, labels=labels, profile=profile, keys=keys)

    source = runtime.spark_source(SOURCE, version=0).select("flight_id", *[F.col(c).alias(f"_in_{c}") for c in FEATURES])
    truth = spark_labels(runtime.spark_source(LABELS, version=0), keys=keys, column="is_late",
                         expression="arr_delay > 15", empty=runtime.empty_frame(LABELS))
    frame = (runtime.spark_source(PREDICTIONS, version=0).where(F.col("model_version") == version)
             .join(source, on=keys, how="left").join(truth, on=keys, how="left"))
    found = spark_aggregates(frame, inputs={c: f"_in_{c}" for c in FEATURES}, label="_label", keys=keys,
                             profile=profile)
    return expected, found, part, labels, frame


@pytest.mark.parametrize("version", [1, 2])
def test_spark_and_pandas_aggregates_agree(spark_runtime, lake, version):
    expected, found, part, labels, _ = engines(spark_runtime, lake, version)
    assert found.outcomes == expected.outcomes and found.rows == len(part) == 1000
    assert expected.outcomes[("excluded", "ineligible:cancelled")] > 0
    assert found.null_counts == expected.null_counts and expected.null_counts["dep_time"] > 0
    assert found.bins == expected.bins and set(found.bins) == {*FEATURES, "prediction"}
    assert found.classes == expected.classes and set(found.classes) == {0, 1}
    assert found.value_count == expected.value_count
    assert found.value_sum == pytest.approx(expected.value_sum, rel=1e-12)
    assert found.label_hash == expected.label_hash and found.label_hash.rows == 1000
    spark, pandas = found.performance, expected.performance
    for name in ("labelled_rows", "labelled_excluded", "correct", "positives", "negatives", "other_labels", "roc"):
        assert getattr(spark, name) == getattr(pandas, name), name
    assert spark.log_loss_sum == pytest.approx(pandas.log_loss_sum, rel=1e-12)
    assert pandas.labelled_rows > 200 and spark.roc_exact

    # quantiles: percentile_approx picks a value of the data within n / accuracy ranks, no interpolation
    values = np.sort(part.loc[part["scoring_status"] == "predicted", "probability"].astype("float64").to_numpy())
    slack = math.ceil(len(values) / PERCENTILE_ACCURACY) + 1
    for name, value in found.quantiles.items():
        rank = int(name[1:]) / 100 * (len(values) - 1)
        low, high = max(0, math.floor(rank) - slack), min(len(values) - 1, math.ceil(rank) + slack)
        assert values[low] <= value <= values[high], name
        assert value in values  # a value of the data
        assert expected.quantiles[name] == pytest.approx(np.quantile(values, int(name[1:]) / 100))

    # one set of figures from either engine: equal but for the stated quantile approximation
    spark_row, pandas_row = figures(found, lake), figures(expected, lake)
    assert set(spark_row) == set(pandas_row)
    for name, value in pandas_row.items():
        if isinstance(value, float):
            assert spark_row[name] == pytest.approx(value, rel=1e-9, nan_ok=True), name
        elif name != "prediction_distribution":  # JSON texts and counts: the same text
            assert spark_row[name] == value, name
    assert json.loads(spark_row["prediction_distribution"])["classes"] == \
        json.loads(pandas_row["prediction_distribution"])["classes"]


def test_performance_matches_sklearn_exact_and_bucketed(spark_runtime, lake):
    expected, found, part, labels, frame = engines(spark_runtime, lake, 1)
    use = (part["scoring_status"] == "predicted").to_numpy() & labels.notna().to_numpy()
    truth = labels[use].astype(int).to_numpy()
    probability = part.loc[use, "probability"].astype("float64").to_numpy()
    exact = performance_figures(found.performance)
    assert exact["roc_auc"] == pytest.approx(roc_auc_score(truth, probability), rel=1e-12)
    assert exact["log_loss"] == pytest.approx(log_loss(truth, probability), rel=1e-12)
    assert performance_figures(expected.performance)["roc_auc"] == pytest.approx(exact["roc_auc"], rel=1e-15)
    bucketed = spark_aggregates(frame, label="_label", keys=["flight_id"], exact_roc_limit=0).performance
    assert not bucketed.roc_exact and len(bucketed.roc) <= len(found.performance.roc)
    assert abs(performance_figures(bucketed)["roc_auc"] - roc_auc_score(truth, probability)) < 1e-3


def test_spark_labels_derive_like_pandas(spark_runtime, spark, lake):
    found = spark_labels(spark_runtime.spark_source(LABELS, version=0), keys=["flight_id"], column="is_late",
                         expression="arr_delay > 15", empty=spark_runtime.empty_frame(LABELS))
    source = spark_runtime.read_table(LABELS)
    truth = label_snapshot(source, 0, MON, ["flight_id"]).truth
    expected = spark.createDataFrame([(int(k), None if pd.isna(v) else int(v)) for k, v in
                                      zip(truth["flight_id"], truth["_label"])], "flight_id long, _label long")
    assert_df_equality(found, expected, ignore_row_order=True, ignore_nullable=True)


def test_report_bins_agree(spark_runtime, lake):
    _, _, part, labels, frame = engines(spark_runtime, lake, 2)
    use = (part["scoring_status"] == "predicted").to_numpy() & labels.notna().to_numpy()
    calibration = calibration_bins(part.loc[use, "probability"].to_numpy(dtype="float64"),
                                   labels[use].to_numpy(dtype="float64"))
    found = spark_calibration_bins(frame, "_label")
    assert [n for n, _, _ in found] == [n for n, _, _ in calibration] and sum(n for n, _, _ in found) == use.sum()
    assert [p for _, p, _ in found] == pytest.approx([p for _, p, _ in calibration], rel=1e-12)
    assert [t for _, _, t in found] == [t for _, _, t in calibration]
    column, histograms = spark_histogram_bins(spark_runtime.spark_source(PREDICTIONS, version=0))
    expected = histogram_bins(spark_runtime.read_table(PREDICTIONS))
    assert column == expected.column == "probability" and set(histograms) == {1, 2}
    for version, (edges, counts) in histograms.items():
        assert edges == pytest.approx(expected.histograms[version][0], rel=1e-12)
        assert counts == expected.histograms[version][1]


def test_text_of_values_matches_spark_cast(spark):
    doubles = [1.0, 0.1, 1e-3, 1e-4, 1e7, 9999999.0, 1e16, 123456.789, 2.5e-5, -0.0, 1 / 3, -1.5e-300]
    cast = [r[0] for r in spark.createDataFrame([(v,) for v in doubles], "x double")
            .select(F.col("x").cast("string")).collect()]
    assert [java_double(v) for v in doubles] == cast
    assert java_double(1e7) == "1.0E7" and java_double(1e-4) == "1.0E-4"
    mixed = pd.Series(pd.array([1, None, 2**53 + 1], dtype="Int64"))
    assert spark_text(mixed) == ["1", "<NA>", "9007199254740993"]
    assert spark_text(pd.Series([True, False, None], dtype="boolean")) == ["true", "false", "<NA>"]


def test_old_digests_fall_back_to_figures():
    figures_now = {"labelled_rows": 3, "accuracy": 0.5}
    old = "a" * 64  # a digest of the definition before v2: not comparable
    assert not labels_changed({"labels_digest": old, "labelled_rows": 3, "accuracy": 0.5}, "v2:x", figures_now)
    assert labels_changed({"labels_digest": old, "labelled_rows": 2, "accuracy": 0.5}, "v2:x", figures_now)
    assert labels_changed({"labels_digest": "v2:y"}, "v2:x", figures_now)
    assert not labels_changed({"labels_digest": "v2:x"}, "v2:x", figures_now)
    assert digest(None) is None
    frame = pd.DataFrame({"flight_id": [3, 1, 2]})
    labels = pd.Series(pd.array([1, None, 0], dtype="Int64"))
    a = pandas_aggregates(frame.assign(scoring_status="predicted", exclusion_reason=None, prediction=1),
                          labels=labels, keys=["flight_id"]).label_hash
    b = pandas_aggregates(frame.iloc[::-1].reset_index(drop=True).assign(scoring_status="predicted",
                                                                          exclusion_reason=None, prediction=1),
                          labels=labels.iloc[::-1].reset_index(drop=True), keys=["flight_id"]).label_hash
    assert a == b and digest(a).startswith(DIGEST_PREFIX)  # row order does not matter
    arrived = pandas_aggregates(frame.assign(scoring_status="predicted", exclusion_reason=None, prediction=1),
                                labels=labels.fillna(1), keys=["flight_id"]).label_hash
    assert digest(arrived) != digest(a)
