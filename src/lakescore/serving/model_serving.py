"""config/serving.yml as a Databricks Model Serving endpoint config
(``lakescore serve --export-model-serving out.json [--candidate-version N] [--create]``).

Built with databricks-sdk's serving dataclasses (``EndpointCoreConfigInput``,
``ServedEntityInput``, ``TrafficConfig``, ``Route``), so the request is the SDK's own. The mapping:

- served entities: the pinned version (``serve-v<N>``) and, with a candidate, the candidate
  (``candidate-v<M>``), each the Unity Catalog model ``catalog.schema.model`` at that version;
- workload size from ``replicas.max``: each of our copies answers one request at a time, and a
  Model Serving workload size is a range of provisioned concurrency, one request at a time per
  unit: ``Small`` 4 (0-4 with scale to zero), ``Medium`` 8-16, ``Large`` 16-64 (databricks-sdk
  ``ServedEntityInput.workload_size``). The smallest size whose upper end holds ``replicas.max``;
- ``scale_to_zero_enabled`` when ``replicas.min`` is 0;
- traffic: the pinned version ``100 - canary.share_percent``, the candidate ``share_percent``
  (the pinned version 100 without a candidate).

Model Serving has no shadow agreement check and no automatic canary rollback: the routes split
traffic, and nothing compares the candidate's answers or failure rate with the pinned version's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lakescore.config import ServingConfig
from lakescore.errors import ConfigError, ModelServingError, RuntimeUnsupportedError

# (workload size, upper end of its provisioned concurrency), smallest first.
WORKLOAD_SIZES = (("Small", 4), ("Medium", 16), ("Large", 64))


def workload_size(max_replicas: int) -> str:
    """The smallest Model Serving workload size whose concurrency holds ``max_replicas`` copies.

    >>> [workload_size(n) for n in (1, 4, 5, 16, 17, 64)]
    ['Small', 'Small', 'Medium', 'Medium', 'Large', 'Large']

    Raises
    ------
    ConfigError
        ``max_replicas`` above 64 (Large's upper end).
    """
    for size, upper in WORKLOAD_SIZES:
        if max_replicas <= upper:
            return size
    raise ConfigError([f"config/serving.yml: replicas.max {max_replicas} is above Model Serving's Large workload "
                       f"size (16-64 concurrent requests); lower replicas.max to 64 or less"])


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
    from databricks.sdk.service.serving import (EndpointCoreConfigInput, Route, ServedEntityInput,  # workspace SDK
                                                TrafficConfig)

    if candidate_version == version:
        raise ConfigError([f"--candidate-version {candidate_version} is the pinned version of endpoint "
                           f"{settings.endpoint_name}; choose another version as the candidate"])
    size, to_zero = workload_size(settings.replicas.max), settings.replicas.min == 0
    entities = [ServedEntityInput(name=f"serve-v{version}", entity_name=model_name, entity_version=str(version),
                                  workload_size=size, scale_to_zero_enabled=to_zero)]
    routes = [Route(served_entity_name=f"serve-v{version}", traffic_percentage=100)]
    if candidate_version is not None:
        share = settings.canary.share_percent
        entities.append(ServedEntityInput(name=f"candidate-v{candidate_version}", entity_name=model_name,
                                          entity_version=str(candidate_version), workload_size=size,
                                          scale_to_zero_enabled=to_zero))
        routes = [Route(served_entity_name=f"serve-v{version}", traffic_percentage=100 - share),
                  Route(served_entity_name=f"candidate-v{candidate_version}", traffic_percentage=share)]
    return EndpointCoreConfigInput(name=settings.endpoint_name, served_entities=entities,
                                   traffic_config=TrafficConfig(routes=routes))


def create_request(config: Any) -> dict[str, Any]:
    """The body of ``POST /api/2.0/serving-endpoints`` (``databricks serving-endpoints create
    --json @file``): ``{"name": ..., "config": config.as_dict()}``."""
    return {"name": config.name, "config": config.as_dict()}


def write_request(path: str | Path, config: Any) -> Path:
    """Write :func:`create_request` of ``config`` as JSON to ``path``; return the path."""
    where = Path(path)
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(create_request(config), indent=2) + "\n")
    return where


def read_request(path: str | Path) -> Any:
    """The ``EndpointCoreConfigInput`` of a file :func:`write_request` wrote (parsed by the SDK)."""
    from databricks.sdk.service.serving import EndpointCoreConfigInput  # workspace SDK

    return EndpointCoreConfigInput.from_dict(json.loads(Path(path).read_text())["config"])


def create_endpoint(config: Any) -> dict[str, Any]:
    """Create the Model Serving endpoint on the configured workspace
    (``WorkspaceClient().serving_endpoints.create``); does not wait for it to be ready.

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
    from databricks.sdk.errors import DatabricksError, ResourceAlreadyExists  # workspace SDK

    try:
        waiter = client.serving_endpoints.create(config.name, config=config)
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
    return dict(waiter.response.as_dict())
