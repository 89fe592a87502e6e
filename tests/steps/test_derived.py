"""FeatureInteraction, PolynomialFeatures and DateFeatures."""

import numpy as np
import pandas as pd
import pytest

from lakescore.errors import StepError
from lakescore.frames import floats_close
from lakescore.steps import learn_step, parse_params
from step_contract import cases, check_contract


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
