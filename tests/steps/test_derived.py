"""FeatureInteraction, PolynomialFeatures and DateFeatures."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import assert_same, cases, check_contract

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.frames import floats_close
from lakescore.steps import learn_step, parse_params


@pytest.mark.parametrize("raw", cases("FeatureInteraction", "PolynomialFeatures", "DateFeatures"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_ratio_by_hand_with_a_zero_denominator():
    frame = pd.DataFrame({"distance": [100.0, 50.0, 10.0], "air_time": [20.0, 0.0, None]})
    fitted = learn_step({"step": "FeatureInteraction", "name": "r", "columns": ["distance", "air_time"],
                         "operation": "ratio"}, frame, None)
    out = fitted.apply(frame)["distance_per_air_time"].tolist()
    assert out[0] == 5.0 and np.isnan(out[1]) and np.isnan(out[2])


def test_ratio_takes_two_columns():
    with pytest.raises(StepError, match="a ratio takes exactly 2 columns"):
        parse_params({"step": "FeatureInteraction", "name": "r", "columns": ["a", "b", "c"], "operation": "ratio"})


def test_polynomial_terms_match_sklearn(flights_sample):
    from sklearn.preprocessing import PolynomialFeatures

    columns = ["hour", "dep_delay"]
    complete = flights_sample[columns].dropna()  # sklearn refuses NaN; ours gives NaN terms
    fitted = learn_step({"step": "PolynomialFeatures", "name": "p", "columns": columns}, flights_sample, None)
    out = fitted.apply(complete)
    assert list(out.columns) == ["hour", "dep_delay", "hour_pow2", "hour_x_dep_delay", "dep_delay_pow2"]
    reference = PolynomialFeatures(include_bias=False).fit_transform(complete.to_numpy(dtype="float64"))
    assert floats_close(out.to_numpy(), reference).all()


def test_date_parts_by_hand():
    frame = pd.DataFrame({"time_hour": pd.to_datetime(["2013-01-05 23:00", None], utc=True)})
    fitted = learn_step({"step": "DateFeatures", "name": "d", "columns": ["time_hour"],
                         "parts": ["year", "dayofweek", "hour", "is_weekend"], "timezone": "America/New_York"},
                        frame, None)
    out = fitted.apply(frame)
    # 2013-01-05 23:00 UTC is Saturday 18:00 in New York
    assert out.iloc[0].tolist() == [2013.0, 5.0, 18.0, 1.0]
    assert out.iloc[1].isna().all()


def test_date_text_is_parsed_with_the_fixed_format():
    frame = pd.DataFrame({"day": ["2013-02-03", "not a date"]})
    fitted = learn_step({"step": "DateFeatures", "name": "d", "columns": ["day"], "parts": ["month"]}, frame, None)
    assert fitted.apply(frame)["day_month"].tolist()[0] == 2.0
    assert np.isnan(fitted.apply(frame)["day_month"].tolist()[1])


def kernel_frame(fitted, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` through the step's compiled kernel (a Columns batch of all its columns)."""
    batch = Columns.from_frame(frame, frame.columns)
    fitted.kernel().apply(batch)
    return batch.frame(sorted(batch.arrays))


@pytest.mark.parametrize("dtype", [object, "string"])
def test_date_kernel_parses_text_with_the_fixed_format(dtype):
    frame = pd.DataFrame({"day": pd.array(["2013-02-03", "not a date", None], dtype=dtype)})
    fitted = learn_step({"step": "DateFeatures", "name": "d", "columns": ["day"],
                         "parts": ["month", "is_weekend"]}, frame, None)
    out = kernel_frame(fitted, frame)
    assert list(out.columns) == ["day_is_weekend", "day_month"]  # the source is dropped
    np.testing.assert_array_equal(out["day_month"].to_numpy(), [2.0, np.nan, np.nan])
    np.testing.assert_array_equal(out["day_is_weekend"].to_numpy(), [1.0, np.nan, np.nan])  # a Sunday
    want = fitted.apply(frame)
    assert_same(out, want[sorted(want.columns)], "text stamps")


def test_date_kernel_takes_naive_stamps_as_utc_when_a_timezone_is_set():
    frame = pd.DataFrame({"t": pd.to_datetime(["2013-01-05 23:00", None, "2013-12-31 04:59"])})
    fitted = learn_step({"step": "DateFeatures", "name": "d", "columns": ["t"], "timezone": "America/New_York",
                         "parts": ["year", "dayofyear", "hour", "minute", "quarter", "is_weekend"], "drop": False},
                        frame, None)
    out = kernel_frame(fitted, frame)
    # 23:00 UTC on Saturday 5 January is 18:00 there; 04:59 UTC on 31 December is 23:59 on the 30th
    assert out.iloc[0][["t_year", "t_dayofyear", "t_hour", "t_is_weekend"]].tolist() == [2013.0, 5.0, 18.0, 1.0]
    assert out.iloc[2][["t_dayofyear", "t_hour", "t_minute", "t_quarter", "t_is_weekend"]].tolist() == \
        [364.0, 23.0, 59.0, 4.0, 0.0]
    assert out.drop(columns="t").iloc[1].isna().all()
    want = fitted.apply(frame)
    assert_same(out, want[sorted(want.columns)], "naive stamps")


def test_polynomial_and_interaction_kernels_by_hand():
    frame = pd.DataFrame({"a": pd.array([2, None, 3], dtype="Int64"), "b": [5.0, 1.0, 0.0]})
    poly = learn_step({"step": "PolynomialFeatures", "name": "p", "columns": ["a", "b"]}, frame, None)
    out = kernel_frame(poly, frame)
    assert list(out.columns) == ["a", "a_pow2", "a_x_b", "b", "b_pow2"]
    assert out["a"].dtype == np.dtype("float64")
    np.testing.assert_array_equal(out.to_numpy(), [[2.0, 4.0, 10.0, 5.0, 25.0],
                                                   [np.nan, np.nan, np.nan, 1.0, 1.0],
                                                   [3.0, 9.0, 0.0, 0.0, 0.0]])
    ratio = learn_step({"step": "FeatureInteraction", "name": "r", "columns": ["a", "b"], "operation": "ratio"},
                       frame, None)
    np.testing.assert_array_equal(kernel_frame(ratio, frame)["a_per_b"].to_numpy(), [0.4, np.nan, np.nan])
