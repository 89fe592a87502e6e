"""The pre-split recipe: fixed steps on the whole table, target-reading steps skipped at scoring."""

import pandas as pd
import pytest

from lakescore.errors import StepError
from lakescore.steps.recipe import learn_pre_split


def _frame():
    return pd.DataFrame({"dep_delay": [1.0, None, 3.0, 3.0, 500.0], "arr_delay": [2.0, 5.0, None, 4.0, 1.0],
                         "origin": ["EWR", "JFK", "EWR", "EWR", "LGA"]}, index=[10, 11, 12, 13, 14])


def test_filters_drop_rows_and_report_what_survives():
    recipe = [{"step": "DropMissingRows", "name": "has_delay", "columns": ["dep_delay"]},
              {"step": "ManualBounds", "name": "plausible", "columns": ["dep_delay"], "upper": 300},
              {"step": "ValueReplacement", "name": "rename", "columns": ["origin"], "replace": [["EWR", "Newark"]]}]
    pre = learn_pre_split(_frame(), recipe=recipe, target_columns=["arr_delay"])
    assert list(pre.kept) == [10, 12, 13]
    assert pre.skipped == ()
    assert [s.rows_out for s in pre.steps] == [4, 3, 3]


def test_a_step_that_reads_the_target_is_skipped_at_scoring():
    recipe = [{"step": "DropMissingRows", "name": "has_label", "columns": ["arr_delay"]}]
    pre = learn_pre_split(_frame(), recipe=recipe, target_columns=["arr_delay"])
    assert pre.skipped == ("has_label",)
    assert list(pre.kept) == [10, 11, 13, 14]


def test_reading_the_target_without_skipping_is_an_error():
    recipe = [{"step": "DropMissingRows", "name": "has_label", "columns": ["arr_delay"]}]
    with pytest.raises(StepError, match=r"reads the target column\(s\) \['arr_delay'\].*skip_target_pre_split_steps"):
        learn_pre_split(_frame(), recipe=recipe, target_columns=["arr_delay"], skip_target=False)


def test_a_learning_step_cannot_run_before_the_split():
    recipe = [{"step": "StandardScaler", "name": "scale", "columns": ["dep_delay"]}]
    with pytest.raises(StepError, match=r"'scale' \(StandardScaler\) learns from the rows.*move it to preprocessing"):
        learn_pre_split(_frame(), recipe=recipe, target_columns=["arr_delay"])
