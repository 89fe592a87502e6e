"""plan_endpoint: which version an endpoint pins, what its requests carry, and its feature lookups."""

import dataclasses

import mlflow
import pytest

from lakescore.admission.evidence import admit
from lakescore.config import load_project
from lakescore.lookup import FeatureLookup
from lakescore.packaging import log_and_register, model_input_kinds
from lakescore.serving.plan import plan_endpoint


@pytest.mark.filterwarnings("ignore::UserWarning:mlflow")  # mlflow's own notices about the local store
def test_a_lookup_model_is_planned_with_the_request_columns_and_its_specs(runtime, project_dir, small_chain,
                                                                         flights_sample):
    spec = FeatureLookup("main.flights.planes", ("tailnum",), ("seats",))
    chain = dataclasses.replace(small_chain, lookups=(spec,), lookup_versions=(0,))
    runtime.mlflow()
    with mlflow.start_run():
        log_and_register(chain, example=flights_sample.head(5), name="main.flights.late_arrival", alias="champion",
                         evidence=admit(chain, flights_sample.iloc[1500:]))
    plan = plan_endpoint(load_project(project_dir), home=runtime.home)
    assert plan.lookups == (spec.to_json(),)
    signature = model_input_kinds("models:/main.flights.late_arrival/1")
    assert "tailnum" not in signature  # the chain does not read it: the request carries it as the lookup key
    assert list(plan.input_columns.items()) == [*signature.items(), ("tailnum", "key")]
    assert plan.summary()["feature_lookups"] == ["main.flights.planes"]
