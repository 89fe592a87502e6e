"""plan_endpoint: which version an endpoint pins, and the versions it refuses before starting."""

import dataclasses

import mlflow
import pytest

from lakescore.admission.evidence import admit
from lakescore.config import load_project
from lakescore.errors import ConfigError
from lakescore.lookup import FeatureLookup
from lakescore.packaging import log_and_register
from lakescore.serving.plan import plan_endpoint


@pytest.mark.filterwarnings("ignore::UserWarning:mlflow")  # mlflow's own notices about the local store
def test_a_lookup_model_is_refused_at_plan_time_naming_its_tables(runtime, project_dir, small_chain, flights_sample):
    chain = dataclasses.replace(small_chain, lookups=(FeatureLookup("main.flights.planes", ("tailnum",), ("seats",)),),
                                lookup_versions=(0,))
    runtime.mlflow()
    with mlflow.start_run():
        log_and_register(chain, example=flights_sample.head(5), name="main.flights.late_arrival", alias="champion",
                         evidence=admit(chain, flights_sample.iloc[1500:]))
    with pytest.raises(ConfigError, match=r"serving.yml: model_selection 'champion': model main.flights.late_arrival "
                                          r"v1 joins feature lookups \(main.flights.planes\), and serving a lookup "
                                          r"model is not built yet"):
        plan_endpoint(load_project(project_dir), home=runtime.home)
