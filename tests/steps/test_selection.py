"""VarianceThreshold."""

import pandas as pd
import pytest

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.steps import learn_step
from step_contract import cases, check_contract


@pytest.mark.parametrize("raw", cases("VarianceThreshold"))
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
