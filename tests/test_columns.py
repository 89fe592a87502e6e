"""Columns: the batch a compiled plan works on gives exactly what the pandas helpers give."""

import numpy as np
import pandas as pd
import pytest

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.steps.base import float_values, text_values

FRAME = pd.DataFrame({
    "int": np.array([1, -2, 2**53 + 1]),
    "uint": np.array([1, 2, 3], dtype="uint8"),
    "flag": np.array([True, False, True]),
    "float": [1.0, np.nan, 2.5],
    "Int64": pd.array([1, None, 3], dtype="Int64"),
    "boolean": pd.array([True, None, False], dtype="boolean"),
    "text": np.array(["a", None, np.nan], dtype=object),
    "string": pd.array(["a", None, "c"], dtype="string"),
    "mixed": np.array([1, "b", None], dtype=object),
    "numbers_as_text": np.array(["1.5", None, "2"], dtype=object),
}, index=[10, 20, 30])


@pytest.mark.parametrize("column", list(FRAME.columns))
def test_texts_and_floats_are_what_the_step_helpers_give(column):
    batch = Columns.from_frame(FRAME, FRAME.columns)
    assert batch.texts(column).tolist() == text_values(FRAME, column).tolist()
    if column in ("text", "mixed", "string"):
        with pytest.raises(StepError, match=f"column '{column}'"):
            batch.floats(column, step="s")
        return
    np.testing.assert_array_equal(batch.floats(column, step="s"), float_values(FRAME, column, step="s"))


def test_a_numpy_column_is_read_only_in_the_batch_and_the_callers_frame_stays_writable():
    frame = pd.DataFrame({"x": [1.0, 2.0]})
    batch = Columns.from_frame(frame, ["x"])
    with pytest.raises(ValueError, match="read-only"):
        batch.floats("x", step="s")[0] = 99.0
    frame.loc[0, "x"] = 5.0  # the frame's own array is untouched by the view
    assert frame["x"].tolist() == [5.0, 2.0]


def test_an_object_column_of_timestamps_stays_object_in_the_frames_a_rule_or_step_gets():
    stamps = np.array([pd.Timestamp("2013-01-01 05:00"), pd.NaT], dtype=object)
    batch = Columns.from_frame(pd.DataFrame({"t": pd.Series(stamps, dtype=object)}), ["t"])
    assert batch.frame(["t"])["t"].dtype == object and batch.frame(["t"], copy=True)["t"].dtype == object
    with pytest.raises(StepError, match="column 't'"):  # as float_values refuses the object column
        batch.floats("t", step="s")


def test_keep_replace_and_frame_keep_dtypes_and_the_index():
    batch = Columns.from_frame(FRAME, ["Int64", "text", "float"])
    batch.keep(np.array([True, False, True]))
    assert batch.index.tolist() == [10, 30] and len(batch) == 2
    frame = batch.frame(["Int64", "text"])
    assert [str(t) for t in frame.dtypes] == ["Int64", "object"] and frame.index.tolist() == [10, 30]
    batch.replace(["text", "float"], pd.DataFrame({"float": [0.5, 1.5], "new": ["x", "y"]}, index=[10, 30]))
    assert sorted(batch.arrays) == ["Int64", "float", "new"]  # "text" was read and not returned: dropped
    matrix = batch.float_matrix(["float", "Int64"], step="s")
    assert matrix.flags.f_contiguous and matrix.tolist() == [[0.5, 1.0], [1.5, 3.0]]
