"""User steps: column_step, fitted_step, filter_step, and how they are saved and run."""

import pandas as pd
import pytest
from fixtures import step_contract

import lakescore.chain  # noqa: F401  (registers the user step kinds)
from lakescore.custom import UserStep, column_step, filter_step, fitted_step, resolve_user_step
from lakescore.errors import StepError
from lakescore.steps import FittedStep, learn_step
from lakescore.usercode import FunctionRef, UserCodeError


@pytest.mark.parametrize("entry", step_contract.CASES["custom"], ids=lambda e: e["name"])
def test_contract(entry, flights_sample):
    step_contract.check_contract({"step": "custom", **entry}, flights_sample)


# --- user functions for the tests below (module level: saved by name) -------------------------

def scribble(frame):
    """Mutates its input: the pipeline's frame must not change."""
    frame["distance"] = -1
    return frame["distance"] * 2


scribble_step = column_step("scribble", scribble, output=["double_scribble"])


def wrong_columns(frame):
    return pd.DataFrame({"other": frame["distance"]})


wrong_columns_step = column_step("wrong", wrong_columns, output=["expected"])


def learn_set(frame, y):
    return {"bad": {1, 2}}


def apply_nothing(frame, state):
    return frame["distance"]


unjsonable_step = fitted_step("unjsonable", learn_set, apply_nothing, output=["d"])


def shuffled(frame):
    return frame["distance"].sort_values(ascending=False)


shuffled_step = column_step("shuffled", shuffled, output=["sorted_distance"])

plain_function = scribble


def _run(ref, columns=("distance",)):
    frame = pd.DataFrame({"distance": [100, 200, 300]})
    return frame, learn_step({"step": "custom", "name": "u", "ref": ref, "columns": list(columns)}, frame, None)


# --- tests --------------------------------------------------------------------------------------

def test_a_lambda_is_refused_with_the_fix():
    with pytest.raises(UserCodeError, match="Define a named function at module level"):
        column_step("speed", lambda frame: frame["distance"], output=["speed"])


def test_a_nested_function_is_refused():
    def inner(frame):
        return frame

    with pytest.raises(UserCodeError, match="lambda or nested function"):
        filter_step("inner", inner)


def test_output_must_be_a_list():
    with pytest.raises(StepError, match="output must be a non-empty list"):
        column_step("s", scribble, output="double")


def test_the_declaration_saves_name_source_and_digest():
    declared = resolve_user_step("lakescore_project.preprocessing:dep_clock_step", step="dep_clock")
    ref = declared.functions["apply"]
    assert (ref.module, ref.qualname) == ("lakescore_project.preprocessing", "dep_clock")
    assert ref.source.startswith("def dep_clock(frame")
    assert declared.inference_context == "row"


def test_the_fitted_step_keeps_its_function_refs_in_state(flights_sample):
    fitted = learn_step({"step": "custom", "name": "carrier_delay", "ref": "lakescore_project.preprocessing:carrier_delay_step",
                         "columns": ["carrier", "dep_delay"]}, flights_sample, None)
    assert fitted.kind == "custom_fitted" and fitted.impl.user_code
    assert FunctionRef.from_json(fitted.state["apply"]).qualname == "apply_carrier_delay"
    assert FunctionRef.from_json(fitted.state["learn"]).qualname == "learn_carrier_delay"
    by_carrier = flights_sample.dropna(subset=["dep_delay"]).groupby("carrier")["dep_delay"].median()
    assert fitted.state["user_state"]["by_carrier"]["UA"] == float(by_carrier["UA"])
    out = fitted.apply(pd.DataFrame({"carrier": ["UA", "ZZ"], "dep_delay": [0.0, 0.0]}))
    assert out["carrier_median_delay"].tolist() == [float(by_carrier["UA"]), fitted.state["user_state"]["overall"]]


def test_apply_receives_a_copy():
    frame, fitted = _run("test_custom:scribble_step")
    out = fitted.apply(frame)
    assert out["distance"].tolist() == [100, 200, 300]
    assert out["double_scribble"].tolist() == [-2, -2, -2]


def test_returning_other_columns_names_the_step_and_the_fix():
    with pytest.raises(StepError, match=r"user step 'u' returned columns \['other'\]; declared output is \['expected'\]"):
        _run("test_custom:wrong_columns_step")


def test_returning_rows_in_another_order_is_refused():
    with pytest.raises(StepError, match="returned a frame with a different index"):
        _run("test_custom:shuffled_step")


def test_state_that_is_not_json_is_refused():
    with pytest.raises(StepError, match="learn\\(\\) returned state that is not JSON-able"):
        _run("test_custom:unjsonable_step")


def test_a_ref_to_a_plain_function_says_how_to_declare_it():
    with pytest.raises(UserCodeError, match="is a function, not a user step. Declare it"):
        _run("test_custom:plain_function")


def test_a_filter_step_is_training_only(flights_sample):
    fitted = learn_step({"step": "custom", "name": "positive_distance", "ref": "lakescore_project.preprocessing:positive_distance",
                         "columns": ["distance"]}, flights_sample, None)
    assert fitted.training_only and fitted.reusable_as_eligibility
    frame = pd.DataFrame({"distance": [0, 5, None]})
    assert fitted.flags(frame).tolist() == [True, False, True]  # missing -> dropped


def test_inference_context_is_saved():
    declared = column_step("wide", scribble, output=["x"], inference_context="group")
    assert isinstance(declared, UserStep) and declared.inference_context == "group"
    with pytest.raises(StepError, match="inference_context must be one of row, group, window, global"):
        column_step("wide", scribble, output=["x"], inference_context="batch")


def test_saved_step_reloads_and_applies(flights_sample):
    fitted = learn_step({"step": "custom", "name": "dep_clock", "ref": "lakescore_project.preprocessing:dep_clock_step",
                         "columns": ["hour", "minute"]}, flights_sample, None)
    again = FittedStep.from_json(fitted.to_json())
    frame = pd.DataFrame({"hour": [5, 23], "minute": [15, 59]})
    assert again.apply(frame)["dep_clock"].tolist() == [5.25, 23 + 59 / 60]
