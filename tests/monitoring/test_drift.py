"""PSI and the training bins, against hand-worked numbers."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from lakescore.monitoring.drift import bin_labels, bin_shares, drift, psi, training_profile


def test_psi_hand_worked():
    # (0.25 - 0.5) ln(0.25/0.5) + (0.75 - 0.5) ln(0.75/0.5) = 0.25 ln 2 + 0.25 ln 1.5
    assert psi([0.5, 0.5], [0.25, 0.75]) == pytest.approx(0.17328679513998632 + 0.1013662770270411, abs=1e-15)
    assert psi([0.2, 0.3, 0.5], [0.2, 0.3, 0.5]) == 0.0


def test_psi_floors_empty_bins_at_1e_4():
    # e = [1, 1e-4], a = [0.5, 0.5]: (0.5 - 1) ln 0.5 + (0.5 - 1e-4) ln 5000
    assert psi([1.0, 0.0], [0.5, 0.5]) == pytest.approx(0.5 * math.log(2) + 0.4999 * math.log(5000))
    assert math.isnan(psi([0.5, 0.5], [0.0, 0.0]))


def test_numeric_bins_are_right_closed_with_missing_last():
    entry = {"kind": "numeric", "edges": [1.0, 3.0]}
    shares = bin_shares(entry, pd.Series([0, 1, 2, 3, 4, None], dtype="Float64"))
    np.testing.assert_array_equal(shares, [2 / 6, 2 / 6, 1 / 6, 1 / 6])
    assert bin_labels(entry) == ["(-inf, 1]", "(1, 3]", "(3, inf]", "__missing__"]


def test_categorical_bins_keep_other_and_missing():
    entry = {"kind": "categorical", "categories": ["a", "b"]}
    np.testing.assert_array_equal(bin_shares(entry, pd.Series(["a", "a", "c", None, "b"])), [0.4, 0.2, 0.2, 0.2])


def test_training_profile_is_json_and_deciles_are_even():
    frame = pd.DataFrame({"x": np.arange(1, 101, dtype="float64"), "c": ["u", "v"] * 50})
    scored = pd.DataFrame({"scoring_status": ["predicted"] * 99 + ["excluded"],
                           "probability": np.r_[np.linspace(0, 1, 99), np.nan]})
    profile = training_profile(frame, feature_columns=["x", "c"], predictions=scored)
    assert json.loads(json.dumps(profile)) == profile
    assert profile["features"]["x"]["expected"] == pytest.approx([0.1] * 10 + [0.0])
    assert profile["features"]["c"] == {"kind": "categorical", "categories": ["u", "v"],
                                        "expected": [0.5, 0.5, 0.0, 0.0]}
    assert profile["prediction"]["column"] == "probability"
    same = drift(profile, frame, scored)
    assert same == {"x": 0.0, "c": 0.0, "prediction": 0.0}
    shifted = drift(profile, frame.assign(x=frame["x"] + 50))
    # x = 51..150 against edges 10.9, 20.8, ..., 90.1: the five lowest bins empty (floored at 1e-4),
    # four bins keep 0.1, the top bin holds 91..150 = 0.6
    assert shifted["x"] == pytest.approx(5 * (1e-4 - 0.1) * math.log(1e-4 / 0.1) + 0.5 * math.log(6))
