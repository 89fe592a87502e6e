"""config/serving.yml as a Databricks Model Serving endpoint config: the mapping (sizes, scale to
zero, routes), the SDK round trip, ``lakescore serve --export-model-serving`` and ``--create``.

The config is built with no workspace. ``--create`` reaches the SDK's
``ServingEndpointsAPI.create``, the one call that needs a workspace, which is replaced; the SDK's
own client is built against a real HTTP server on 127.0.0.1 standing in for the workspace host
(it answers 404 to the SDK's host-metadata discovery).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from databricks.sdk.service._internal import Wait
from databricks.sdk.service.serving import (
    EndpointCoreConfigInput,
    ServedEntityInput,
    ServingEndpointDetailed,
    ServingEndpointsAPI,
)
from serving_helpers import MODEL, REPO

from lakescore.cli import main
from lakescore.config import load_project
from lakescore.errors import ConfigError, ModelServingLookupsError
from lakescore.serving.model_serving import (
    ai_gateway_config,
    endpoint_config,
    provisioned_concurrency,
    read_request,
    refuse_lookups,
)


def settings(**overrides: Any):
    serving = load_project(REPO / "config").serving
    assert serving is not None
    return serving.model_copy(update=overrides)


def test_provisioned_concurrency_keeps_replicas_min_and_max_in_steps_of_four() -> None:
    from lakescore.config import ReplicasConfig

    # one request at a time per replica and per concurrency unit; Model Serving grants units in fours
    assert [provisioned_concurrency(ReplicasConfig(min=a, max=b)) for a, b in
            ((0, 1), (1, 1), (0, 6), (5, 6), (10, 12), (12, 64))] == [
        (0, 4), (4, 4), (0, 8), (8, 8), (12, 12), (12, 64)]
    with pytest.raises(ConfigError, match="replicas.max 65 is above Model Serving's Large workload size"):
        provisioned_concurrency(ReplicasConfig.model_construct(min=1, max=65))  # serving.yml caps it at 64


def test_pinned_and_candidate_with_scale_to_zero_and_canary_routes() -> None:
    from lakescore.config import CanaryConfig, ReplicasConfig

    s = settings(replicas=ReplicasConfig(min=0, max=6), canary=CanaryConfig(share_percent=5))
    config = endpoint_config(s, model_name=MODEL, version=3, candidate_version=4)
    assert config.as_dict() == {
        "name": "late_arrival",
        "served_entities": [
            {"name": "serve-v3", "entity_name": "main.flights.late_arrival", "entity_version": "3",
             "min_provisioned_concurrency": 0, "max_provisioned_concurrency": 8, "scale_to_zero_enabled": True},
            {"name": "candidate-v4", "entity_name": "main.flights.late_arrival", "entity_version": "4",
             "min_provisioned_concurrency": 0, "max_provisioned_concurrency": 8, "scale_to_zero_enabled": True}],
        "traffic_config": {"routes": [{"served_entity_name": "serve-v3", "traffic_percentage": 95},
                                      {"served_entity_name": "candidate-v4", "traffic_percentage": 5}]}}
    back = EndpointCoreConfigInput.from_dict(config.as_dict())  # the SDK reads back what it wrote
    assert (back.name, back.served_entities, back.traffic_config) == (config.name, config.served_entities,
                                                                      config.traffic_config)
    assert back.as_dict() == config.as_dict()


def test_a_warm_minimum_above_a_workload_sizes_floor_is_kept() -> None:
    from lakescore.config import ReplicasConfig

    # replicas {min: 10, max: 12}: a workload size (Medium 8-16) would let it fall to 8 replicas
    (entity,) = endpoint_config(settings(replicas=ReplicasConfig(min=10, max=12), max_warm_replicas=16),
                                model_name=MODEL, version=2).served_entities
    assert (entity.min_provisioned_concurrency, entity.max_provisioned_concurrency, entity.workload_size,
            entity.scale_to_zero_enabled) == (12, 12, None, False)


def test_pinned_only_takes_all_traffic_and_a_warm_minimum_never_scales_to_zero() -> None:
    config = endpoint_config(settings(), model_name=MODEL, version=1)  # replicas default {min: 1, max: 1}
    assert config.served_entities == [ServedEntityInput(name="serve-v1", entity_name=MODEL, entity_version="1",
                                                        min_provisioned_concurrency=4, max_provisioned_concurrency=4,
                                                        scale_to_zero_enabled=False)]
    assert [(r.served_entity_name, r.traffic_percentage) for r in config.traffic_config.routes] == [("serve-v1", 100)]
    with pytest.raises(ConfigError, match="--candidate-version 1 is the pinned version of endpoint late_arrival"):
        endpoint_config(settings(), model_name=MODEL, version=1, candidate_version=1)


def test_the_inference_table_becomes_the_ai_gateway_capture() -> None:
    gateway = ai_gateway_config(settings(inference_table="cat.sch.late_arrival_inference"))
    assert gateway.as_dict() == {"inference_table_config": {
        "catalog_name": "cat", "schema_name": "sch", "table_name_prefix": "late_arrival_inference", "enabled": True}}


LOOKUPS = [{"table_name": "main.flights.weather", "lookup_key": ["origin", "time_hour"]},
           {"table_name": "main.flights.planes", "lookup_key": ["tailnum"]},
           {"table_name": "main.flights.weather", "lookup_key": ["dest", "time_hour"]}]


def test_a_model_with_feature_lookups_is_refused_naming_its_tables() -> None:
    assert refuse_lookups([], model_uri=f"models:/{MODEL}/1") == []
    with pytest.raises(ModelServingLookupsError) as caught:
        refuse_lookups(LOOKUPS, model_uri=f"models:/{MODEL}/1")
    err = caught.value
    assert err.code == "model_serving_lookups" and err.fields["tables"] == ["main.flights.weather",
                                                                            "main.flights.planes"]
    assert str(err).startswith(f"model models:/{MODEL}/1 joins feature lookups from main.flights.weather, "
                               "main.flights.planes; Databricks Model Serving looks features up only for a Feature "
                               "Engineering model from an online store, and at the latest value, not the "
                               "point-in-time one")
    assert "Serve it with `lakescore serve`" in str(err) and "--allow-latest-features" in str(err)


def test_allow_latest_features_exports_with_a_warning() -> None:
    (warning,) = refuse_lookups(LOOKUPS, model_uri=f"models:/{MODEL}/1", allow_latest=True)
    assert "main.flights.weather, main.flights.planes" in warning
    assert warning.endswith("the exported endpoint answers with the latest feature values (or none)")


@pytest.mark.parametrize("allow", [False, True])
def test_the_export_refuses_or_warns_on_the_versions_lookups(module_home, tmp_path: Path, monkeypatch, capsys,
                                                             allow: bool) -> None:
    import dataclasses

    import lakescore.workflows.serve as serve_workflow

    real = serve_workflow.plan_endpoint  # the real plan, as if version 1 had been trained with lookups
    monkeypatch.setattr(serve_workflow, "plan_endpoint",
                        lambda *a, **kw: dataclasses.replace(real(*a, **kw), lookups=tuple(LOOKUPS)))
    home, config = module_home
    out = tmp_path / "x.json"
    code = main(["serve", "--config-dir", str(config), "--home", str(home), "--export-model-serving", str(out),
                 *(["--allow-latest-features"] if allow else [])])
    captured = capsys.readouterr()
    if allow:
        assert code == 0 and out.exists()
        assert "lakescore serve: warning: model models:/main.flights.late_arrival/1 joins feature lookups" in captured.err
        assert json.loads(captured.out)["warnings"][0].startswith("model models:/main.flights.late_arrival/1")
    else:
        assert code == 2 and not out.exists()
        assert "model_serving_lookups: model models:/main.flights.late_arrival/1 joins feature lookups from " \
               "main.flights.weather, main.flights.planes" in captured.err


def test_the_cli_exports_a_file_the_sdk_parses(module_home, tmp_path: Path, capsys) -> None:
    home, config = module_home
    out = tmp_path / "exports" / "late_arrival.json"
    code = main(["serve", "--config-dir", str(config), "--home", str(home), "--export-model-serving", str(out),
                 "--candidate-version", "2"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["written"] == str(out) and summary["model"] == f"models:/{MODEL}/1"
    body = json.loads(out.read_text())
    assert body["name"] == "late_arrival"
    parsed = read_request(out)
    assert [(e.name, e.entity_version, e.min_provisioned_concurrency, e.max_provisioned_concurrency,
             e.scale_to_zero_enabled) for e in parsed.served_entities] == [
        ("serve-v1", "1", 4, 4, False), ("candidate-v2", "2", 4, 4, False)]
    assert body["ai_gateway"] == {"inference_table_config": {  # serving.yml: ${catalog}.${schema}.late_arrival_inference
        "catalog_name": "main", "schema_name": "flights", "table_name_prefix": "late_arrival_inference",
        "enabled": True}}
    assert [(r.served_entity_name, r.traffic_percentage) for r in parsed.traffic_config.routes] == [
        ("serve-v1", 95), ("candidate-v2", 5)]


def test_a_candidate_that_is_not_registered_is_an_error(module_home, tmp_path: Path, capsys) -> None:
    home, config = module_home
    code = main(["serve", "--config-dir", str(config), "--home", str(home), "--export-model-serving",
                 str(tmp_path / "x.json"), "--candidate-version", "99"])
    assert code == 2
    assert "--candidate-version 99: model_not_found: registered model main.flights.late_arrival has no version 99" \
        in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


@pytest.fixture
def no_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith(("DATABRICKS_", "ARM_", "AZURE_", "GOOGLE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.databrickscfg


class Workspace(BaseHTTPRequestHandler):
    """A workspace host that knows nothing (404) and refuses every create: the endpoint name is taken
    (409 ``RESOURCE_ALREADY_EXISTS``, as the serving-endpoints API answers)."""

    def do_GET(self) -> None:
        self.send_error(404)

    def do_POST(self) -> None:
        body = json.dumps({"error_code": "RESOURCE_ALREADY_EXISTS",
                           "message": "Endpoint with name 'late_arrival' already exists."}).encode()
        self.send_response(409)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def workspace_host(no_workspace, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 as the workspace host (:class:`Workspace`), with a token."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Workspace)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("DATABRICKS_HOST", host)
    monkeypatch.setenv("DATABRICKS_TOKEN", "dapi-test")
    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()


def test_create_sends_the_config_with_the_sdk(module_home, workspace_host, monkeypatch, capsys) -> None:
    calls: list[tuple[str, EndpointCoreConfigInput]] = []

    gateways: list[Any] = []

    def create(self: ServingEndpointsAPI, name: str, *, config: EndpointCoreConfigInput, ai_gateway: Any = None,
               **_: Any) -> Wait:
        calls.append((name, config))
        gateways.append(ai_gateway)
        return Wait(lambda **kw: None, response=ServingEndpointDetailed(name=name, id="ep-123"), name=name)

    monkeypatch.setattr(ServingEndpointsAPI, "create", create)
    home, config = module_home
    code = main(["serve", "--config-dir", str(config), "--home", str(home), "--create", "--candidate-version", "2"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["created"] == {"name": "late_arrival", "id": "ep-123"} and summary["written"] is None
    (name, sent), = calls
    assert name == "late_arrival"
    assert sent == endpoint_config(load_project(config).serving, model_name=MODEL, version=1, candidate_version=2)
    assert gateways == [ai_gateway_config(load_project(config).serving)]
    assert gateways[0].inference_table_config.table_name_prefix == "late_arrival_inference"
    assert [(r.served_entity_name, r.traffic_percentage) for r in sent.traffic_config.routes] == [
        ("serve-v1", 95), ("candidate-v2", 5)]


def test_create_without_a_workspace_says_what_to_set(module_home, no_workspace, capsys) -> None:
    home, config = module_home
    code = main(["serve", "--config-dir", str(config), "--home", str(home), "--create"])
    err = capsys.readouterr().err
    assert code == 2
    assert "runtime_unsupported: lakescore serve --create: no Databricks workspace is configured" in err
    assert "Set DATABRICKS_HOST and DATABRICKS_TOKEN" in err


def test_a_refused_create_names_the_endpoint_and_a_fix(module_home, workspace_host, capsys) -> None:
    home, config = module_home
    code = main(["serve", "--config-dir", str(config), "--home", str(home), "--create"])
    err = capsys.readouterr().err
    assert code == 2
    assert ("model_serving_refused: lakescore serve --create: the workspace refused to create Model Serving "
            "endpoint 'late_arrival': RESOURCE_ALREADY_EXISTS: Endpoint with name 'late_arrival' already exists.") in err
    assert "databricks serving-endpoints update-config late_arrival --json @out.json" in err
