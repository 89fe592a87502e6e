"""Which columns monitoring summarises: a chain's prediction, or each output of a model set."""

from __future__ import annotations

from lakescore.monitoring.outputs import CHAIN, Output, chain_output, set_outputs

SET_RECEIPT = {"components": [{"name": "delay_model", "digest": "1f"}, {"name": "minutes_model", "digest": "2e"}]}
SET_COLUMNS = {"flight_id": "numeric", "delay_model_prediction": "numeric", "delay_model_probability": "numeric",
               "minutes_model_prediction": "numeric", "late_risk": "numeric", "scoring_status": "label",
               "exclusion_reason": "label", "late_flag": "label", "band": "label", "model_name": "label",
               "model_version": "numeric", "run_id": "label"}


def test_a_set_has_each_component_then_each_other_output_column() -> None:
    found = set_outputs(SET_COLUMNS, SET_RECEIPT, ["flight_id"])
    assert found == (Output("delay_model", "delay_model_prediction", "delay_model_probability", label=True),
                     Output("minutes_model", "minutes_model_prediction"),
                     Output("late_risk", "late_risk"),
                     Output("late_flag", "late_flag", label=True), Output("band", "band", label=True))
    assert [(o.value_column, o.value_role) for o in found] == [
        ("delay_model_probability", "probability"), ("minutes_model_prediction", "prediction"),
        ("late_risk", "prediction"), (None, "prediction"), (None, "prediction")]


def test_a_chain_has_no_set_outputs_and_its_prediction_is_summarised_as_before() -> None:
    chain = {"flight_id": "numeric", "prediction": "numeric", "probability": "numeric", "scoring_status": "label"}
    assert set_outputs(chain, {"components": None}, ["flight_id"]) == ()
    assert set_outputs(chain, SET_RECEIPT, ["flight_id"]) == ()  # rows with a prediction column are a chain's
    assert chain_output(chain) == CHAIN and CHAIN.value_column == "probability" and CHAIN.label
    regressor = chain_output(["prediction", "scoring_status"])
    assert (regressor.value_column, regressor.label) == ("prediction", False)
