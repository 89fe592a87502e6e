"""The step contract's plumbing: the registry, config validation, learn_step and FittedStep."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import CASES, RESOLVED, cases, learning_frame

import lakescore.custom  # noqa: F401  (registers the user step kinds)
from lakescore.errors import InputError, StepError
from lakescore.steps import STEPS, FittedStep, learn_step, parse_params
from lakescore.steps.base import float_values, text_values


def test_every_builtin_step_has_contract_cases():
    ours = {k for k, cls in STEPS.items() if cls.__module__.startswith("lakescore.")}
    assert ours - RESOLVED == set(CASES), "add a CASES entry in tests/steps/step_contract.py for each new step"


DATA_NAMED = {"OneHotEncoder", "DummyEncoder",  # their new columns are named after the training values:
              "count_vectorizer", "tfidf_vectorizer"}  # none declared


@pytest.mark.parametrize("raw", cases(*CASES))
def test_declared_outputs_name_every_column_a_step_adds(raw, flights_sample):
    train, label = learning_frame(flights_sample)
    added = [c for c in learn_step(raw, train, label).apply(train).columns if c not in train.columns]
    declared = STEPS[raw["step"]].outputs(parse_params(raw))
    if raw["step"] in DATA_NAMED:
        assert declared == [] and added
    else:
        assert set(added) <= set(declared) and set(declared) - set(added) <= set(
            f"{c}_missing" for c in raw["columns"]), (added, declared)  # missing-only adds fewer


def test_declared_outputs_of_new_column_steps_are_known_from_config():
    def declared(raw):
        return STEPS[raw["step"]].outputs(parse_params(raw))

    assert declared({"step": "FeatureInteraction", "name": "f", "columns": ["distance", "air_time"],
                     "operation": "ratio"}) == ["distance_per_air_time"]
    assert declared({"step": "PolynomialFeatures", "name": "p", "columns": ["hour", "dep_delay"]}) == [
        "hour_pow2", "hour_x_dep_delay", "dep_delay_pow2"]
    assert declared({"step": "DateFeatures", "name": "d", "columns": ["time_hour"], "parts": ["month", "hour"]}) == [
        "time_hour_month", "time_hour_hour"]
    assert declared({"step": "StandardScaler", "name": "s", "columns": ["distance"]}) == []
    assert declared({"step": "custom", "name": "clock", "ref": "lakescore_project.preprocessing:dep_clock_step",
                     "columns": ["hour", "minute"]}) == ["dep_clock"]


def test_unknown_step_lists_the_known_ones():
    with pytest.raises(StepError, match="unknown preprocessing step 'Scaler'.*StandardScaler"):
        parse_params({"step": "Scaler", "name": "s", "columns": ["x"]})


def test_bad_key_names_the_step_and_the_key():
    with pytest.raises(StepError, match=r"step 'scale' \(StandardScaler\): with_mea: Extra inputs"):
        parse_params({"step": "StandardScaler", "name": "scale", "columns": ["x"], "with_mea": False})


def test_missing_column_is_named_at_learn_time():
    frame = pd.DataFrame({"distance": [1.0, 2.0]})
    with pytest.raises(StepError, match=r"names column\(s\) \['dep_delay'\].*available: \['distance'\]"):
        learn_step({"step": "StandardScaler", "name": "s", "columns": ["dep_delay"]}, frame, None)


def test_group_keys_are_required_inputs_at_apply_time():
    frame = pd.DataFrame({"dep_delay": [1.0, None], "origin": ["EWR", "JFK"]})
    fitted = learn_step({"step": "GroupImputer", "name": "g", "columns": ["dep_delay"], "by": ["origin"]},
                        frame, None)
    assert fitted.inputs == ["dep_delay", "origin"]
    with pytest.raises(InputError, match=r"step 'g' needs column\(s\) \['origin'\]"):
        fitted.apply(frame[["dep_delay"]])


def test_apply_never_changes_its_input():
    frame = pd.DataFrame({"dep_delay": [1.0, None, 3.0]})
    fitted = learn_step({"step": "SimpleImputer", "name": "s", "columns": ["dep_delay"]}, frame, None)
    fitted.apply(frame)
    assert frame["dep_delay"].isna().sum() == 1


def test_training_only_step_flags_the_rows_it_drops_and_counts_them():
    frame = pd.DataFrame({"dep_delay": [1.0, None, 3.0, None]})
    fitted = learn_step({"step": "DropMissingRows", "name": "d", "columns": ["dep_delay"]}, frame, None)
    assert fitted.training_only
    assert fitted.flags(frame).tolist() == [False, True, False, True]
    assert (fitted.rows_in, fitted.rows_out) == (4, 2)


def test_fitted_step_json_round_trip_keeps_rows_in_and_out():
    frame = pd.DataFrame({"distance": [100.0, 200.0, 300.0, 400.0, 5000.0]})
    fitted = learn_step({"step": "IQR", "name": "far", "columns": ["distance"]}, frame, None)
    again = FittedStep.from_json(fitted.to_json())
    assert (again.rows_in, again.rows_out) == (5, 4)
    assert again == fitted


def test_float_values_refuses_text_naming_the_column_and_a_fix():
    frame = pd.DataFrame({"carrier": ["UA", "AA"]})
    with pytest.raises(StepError, match=r"step 's' needs numbers in column 'carrier' but found 'UA'; encode"):
        float_values(frame, "carrier", step="s")


def test_a_text_column_of_numbers_quotes_the_value_that_failed():
    frame = pd.DataFrame({"distance": ["4500.0", None, "212", "n/a", "x"]}, dtype=object)
    with pytest.raises(StepError) as err:
        learn_step({"step": "StandardScaler", "name": "scale", "columns": ["distance"]}, frame, None)
    assert str(err.value) == ("step 'scale' needs numbers in column 'distance' but found 'n/a'; encode the column "
                              "first (OneHotEncoder, OrdinalEncoder) or cast it (Casting to: Float64)")


def test_float_values_reads_nullable_integers_as_float_with_nan():
    frame = pd.DataFrame({"dep_time": pd.array([517, None], dtype="Int64")})
    values = float_values(frame, "dep_time", step="s")
    assert values.dtype == np.float64 and values[0] == 517.0 and np.isnan(values[1])


def test_text_values_print_integers_the_same_in_int64_and_Int64():
    plain = pd.DataFrame({"month": [1, 12]})
    nullable = pd.DataFrame({"month": pd.array([1, None], dtype="Int64")})
    assert text_values(plain, "month").tolist() == ["1", "12"]
    assert text_values(nullable, "month").tolist() == ["1", None]
