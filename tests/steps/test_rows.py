"""Deduplicate and DropMissingRows: training-only row steps."""

import pandas as pd
import pytest

from lakescore.steps import learn_step
from step_contract import cases, check_contract


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
