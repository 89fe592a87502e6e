"""SimpleTransformation and GeneralTransformation."""

import math

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.errors import StepError
from lakescore.steps import learn_step, parse_params


@pytest.mark.parametrize("raw", cases("SimpleTransformation", "GeneralTransformation"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


@pytest.mark.parametrize("function, values, want", [
    ("log", [math.e, 0.0, -1.0, np.nan, np.inf], [1.0, np.nan, np.nan, np.nan, np.nan]),
    ("log1p", [math.e - 1, -1.0, 0.0], [1.0, np.nan, 0.0]),
    ("sqrt", [4.0, -1.0, 0.0], [2.0, np.nan, 0.0]),
    ("square", [3.0, -1e200, 1e154], [9.0, np.nan, 1e308]),
    ("reciprocal", [4.0, 0.0, -0.5], [0.25, np.nan, -2.0]),
    ("exp", [0.0, 710.0, -800.0], [1.0, np.nan, 0.0]),
])
def test_simple_transformations_by_hand(function, values, want):
    frame = pd.DataFrame({"x": values})
    fitted = learn_step({"step": "SimpleTransformation", "name": "t", "columns": ["x"], "function": function},
                        frame, None)
    out = fitted.apply(frame)["x"]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-12)
    assert not fitted.flags(frame).any()  # on_invalid: null gives NaN, excludes nothing


def test_exclude_flags_the_rows_with_an_invalid_value():
    frame = pd.DataFrame({"a": [1.0, 0.0, 4.0, np.nan], "b": [1.0, 1.0, -2.0, 1.0]})
    fitted = learn_step({"step": "SimpleTransformation", "name": "logs", "columns": ["a", "b"], "function": "log",
                         "on_invalid": "exclude"}, frame, None)
    assert fitted.flags(frame).tolist() == [False, True, True, False]  # missing is not invalid
    assert (fitted.rows_in, fitted.rows_out) == (4, 2)


def test_error_refuses_invalid_training_values_naming_count_value_and_fix():
    frame = pd.DataFrame({"distance": [100.0, 0.0, -5.0, 17.0]})
    with pytest.raises(StepError) as err:
        learn_step({"step": "SimpleTransformation", "name": "log_d", "columns": ["distance"], "function": "log",
                    "on_invalid": "error"}, frame, None)
    assert str(err.value) == ("step 'log_d': 2 training value(s) of column 'distance' are outside the domain of log "
                              "(e.g. 0.0) and on_invalid is 'error'; fix the data, or set on_invalid: null (NaN) or "
                              "exclude (drop the row)")
    fitted = learn_step({"step": "SimpleTransformation", "name": "log_d", "columns": ["distance"], "function": "log",
                         "on_invalid": "error"}, frame.iloc[[0, 3]], None)
    assert np.isnan(fitted.apply(frame)["distance"].iloc[1])  # at scoring: NaN, never a refused batch


def test_unknown_functions_are_refused_with_the_choices():
    with pytest.raises(StepError, match=r"function: Input should be 'log', 'log1p', 'sqrt', 'square', 'reciprocal' "
                                        r"or 'exp' \(got 'cube'\)"):
        parse_params({"step": "SimpleTransformation", "name": "t", "columns": ["x"], "function": "cube"})
    with pytest.raises(StepError, match=r"function: Input should be 'abs'.*\(got 'eval'\)"):
        parse_params({"step": "GeneralTransformation", "name": "g", "columns": ["x"], "function": "eval"})
    with pytest.raises(StepError, match=r"on_invalid: Input should be 'null', 'exclude' or 'error' \(got 'clip'\)"):
        parse_params({"step": "SimpleTransformation", "name": "t", "columns": ["x"], "function": "log",
                      "on_invalid": "clip"})


def test_general_transformations_by_hand():
    frame = pd.DataFrame({"x": pd.array([100, -1, 0, None], dtype="Int64")})
    log10 = learn_step({"step": "GeneralTransformation", "name": "g", "columns": ["x"], "function": "log10"},
                       frame, None)
    np.testing.assert_array_equal(log10.apply(frame)["x"].to_numpy(), [2.0, np.nan, np.nan, np.nan])
    absolute = learn_step({"step": "GeneralTransformation", "name": "g", "columns": ["x"], "function": "abs"},
                          frame, None)
    out = absolute.apply(frame)["x"]
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out.to_numpy(), [100.0, 1.0, 0.0, np.nan])
