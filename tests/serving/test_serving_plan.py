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


def test_registry_reads_go_to_the_endpoint_s_registry_even_when_its_fork_server_is_gone(tmp_path, monkeypatch) -> None:
    """The endpoint process never sets MLflow's URIs (its fork server's children get them): a registry
    read made while no fork server ran went to MLflow's default registry instead, ``./mlflow.db`` in
    the working directory, created empty, where the served version is missing, so the stale check
    called a registered version deleted and the endpoint refused to start replicas of it."""
    from lakescore.runtime import LocalRuntime
    from lakescore.serving import forkserver
    from lakescore.serving.plan import registry_view

    served = LocalRuntime(tmp_path / "served").mlflow().MlflowClient()
    served.create_registered_model("main.s.m")
    served.create_model_version("main.s.m", source=(tmp_path / "files").as_uri())
    served.set_registered_model_alias("main.s.m", "champion", "1")
    uri = mlflow.get_tracking_uri()
    LocalRuntime(tmp_path / "other").mlflow()  # this process's MLflow points at a registry without it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(forkserver.child_env, "MLFLOW_TRACKING_URI", uri)
    monkeypatch.setitem(forkserver.child_env, "MLFLOW_REGISTRY_URI", uri)
    monkeypatch.setattr(forkserver, "running", lambda: False)  # its fork server died (or has not started yet)
    view = registry_view("main.s.m", 1, alias="champion")
    assert (view.version_registered, view.alias_version) == (True, 1)
    assert not (tmp_path / "mlflow.db").exists()
