"""FeatureMath and FeatureGeneration: declared arithmetic between columns and constants."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.errors import StepError
from lakescore.steps import STEPS, learn_step, parse_params


@pytest.mark.parametrize("raw", cases("FeatureMath", "FeatureGeneration"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def speed(**extra):
    return {"step": "FeatureMath", "name": "speed", "columns": ["distance", "air_time"],
            "expression": "distance / (air_time / 60)", "output": "mph", **extra}


def test_feature_math_by_hand_with_a_zero_denominator():
    frame = pd.DataFrame({"distance": [300.0, 100.0, None, 50.0, None],
                          "air_time": [45.0, 0.0, 30.0, -60.0, 0.0]})
    out = learn_step(speed(), frame, None).apply(frame)["mph"].to_numpy()
    np.testing.assert_allclose(out, [400.0, np.nan, np.nan, -50.0, np.nan])  # 300 / 0.75; 100 / 0: null
    zero = learn_step(speed(on_zero_division="zero"), frame, None).apply(frame)["mph"].to_numpy()
    np.testing.assert_allclose(zero, [400.0, 0.0, np.nan, -50.0, np.nan])  # missing / 0 stays missing
    assert STEPS["FeatureMath"].outputs(parse_params(speed())) == ["mph"]


def test_feature_generation_by_hand():
    frame = pd.DataFrame({"hour": [5, 23], "minute": [30, 59], "dep": [0.0, 4.0], "arr": [0.0, -2.0]})
    fitted = learn_step({"step": "FeatureGeneration", "name": "g", "columns": ["hour", "minute", "dep", "arr"],
                         "features": {"clock": "hour * 60 + minute", "ratio": "arr / dep", "neg": "-(arr - dep) + 1.5"},
                         "on_zero_division": "zero"}, frame, None)
    out = fitted.apply(frame)
    assert list(out.columns)[-3:] == ["clock", "ratio", "neg"]
    np.testing.assert_allclose(out[["clock", "ratio", "neg"]].to_numpy(), [[330.0, 0.0, 1.5], [1439.0, -0.5, 7.5]])


@pytest.mark.parametrize("expression, message", [
    ("distance ** 2", "uses 'Pow', which FeatureMath does not allow; use only column names, numbers, + - * /"),
    ("log(distance) + air_time", "uses 'log(distance)', which FeatureMath does not allow"),
    ("distance > air_time", "uses 'distance > air_time', which FeatureMath does not allow"),
    ("distance + 'a' + air_time", "uses \"'a'\", which FeatureMath does not allow"),
    ("distance / (air_time", "is not valid arithmetic"),
])
def test_feature_math_refuses_what_is_not_declared_arithmetic(expression, message):
    with pytest.raises(StepError, match=r"step 'speed' \(FeatureMath\)") as err:
        parse_params(speed(expression=expression))
    assert message in str(err.value)


def test_feature_math_columns_must_be_the_ones_the_expression_reads():
    with pytest.raises(StepError, match=r"reads \['dep_delay'\], which columns \['distance', 'air_time'\] does not "
                                        r"list; add them to columns"):
        parse_params(speed(expression="distance / air_time + dep_delay"))
    with pytest.raises(StepError, match=r"columns lists \['air_time'\], which no expression reads; drop them"):
        parse_params(speed(expression="distance * 2"))
    with pytest.raises(StepError, match=r"on_zero_division: Input should be 'null' or 'zero' \(got 'inf'\)"):
        parse_params(speed(on_zero_division="inf"))


def test_feature_math_refuses_an_output_that_exists():
    frame = pd.DataFrame({"distance": [1.0], "air_time": [1.0], "mph": [0.0]})
    with pytest.raises(StepError, match=r"output column\(s\) \['mph'\] already exist"):
        learn_step(speed(), frame, None)
