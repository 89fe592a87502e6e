"""Deduplicate and DropMissingRows: training-only row steps."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.columns import Columns
from lakescore.steps import learn_step


@pytest.mark.parametrize("raw", cases("Deduplicate", "DropMissingRows"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_deduplicate_drops_repeats_at_training():
    frame = pd.DataFrame({"origin": ["EWR", "EWR", "JFK", "EWR"], "dest": ["IAH", "IAH", "MIA", "MIA"]})
    fitted = learn_step({"step": "Deduplicate", "name": "d", "columns": ["origin", "dest"]}, frame, None)
    assert fitted.training_only
    assert fitted.flags(frame).tolist() == [False, True, False, False]
    assert (fitted.rows_in, fitted.rows_out) == (4, 3)
    assert fitted.apply(frame).equals(frame)


def test_drop_missing_rows_how_all():
    frame = pd.DataFrame({"dep_delay": [None, None, 1.0], "tailnum": [None, "N1", None]})
    fitted = learn_step({"step": "DropMissingRows", "name": "d", "columns": ["dep_delay", "tailnum"],
                         "how": "all"}, frame, None)
    assert fitted.flags(frame).tolist() == [True, False, False]
    assert fitted.reusable_as_eligibility


def test_drop_missing_rows_kernel_flags_each_dtypes_missing_value():
    frame = pd.DataFrame({"n": pd.array([1, None, 3, 4, 5], dtype="Int64"),
                          "s": pd.array(["a", "b", None, "d", "e"], dtype="string"),
                          "o": np.array(["x", "y", "z", np.nan, "w"], dtype=object),
                          "t": pd.to_datetime(["2013-01-01", None, "2013-01-03", "2013-01-04", None], utc=True)})
    any_ = learn_step({"step": "DropMissingRows", "name": "d", "columns": ["n", "s", "o"]}, frame, None)
    all_ = learn_step({"step": "DropMissingRows", "name": "d", "columns": ["n", "t"], "how": "all"}, frame, None)
    batch = Columns.from_frame(frame, frame.columns)
    assert any_.kernel().flags(batch).tolist() == [False, True, True, True, False]
    assert all_.kernel().flags(batch).tolist() == [False, True, False, False, False]
