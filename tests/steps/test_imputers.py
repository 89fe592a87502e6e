"""SimpleImputer, GroupImputer and MissingIndicator."""

import math

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.steps import learn_step, parse_params


@pytest.mark.parametrize("raw", cases("SimpleImputer", "GroupImputer", "MissingIndicator"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_simple_imputer_median_by_hand():
    train = pd.DataFrame({"dep_delay": [2.0, 4.0, None, -1.0, 33.0]})
    fitted = learn_step({"step": "SimpleImputer", "name": "m", "columns": ["dep_delay"], "strategy": "median"},
                        train, None)
    # median of [-1, 2, 4, 33] = (2 + 4) / 2
    assert fitted.state["fill"] == [3.0]
    out = fitted.apply(pd.DataFrame({"dep_delay": [None, 7.0]}))
    assert out["dep_delay"].tolist() == [3.0, 7.0]
    assert out["dep_delay"].dtype == np.float64


def test_simple_imputer_most_frequent_text_takes_the_smallest_tie():
    train = pd.DataFrame({"tailnum": ["N2", "N1", None, "N2", "N1"]})
    fitted = learn_step({"step": "SimpleImputer", "name": "m", "columns": ["tailnum"],
                         "strategy": "most_frequent"}, train, None)
    assert fitted.state["fill"] == ["N1"]
    assert fitted.apply(pd.DataFrame({"tailnum": [None]}))["tailnum"].tolist() == ["N1"]


def test_simple_imputer_mean_of_nullable_integers():
    train = pd.DataFrame({"dep_time": pd.array([500, 700, None], dtype="Int64")})
    fitted = learn_step({"step": "SimpleImputer", "name": "m", "columns": ["dep_time"]}, train, None)
    assert fitted.apply(train)["dep_time"].tolist() == [500.0, 700.0, 600.0]


@pytest.mark.parametrize("raw,message", [
    ({"strategy": "constant"}, "strategy 'constant' needs fill_value"),
    ({"strategy": "median", "fill_value": 0}, "fill_value is only used with strategy 'constant'"),
])
def test_simple_imputer_config_is_strict(raw, message):
    with pytest.raises(StepError, match=message):
        parse_params({"step": "SimpleImputer", "name": "m", "columns": ["x"], **raw})


def test_simple_imputer_refuses_a_column_with_no_training_value():
    train = pd.DataFrame({"dep_delay": [None, None]}, dtype="float64")
    with pytest.raises(StepError, match="column 'dep_delay' has no value in any training row"):
        learn_step({"step": "SimpleImputer", "name": "m", "columns": ["dep_delay"]}, train, None)


def test_simple_imputer_refuses_text_fill_for_a_numeric_column():
    train = pd.DataFrame({"dep_delay": [1.0, None]})
    with pytest.raises(StepError, match="fill value 'none' is text but column 'dep_delay' is numeric"):
        learn_step({"step": "SimpleImputer", "name": "m", "columns": ["dep_delay"], "strategy": "constant",
                    "fill_value": "none"}, train, None)


def test_group_imputer_unseen_group_gets_the_overall_value():
    train = pd.DataFrame({"origin": ["EWR", "EWR", "JFK", "LGA"], "dep_delay": [10.0, 20.0, 5.0, None]})
    fitted = learn_step({"step": "GroupImputer", "name": "g", "columns": ["dep_delay"], "by": ["origin"]},
                        train, None)
    # group means: EWR (10+20)/2 = 15, JFK 5; LGA has no value; overall (10+20+5)/3 = 35/3
    assert fitted.state["tables"] == [[["EWR", 15.0], ["JFK", 5.0]]]
    score = pd.DataFrame({"origin": ["EWR", "LGA", "SFO", None, "JFK"], "dep_delay": [None, None, None, None, 7.0]})
    out = fitted.apply(score)["dep_delay"].tolist()
    assert out[0] == 15.0 and out[4] == 7.0
    assert all(math.isclose(v, 35 / 3, rel_tol=1e-12) for v in out[1:4])


def test_group_imputer_keys_of_two_columns_survive_json():
    from lakescore.frames import decode_state, encode_state

    train = pd.DataFrame({"origin": ["EWR", "EWR", "JFK"], "month": [1, 1, 2], "dep_delay": [4.0, 6.0, 1.0]})
    fitted = learn_step({"step": "GroupImputer", "name": "g", "columns": ["dep_delay"],
                         "by": ["origin", "month"], "strategy": "median"}, train, None)
    assert fitted.state["tables"] == [[["EWR", 1, 5.0], ["JFK", 2, 1.0]]]
    assert decode_state(encode_state(fitted.state))["tables"][0][0][1] == 1  # integer key stays integer
    out = fitted.apply(pd.DataFrame({"origin": ["EWR", "JFK"], "month": [1, 1], "dep_delay": [None, None]}))
    assert out["dep_delay"].tolist() == [5.0, 4.0]  # (JFK, 1) unseen: overall median of [1, 4, 6]


def test_group_imputer_refuses_a_column_that_is_also_a_key():
    with pytest.raises(StepError, match=r"\['origin'\] are both imputed and group keys"):
        parse_params({"step": "GroupImputer", "name": "g", "columns": ["origin"], "by": ["origin"]})


def test_missing_indicator_by_hand():
    train = pd.DataFrame({"dep_delay": [1.0, None], "distance": [100, 200]})
    fitted = learn_step({"step": "MissingIndicator", "name": "mi", "columns": ["dep_delay", "distance"],
                         "features": "missing-only"}, train, None)
    assert fitted.state["names"] == ["dep_delay_missing"]
    out = fitted.apply(pd.DataFrame({"dep_delay": [None, 3.0], "distance": [None, 1]}))
    assert out["dep_delay_missing"].tolist() == [1.0, 0.0]
    assert "distance_missing" not in out


@pytest.mark.parametrize("month", [pd.Series([1.0, 2.0, np.nan, 1.0, 1.0]),
                                   pd.Series([1, 2, None, 1, 1], dtype="Int64")], ids=["float64", "Int64"])
def test_group_imputer_kernel_matches_keys_as_python_compares_them(month):
    train = pd.DataFrame({"origin": ["EWR", "EWR", "JFK"], "month": [1, 1, 2], "dep_delay": [4.0, 6.0, 1.0]})
    fitted = learn_step({"step": "GroupImputer", "name": "g", "columns": ["dep_delay"],
                         "by": ["origin", "month"], "strategy": "median"}, train, None)
    score = pd.DataFrame({"origin": ["EWR", "JFK", "EWR", None, "JFK"], "month": month,
                          "dep_delay": [None, None, None, None, 3.0]})
    batch = Columns.from_frame(score, score.columns)
    fitted.kernel().apply(batch)
    # (EWR, 1.0) is the saved key (EWR, 1): 5; (JFK, 2): 1; a missing key part, or (JFK, 1) unseen:
    # the overall median 4; a present value stays
    want = [5.0, 1.0, 4.0, 4.0, 3.0]
    assert batch.array("dep_delay").dtype == np.float64 and batch.array("dep_delay").tolist() == want
    assert fitted.apply(score)["dep_delay"].tolist() == want


def test_group_imputer_kernel_fills_text_with_the_group_value():
    train = pd.DataFrame({"origin": ["EWR", "EWR", "EWR", "JFK"], "tailnum": ["N1", "N2", "N2", "N7"]})
    fitted = learn_step({"step": "GroupImputer", "name": "g", "columns": ["tailnum"], "by": ["origin"],
                         "strategy": "most_frequent"}, train, None)
    score = pd.DataFrame({"origin": ["JFK", "EWR", "SFO", "EWR"],
                          "tailnum": pd.Series([None, pd.NA, None, "N9"], dtype="string")})
    batch = Columns.from_frame(score, score.columns)
    fitted.kernel().apply(batch)
    want = ["N7", "N2", "N2", "N9"]  # SFO unseen: the overall most frequent, N2
    assert batch.array("tailnum").dtype == object and batch.array("tailnum").tolist() == want
    assert fitted.apply(score)["tailnum"].tolist() == want


def test_simple_imputer_kernel_fills_text_as_python_objects():
    train = pd.DataFrame({"tailnum": ["N1", None]})
    fitted = learn_step({"step": "SimpleImputer", "name": "s", "columns": ["tailnum"], "strategy": "constant",
                         "fill_value": "unknown"}, train, None)
    score = pd.DataFrame({"tailnum": pd.Series([7, None, 8], dtype="Int64")})
    batch = Columns.from_frame(score, ["tailnum"])
    fitted.kernel().apply(batch)
    assert batch.array("tailnum").dtype == object and batch.array("tailnum").tolist() == [7, "unknown", 8]
    assert fitted.apply(score)["tailnum"].tolist() == [7, "unknown", 8]
