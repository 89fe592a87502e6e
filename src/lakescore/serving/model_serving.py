"""config/serving.yml as a Databricks Model Serving endpoint config
(``lakescore serve --export-model-serving out.json [--candidate-version N] [--create]``).

Built with databricks-sdk's serving dataclasses (``EndpointCoreConfigInput``,
``ServedEntityInput``, ``TrafficConfig``, ``Route``, ``AiGatewayConfig``), so the request is the
SDK's own. The mapping:

- served entities: the pinned version (``serve-v<N>``) and, with a candidate, the candidate
  (``candidate-v<M>``), each the Unity Catalog model ``catalog.schema.model`` at that version;
- scale from ``replicas``: each of our replicas answers one request at a time, and one unit of
  Model Serving provisioned concurrency is one request at a time (databricks-sdk
  ``ServedEntityInput.workload_size``), granted in steps of 4 (one Model Serving replica). So
  ``min_provisioned_concurrency`` is ``replicas.min`` and ``max_provisioned_concurrency``
  ``replicas.max``, each rounded up to a multiple of 4 (at most 64, the Large size's upper end);
  no ``workload_size``, which the SDK forbids beside the two;
- ``scale_to_zero_enabled`` when ``replicas.min`` is 0 (then ``min_provisioned_concurrency`` 0);
- traffic: the pinned version ``100 - canary.share_percent``, the candidate ``share_percent``
  (the pinned version 100 without a candidate);
- ``inference_table`` ``catalog.schema.table`` as ``ai_gateway.inference_table_config``
  (``catalog_name``, ``schema_name``, ``table_name_prefix`` = the table's name, ``enabled``):
  Model Serving writes its own ``<table>_payload`` table beside lakescore's, in its own format.

A model with feature lookups is refused (:func:`refuse_lookups`): Model Serving joins features
only for a Feature Engineering model, from an online store, at the latest value, not the
point-in-time one the model was trained on. Model Serving has no shadow agreement check and no
automatic canary rollback: the routes split traffic, and nothing compares the candidate's answers
or failure rate with the pinned version's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lakescore.config import ReplicasConfig, ServingConfig
from lakescore.errors import ConfigError, ModelServingError, ModelServingLookupsError, RuntimeUnsupportedError

CONCURRENCY_STEP = 4  # provisioned concurrency comes in Model Serving replicas of 4 concurrent requests
MAX_CONCURRENCY = 64  # the Large workload size's upper end


def provisioned_concurrency(replicas: ReplicasConfig) -> tuple[int, int]:
    """``(min_provisioned_concurrency, max_provisioned_concurrency)`` of ``replicas``: each bound
    rounded up to a multiple of 4, the upper one at least 4.

    >>> [provisioned_concurrency(ReplicasConfig(min=a, max=b)) for a, b in ((0, 1), (1, 1), (5, 6), (10, 64))]
    [(0, 4), (4, 4), (8, 8), (12, 64)]

    Raises
    ------
    ConfigError
        ``replicas.max`` above 64 (the Large workload size's upper end).
    """
    if replicas.max > MAX_CONCURRENCY:
        raise ConfigError([f"config/serving.yml: replicas.max {replicas.max} is above Model Serving's Large workload "
                           f"size (16-64 concurrent requests); lower replicas.max to 64 or less"])
    def up(n: int) -> int:
        return -(-n // CONCURRENCY_STEP) * CONCURRENCY_STEP

    return up(replicas.min), max(up(replicas.max), CONCURRENCY_STEP)


def endpoint_config(settings: ServingConfig, *, model_name: str, version: int,
                    candidate_version: int | None = None) -> Any:
    """The Model Serving endpoint config of an endpoint (see the module note for the mapping).

    Parameters
    ----------
    settings : ServingConfig
        config/serving.yml: ``endpoint_name``, ``replicas`` and ``canary.share_percent``.
    model_name : str
        The Unity Catalog model, ``catalog.schema.model``.
    version : int
        The pinned version.
    candidate_version : int, optional
        A candidate that takes ``canary.share_percent`` per cent of the traffic.

    Returns
    -------
    databricks.sdk.service.serving.EndpointCoreConfigInput

    Raises
    ------
    ConfigError
        The candidate is the pinned version, or ``replicas.max`` is above 64.
    """
    from databricks.sdk.service.serving import (  # workspace SDK
        EndpointCoreConfigInput,
        Route,
        ServedEntityInput,
        TrafficConfig,
    )

    if candidate_version == version:
        raise ConfigError([f"--candidate-version {candidate_version} is the pinned version of endpoint "
                           f"{settings.endpoint_name}; choose another version as the candidate"])
    low, high = provisioned_concurrency(settings.replicas)

    def entity(name: str, at: int) -> Any:
        return ServedEntityInput(name=name, entity_name=model_name, entity_version=str(at),
                                 min_provisioned_concurrency=low, max_provisioned_concurrency=high,
                                 scale_to_zero_enabled=settings.replicas.min == 0)

    entities = [entity(f"serve-v{version}", version)]
    routes = [Route(served_entity_name=f"serve-v{version}", traffic_percentage=100)]
    if candidate_version is not None:
        share = settings.canary.share_percent
        entities.append(entity(f"candidate-v{candidate_version}", candidate_version))
        routes = [Route(served_entity_name=f"serve-v{version}", traffic_percentage=100 - share),
                  Route(served_entity_name=f"candidate-v{candidate_version}", traffic_percentage=share)]
    return EndpointCoreConfigInput(name=settings.endpoint_name, served_entities=entities,
                                   traffic_config=TrafficConfig(routes=routes))


def ai_gateway_config(settings: ServingConfig) -> Any:
    """serving.yml's ``inference_table`` (``catalog.schema.table``) as the endpoint's AI Gateway
    inference-table capture: ``catalog_name``, ``schema_name``, ``table_name_prefix`` (the table's
    name; Model Serving writes ``<prefix>_payload``), ``enabled``.

    Returns
    -------
    databricks.sdk.service.serving.AiGatewayConfig
    """
    from databricks.sdk.service.serving import AiGatewayConfig, AiGatewayInferenceTableConfig  # workspace SDK

    catalog, schema, table = settings.inference_table.split(".")
    return AiGatewayConfig(inference_table_config=AiGatewayInferenceTableConfig(
        catalog_name=catalog, schema_name=schema, table_name_prefix=table, enabled=True))


def refuse_lookups(lookups: Sequence[dict[str, Any]], *, model_uri: str, allow_latest: bool = False) -> list[str]:
    """Refuse (or, with ``allow_latest``, warn about) a model with feature lookups.

    Model Serving looks features up only for a Feature Engineering model, from an online store, and
    an online store serves each key's latest value, not the point-in-time one the model was trained
    and is scored with; our lookups would not be joined at all.

    Parameters
    ----------
    lookups : sequence of dict
        The version's feature lookup specs (``table_name`` each); empty: nothing to refuse.
    model_uri : str
        The model, for the message.
    allow_latest : bool, default False
        ``--allow-latest-features``: return the warning instead of raising.

    Returns
    -------
    list of str
        The warnings (empty without lookups).

    Raises
    ------
    ModelServingLookupsError
        ``lookups`` not empty and ``allow_latest`` false, naming the feature tables.
    """
    if not lookups:
        return []
    tables = list(dict.fromkeys(x["table_name"] for x in lookups))
    why = (f"model {model_uri} joins feature lookups from {', '.join(tables)}; Databricks Model Serving looks "
           "features up only for a Feature Engineering model from an online store, and at the latest value, not "
           "the point-in-time one the model was trained with")
    if allow_latest:
        return [f"{why}: the exported endpoint answers with the latest feature values (or none)"]
    raise ModelServingLookupsError(
        f"{why}. Serve it with `lakescore serve` (which joins the feature tables itself), or pass "
        "--allow-latest-features to export it anyway.", tables=tables, model=model_uri)


def create_request(config: Any, ai_gateway: Any = None) -> dict[str, Any]:
    """The body of ``POST /api/2.0/serving-endpoints`` (``databricks serving-endpoints create
    --json @file``): ``{"name": ..., "config": config.as_dict(), "ai_gateway": ...}``."""
    body = {"name": config.name, "config": config.as_dict()}
    if ai_gateway is not None:
        body["ai_gateway"] = ai_gateway.as_dict()
    return body


def write_request(path: str | Path, config: Any, ai_gateway: Any = None) -> Path:
    """Write :func:`create_request` of ``config`` (and ``ai_gateway``) as JSON to ``path``; return the path."""
    where = Path(path)
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(create_request(config, ai_gateway), indent=2) + "\n")
    return where


def read_request(path: str | Path) -> Any:
    """The ``EndpointCoreConfigInput`` of a file :func:`write_request` wrote (parsed by the SDK)."""
    from databricks.sdk.service.serving import EndpointCoreConfigInput  # workspace SDK

    return EndpointCoreConfigInput.from_dict(json.loads(Path(path).read_text())["config"])


def create_endpoint(config: Any, ai_gateway: Any = None) -> dict[str, Any]:
    """Create the Model Serving endpoint on the configured workspace
    (``WorkspaceClient().serving_endpoints.create``); does not wait for it to be ready.

    Parameters
    ----------
    config : databricks.sdk.service.serving.EndpointCoreConfigInput
        :func:`endpoint_config`.
    ai_gateway : databricks.sdk.service.serving.AiGatewayConfig, optional
        :func:`ai_gateway_config` (the inference-table capture); None sends none.

    Returns
    -------
    dict
        The SDK's answer (``ServingEndpointDetailed.as_dict()``: name, id, state, ...).

    Raises
    ------
    RuntimeUnsupportedError
        No workspace is configured, naming what to set.
    ModelServingError
        The workspace refused the request (``databricks.sdk.errors.DatabricksError``: the name is
        taken, no permission, an unknown model version, ...), naming the endpoint and one fix.
    """
    from databricks.sdk import WorkspaceClient  # workspace SDK

    try:
        client = WorkspaceClient()
    except ValueError as err:  # "default auth: cannot configure default credentials ..."
        raise RuntimeUnsupportedError(
            f"lakescore serve --create: no Databricks workspace is configured ({str(err).splitlines()[0][:200]}). "
            "Set DATABRICKS_HOST and DATABRICKS_TOKEN (or DATABRICKS_CONFIG_PROFILE naming a profile in "
            "~/.databrickscfg), or run it on a cluster; or drop --create and create the endpoint from the "
            "exported file (databricks serving-endpoints create --json @out.json).") from err
    from databricks.sdk.errors import DatabricksError, ResourceAlreadyExists  # type: ignore[attr-defined]  # re-exported by the SDK; workspace SDK

    try:
        waiter = client.serving_endpoints.create(config.name, config=config, ai_gateway=ai_gateway)
    except DatabricksError as err:
        if isinstance(err, ResourceAlreadyExists):
            fix = (f"choose another endpoint_name in config/serving.yml, or change the existing endpoint with "
                   f"databricks serving-endpoints update-config {config.name} --json @out.json (the 'config' "
                   "part of the file --export-model-serving out.json writes)")
        else:
            fix = ("fix what the workspace names (permission to create serving endpoints, the model's name and "
                   "version in Unity Catalog), or drop --create and create it from the exported file "
                   "(databricks serving-endpoints create --json @out.json)")
        raise ModelServingError(
            f"lakescore serve --create: the workspace refused to create Model Serving endpoint {config.name!r}: "
            f"{err.error_code or type(err).__name__}: {str(err)[:300]}. To go on, {fix}.",
            endpoint=config.name, error_code=err.error_code or type(err).__name__) from err
    return dict(waiter.response.as_dict())  # type: ignore[attr-defined]  # the waiter's response is the endpoint's details
