"""Casting and ValueReplacement."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.columns import Columns
from lakescore.errors import InputError, StepError
from lakescore.steps import learn_step


@pytest.mark.parametrize("raw", cases("Casting", "ValueReplacement"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_plain_int64_cast_of_text_is_refused_with_the_fix():
    frame = pd.DataFrame({"tailnum": ["N14228", "N24211"]})
    with pytest.raises(StepError, match=r"column 'tailnum' holds text \(e.g. 'N14228'\).*cast to Int64"):
        learn_step({"step": "Casting", "name": "c", "columns": ["tailnum"], "to": "int64"}, frame, None)


def test_plain_int64_cast_of_text_numbers_quotes_the_value_that_is_not_a_number():
    frame = pd.DataFrame({"distance": ["4500", "212", "n/a", "17"]})
    with pytest.raises(StepError) as err:
        learn_step({"step": "Casting", "name": "c", "columns": ["distance"], "to": "int64"}, frame, None)
    assert str(err.value) == ("step 'c': column 'distance' holds text (e.g. 'n/a'), so a plain int64 cast would "
                              "change dtype from batch to batch; cast to Int64 (to: Int64)")


def test_plain_int64_cast_of_a_column_with_missing_values_is_refused(flights_sample):
    with pytest.raises(StepError, match="column 'dep_time' holds missing values.*cast to Int64"):
        learn_step({"step": "Casting", "name": "c", "columns": ["dep_time"], "to": "int64"}, flights_sample, None)


def test_int64_cast_keeps_whole_numbers_and_marks_the_rest_missing():
    frame = pd.DataFrame({"dep_time": ["517", "5.5", "n/a", None, "0"]})
    fitted = learn_step({"step": "Casting", "name": "c", "columns": ["dep_time"], "to": "Int64"}, frame, None)
    out = fitted.apply(frame)["dep_time"]
    assert str(out.dtype) == "Int64"
    assert out.tolist() == [517, pd.NA, pd.NA, pd.NA, 0]


def test_boolean_cast_reads_text_and_numbers():
    frame = pd.DataFrame({"flag": ["yes", "False", "1", 0, "maybe"]}, dtype=object)
    fitted = learn_step({"step": "Casting", "name": "c", "columns": ["flag"], "to": "boolean"}, frame, None)
    assert fitted.apply(frame)["flag"].tolist() == [True, False, True, False, pd.NA]


def test_value_replacement_dtype_does_not_follow_the_batch():
    train = pd.DataFrame({"minute": [0, 15, 30]})
    fitted = learn_step({"step": "ValueReplacement", "name": "v", "columns": ["minute"], "to_missing": [0]},
                        train, None)
    with_zero = fitted.apply(pd.DataFrame({"minute": [0, 15]}))["minute"]
    without = fitted.apply(pd.DataFrame({"minute": [15]}))["minute"]
    assert str(with_zero.dtype) == str(without.dtype) == "Int64"
    assert with_zero.tolist() == [pd.NA, 15]


def test_value_replacement_of_text():
    train = pd.DataFrame({"origin": ["EWR", "JFK", None]})
    fitted = learn_step({"step": "ValueReplacement", "name": "v", "columns": ["origin"],
                         "replace": [["EWR", "Newark"], [None, "unknown"]]}, train, None)
    assert fitted.apply(train)["origin"].tolist() == ["Newark", "JFK", "unknown"]


def test_value_replacement_needs_something_to_replace():
    with pytest.raises(StepError, match="nothing to replace"):
        learn_step({"step": "ValueReplacement", "name": "v", "columns": ["x"]}, pd.DataFrame({"x": [1]}), None)


def test_float64_cast_is_numbers_only():
    frame = pd.DataFrame({"dep_delay": ["2.5", "x", None]})
    fitted = learn_step({"step": "Casting", "name": "c", "columns": ["dep_delay"], "to": "float64"}, frame, None)
    out = fitted.apply(frame)["dep_delay"].to_numpy()
    assert out.dtype == np.float64 and out[0] == 2.5 and np.isnan(out[1:]).all()


def test_boolean_cast_kernel_reads_each_value_as_apply_does():
    # 1 == 1.0 == True and 0 == -0.0, but -0.0 prints '-0.0': not false
    frame = pd.DataFrame({
        "mixed": pd.Series([1, 1.0, True, -0.0, 0, " Yes ", "1.0", "n", None, 2, np.nan, pd.NA], dtype=object),
        "number": [1.0, -0.0, 0.0, 2.0, np.nan, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0],
        "text": pd.Series(["y", "Y", "no", "x", None, "T", "y", "f", "0", "1", "y", "y"], dtype="string"),
    })
    fitted = learn_step({"step": "Casting", "name": "c", "columns": ["mixed", "number", "text"], "to": "boolean"},
                        frame, None)
    want = {"mixed": [True, True, True, pd.NA, False, True, True, False, pd.NA, pd.NA, pd.NA, pd.NA],
            "number": [True, pd.NA, False, pd.NA, pd.NA, True, False, True, True, False, True, True],
            "text": [True, True, False, pd.NA, pd.NA, True, True, False, False, True, True, True]}
    batch = Columns.from_frame(frame, frame.columns)
    fitted.kernel().apply(batch)
    reference = fitted.apply(frame)
    for column, values in want.items():
        assert str(batch.array(column).dtype) == str(reference[column].dtype) == "boolean"
        assert batch.array(column).tolist() == reference[column].tolist() == values, column


def test_plain_int64_cast_kernel_refuses_a_fraction_as_apply_does():
    fitted = learn_step({"step": "Casting", "name": "c", "columns": ["distance"], "to": "int64"},
                        pd.DataFrame({"distance": [1, 2]}), None)
    score = pd.DataFrame({"distance": [1.0, 2.5]})
    message = r"casts column 'distance' to plain int64, but a row holds np.float64\(2.5\); cast to Int64"
    with pytest.raises(InputError, match=message):
        fitted.apply(score)
    with pytest.raises(InputError, match=message):
        fitted.kernel().apply(Columns.from_frame(score, ["distance"]))


def test_value_replacement_kernel_matches_values_as_python_compares_them():
    # 1 == 1.0 == True, so [True, "yes"] (the later pair) replaces all three; the text "1" is another value
    frame = pd.DataFrame({"code": pd.Series([1, 1.0, True, "1", None, 2, np.nan], dtype=object)})
    fitted = learn_step({"step": "ValueReplacement", "name": "v", "columns": ["code"],
                         "replace": [[1, "one"], [True, "yes"], [None, "gap"]], "to_missing": [2]}, frame, None)
    batch = Columns.from_frame(frame, ["code"])
    fitted.kernel().apply(batch)
    want = ["yes", "yes", "yes", "1", "gap", None, "gap"]
    assert batch.array("code").dtype == object and batch.array("code").tolist() == want
    assert fitted.apply(frame)["code"].tolist() == want
