"""AliasReplacement, InvalidValueReplacement, TextCleaning and DropMissingColumns."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.errors import StepError
from lakescore.steps import learn_step, parse_params


@pytest.mark.parametrize("raw", cases("AliasReplacement", "InvalidValueReplacement", "TextCleaning",
                                      "DropMissingColumns"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_aliases_by_hand_per_column():
    frame = pd.DataFrame({"carrier": ["United", "UA", None, "DL"], "month": [1, 2, 1, 12]})
    fitted = learn_step({"step": "AliasReplacement", "name": "a", "columns": ["carrier", "month"],
                         "aliases": {"carrier": {"United": "UA"}, "month": {"1": "January"}}}, frame, None)
    out = fitted.apply(frame)
    assert out["carrier"].tolist() == ["UA", "UA", None, "DL"]
    assert out["month"].tolist() == ["January", "2", "January", "12"]  # integers read as text
    assert out["carrier"].dtype == object and out["month"].dtype == object


def test_aliases_must_map_every_column():
    with pytest.raises(StepError, match=r"step 'a' \(AliasReplacement\): .*aliases must map each of columns "
                                        r"\['carrier', 'origin'\].*got maps for \['carrier'\]"):
        parse_params({"step": "AliasReplacement", "name": "a", "columns": ["carrier", "origin"],
                      "aliases": {"carrier": {"United": "UA"}}})


def test_invalid_values_by_hand():
    frame = pd.DataFrame({"dep_delay": [-999.0, 5.0, 200.0, np.inf, np.nan, -30.0]})
    raw = {"step": "InvalidValueReplacement", "name": "v", "columns": ["dep_delay"], "invalid": [-999],
           "lower": -30, "upper": 120}
    out = learn_step(raw, frame, None).apply(frame)["dep_delay"].to_numpy()
    np.testing.assert_array_equal(out, [np.nan, 5.0, np.nan, np.nan, np.nan, -30.0])  # bounds are valid
    filled = learn_step({**raw, "replacement": -1}, frame, None).apply(frame)["dep_delay"].to_numpy()
    np.testing.assert_array_equal(filled, [-1.0, 5.0, -1.0, -1.0, np.nan, -30.0])  # missing is not invalid


def test_invalid_values_refuse_text_and_empty_or_crossed_settings():
    frame = pd.DataFrame({"carrier": ["UA", "AA"]})
    with pytest.raises(StepError, match=r"column 'carrier' is object, not numeric.*ValueReplacement"):
        learn_step({"step": "InvalidValueReplacement", "name": "v", "columns": ["carrier"], "invalid": [0]},
                   frame, None)
    with pytest.raises(StepError, match="nothing is declared invalid; give invalid"):
        parse_params({"step": "InvalidValueReplacement", "name": "v", "columns": ["x"]})
    with pytest.raises(StepError, match=r"lower \(5.0\) is above upper \(1.0\); swap them"):
        parse_params({"step": "InvalidValueReplacement", "name": "v", "columns": ["x"], "lower": 5, "upper": 1})


def test_text_cleaning_by_hand():
    frame = pd.DataFrame({"city": ["  São  Paulo\tGRU 12 ", None, "ZÜRICH"]})
    fitted = learn_step({"step": "TextCleaning", "name": "t", "columns": ["city"], "strip_accents": True,
                         "remove": ["[0-9]+"]}, frame, None)
    # accents: "Sao  Paulo\tGRU 12" -> digits removed -> lower -> spaces collapsed -> stripped
    assert fitted.apply(frame)["city"].tolist() == ["sao paulo gru", None, "zurich"]
    plain = learn_step({"step": "TextCleaning", "name": "t", "columns": ["city"], "lower": False,
                        "collapse_spaces": False}, frame, None)
    assert plain.apply(frame)["city"].tolist() == ["São  Paulo\tGRU 12", None, "ZÜRICH"]


def test_text_cleaning_refuses_a_pattern_that_does_not_compile():
    with pytest.raises(StepError, match=r"remove pattern '\(' is not a regular expression"):
        parse_params({"step": "TextCleaning", "name": "t", "columns": ["city"], "remove": ["("]})


def test_drop_missing_columns_decides_at_training_only():
    train = pd.DataFrame({"a": [1.0, None, None, 4.0], "b": [1.0, 2.0, 3.0, None], "c": [None, None, None, 1.0]})
    fitted = learn_step({"step": "DropMissingColumns", "name": "d", "columns": ["a", "b", "c"]}, train, None)
    # missing shares 0.5, 0.25, 0.75: only c is above 0.5
    assert fitted.state["dropped"] == ["c"] and fitted.state["kept"] == ["a", "b"]
    full = pd.DataFrame({"a": [None], "b": [None], "c": [3.0]})  # a batch's own gaps change nothing
    assert list(fitted.apply(full).columns) == ["a", "b"]
    with pytest.raises(StepError, match="threshold: Input should be less than 1"):
        parse_params({"step": "DropMissingColumns", "name": "d", "columns": ["a"], "threshold": 1.0})
