"""Quality rows, performance on scored rows only, and alert thresholds, on frames small enough to
work out by hand."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from lakescore.config import MonitoringConfig
from lakescore.monitoring.performance import performance
from lakescore.monitoring.quality import alerts, quality_row


def tiny() -> tuple[pd.DataFrame, pd.Series]:
    """Three predicted rows, one invalid and one ineligible exclusion; labels for all five."""
    predictions = pd.DataFrame({
        "flight_id": [1, 2, 3, 4, 5],
        "prediction": pd.array([1, 0, 0, None, None], dtype="Int64"),
        "probability": pd.array([0.9, 0.2, 0.4, None, None], dtype="Float64"),
        "scoring_status": pd.array(["predicted"] * 3 + ["excluded"] * 2, dtype="string"),
        "exclusion_reason": pd.array([None, None, None, "invalid:impute", "ineligible:cancelled"], dtype="string"),
    })
    labels = pd.Series(pd.array([1, 0, 1, 0, 1], dtype="Int64"))
    return predictions, labels


def test_quality_row_by_hand():
    predictions, labels = tiny()
    inputs = pd.DataFrame({"dep_delay": [1.0, None, 3.0, None, 5.0], "carrier": ["UA", "AA", "B6", "UA", "DL"]})
    row = quality_row(predictions, inputs=inputs, labels=labels)
    assert {k: row[k] for k in ("rows", "predicted", "excluded", "labelled_rows", "labelled_excluded")} == \
        {"rows": 5, "predicted": 3, "excluded": 2, "labelled_rows": 3, "labelled_excluded": 2}
    assert row["exclusion_rate"] == 2 / 5
    assert row["invalid_exclusion_rate"] == 1 / 5
    assert json.loads(row["exclusions_by_reason"]) == {"ineligible:cancelled": 1, "invalid:impute": 1}
    assert json.loads(row["null_share"]) == {"carrier": 0.0, "dep_delay": 0.4}
    assert row["mean_probability"] == pytest.approx((0.9 + 0.2 + 0.4) / 3)
    distribution = json.loads(row["prediction_distribution"])
    assert distribution["classes"] == pytest.approx({"0": 2 / 3, "1": 1 / 3})
    assert distribution["probability_quantiles"]["p50"] == pytest.approx(0.4)
    # performance on the three predicted rows: truth 1, 0, 1 against 1, 0, 0
    assert row["accuracy"] == pytest.approx(2 / 3)
    assert row["roc_auc"] == 1.0  # both positives (0.9, 0.4) above the negative (0.2)
    assert row["log_loss"] == pytest.approx(-(math.log(0.9) + math.log(0.8) + math.log(0.4)) / 3)
    assert row["psi"] == "{}" and math.isnan(row["max_feature_psi"])


def test_excluded_rows_are_never_read_as_the_negative_class():
    predictions, labels = tiny()
    # read as class 0, the excluded rows would score 1 right (label 0) and 1 wrong: accuracy 3/5
    assert performance(predictions, labels)["accuracy"] == pytest.approx(2 / 3)
    only_excluded = performance(predictions.iloc[3:].reset_index(drop=True), labels.iloc[3:])
    assert only_excluded["labelled_rows"] == 0 and only_excluded["labelled_excluded"] == 2
    assert math.isnan(only_excluded["accuracy"]) and math.isnan(only_excluded["roc_auc"])


def test_regression_performance_on_scored_rows():
    predictions = pd.DataFrame({"prediction": pd.array([1.0, 3.0, None], dtype="Float64"),
                                "scoring_status": ["predicted", "predicted", "excluded"]})
    out = performance(predictions, pd.Series([2.0, 1.0, 100.0]))
    assert out["rmse"] == pytest.approx(math.sqrt((1 + 4) / 2)) and out["mae"] == pytest.approx(1.5)
    assert out["labelled_rows"] == 2 and out["labelled_excluded"] == 1


def test_labels_not_arrived_yet():
    predictions, _ = tiny()
    row = quality_row(predictions, labels=pd.Series([None] * 5, dtype="Int64"))
    assert row["labelled_rows"] == 0 and math.isnan(row["accuracy"])
    assert quality_row(predictions)["labelled_rows"] == 0


def test_alert_thresholds_give_reasons():
    config = MonitoringConfig(quality_table="main.m.q", max_exclusion_rate=0.3, max_invalid_exclusion_rate=0.1,
                              max_psi=0.25)
    row = {"exclusion_rate": 0.4, "invalid_exclusion_rate": 0.2,
           "psi": json.dumps({"month": 0.3, "dep_delay": 0.1, "prediction": None})}
    assert alerts(row, config) == ["exclusion_rate 0.4000 > max_exclusion_rate 0.3",
                                   "invalid_exclusion_rate 0.2000 > max_invalid_exclusion_rate 0.1",
                                   "psi[month] 0.3000 > max_psi 0.25"]
    calm = {"exclusion_rate": 0.3, "invalid_exclusion_rate": 0.1, "psi": json.dumps({"month": 0.25})}
    assert alerts(calm, config) == []  # thresholds are inclusive
