"""``lakescore serve``: resolve the version, start the endpoint where the placement says
(:func:`lakescore.runtime.serving_bind`: 127.0.0.1 locally, the driver's address behind the
driver proxy on Databricks), run until stopped; or export the endpoint as a Databricks Model
Serving config (:func:`export_model_serving`).

The endpoint's address, client URL, process id and token file are written to
``<home>/serving/endpoints/<name>.json`` while it runs, so clients can find it; it is claimed under
the serving lock (:mod:`lakescore.serving.state.claim`), so a second ``lakescore serve`` of the same
endpoint on the same home is refused while the first runs. Answered rows are
appended to the inference table through the runtime; the drift reference is built once, in the
background, from the training table.

The endpoint process holds no model, so it keeps no model-registry or table library either: the
plan (MLflow registry reads), the drift reference (the training rows) and each append to the
inference table (delta-rs) run in children forked from the endpoint's preloaded fork server
(:mod:`lakescore.serving.forkserver`), which has those libraries imported; whatever they load
leaves with them. ``--dry-run`` plans in place and starts no fork server.

A model with feature lookups is served with requests that carry the row's own columns and keys;
its feature tables are read once at their current versions (:func:`read_serving_features`, in the
feature holder its replicas are forked from: :mod:`lakescore.serving.replicas.feature_holder`) and again on
``POST /deploy``.
"""

from __future__ import annotations

import functools
import json
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from lakescore.config import ProjectConfig
from lakescore.errors import ConfigError, LakescoreError, RuntimeUnsupportedError
from lakescore.runtime import Runtime, serving_bind
from lakescore.serving import forkserver
from lakescore.serving.plan import EndpointPlan, plan_endpoint
from lakescore.serving.run import bind, ceiling_text, graceful_server, monthly_ceiling
from lakescore.serving.state.claim import claim_endpoint, refuse_if_running, release_endpoint
from lakescore.serving.state.store import ServingState, ensure_token, serving_dir

if TYPE_CHECKING:
    from lakescore.runtime import Runtime
    from lakescore.serving.drift import DriftReference
    from lakescore.serving.state.recorder import RecordBatch
    from lakescore.workflows.lookups import FeatureTables

WRITE_TIMEOUT_S = 600.0


def serve(project: ProjectConfig, runtime: Runtime, *, cost_per_hour: float | None = None,
          dry_run: bool = False) -> dict[str, Any]:
    """Run the project's endpoint until SIGINT/SIGTERM (``lakescore serve``).

    Parameters
    ----------
    cost_per_hour : float, optional
        Compute price of one replica per hour; prints the monthly ceiling
        ``24 x 31 x replicas.max x cost_per_hour`` with the sentence that it is an upper bound of
        compute, not a spending limit.
    dry_run : bool, default False
        Resolve and print the plan only.

    Returns
    -------
    dict
        The plan, and after a run the final counters.

    Raises
    ------
    ConfigError
        Before anything starts: serving.yml problems, a missing model/version/alias or
        certificate, a port in use, or a negative cost.
    EndpointRunningError
        Before any replica starts: another live process serves the same endpoint from this home.
    RuntimeUnsupportedError
        On the databricks runtime, a session without the cluster's address facts
        (:func:`lakescore.runtime.serving_address.cluster_facts`).
    """
    if cost_per_hour is not None and cost_per_hour < 0:
        raise ConfigError([f"--cost-per-hour must be zero or more; got {cost_per_hour:g}"])
    if not dry_run and project.serving is not None:  # before planning; the claim decides under the lock
        refuse_if_running(runtime.home, project.serving.endpoint_name)
    if dry_run or not runtime.placement.endpoint_reads_in_children:
        plan = _plan(project, runtime)
        registry: AbstractContextManager[None] = nullcontext()
    else:  # in a child of the fork server: the endpoint process never imports MLflow
        plan = forkserver.call(_plan, project, runtime, what="planning the endpoint")
        # the endpoint's children read its registry while it runs (and only then)
        registry = forkserver.children_env(MLFLOW_TRACKING_URI=plan.tracking_uri, MLFLOW_REGISTRY_URI=plan.tracking_uri)
    with registry:
        summary = plan.summary()
        if cost_per_hour is not None:
            summary["monthly_ceiling"] = monthly_ceiling(cost_per_hour, plan.settings.replicas.max)
            summary["ceiling"] = ceiling_text(cost_per_hour, plan.settings.replicas.max)
            print(summary["ceiling"], flush=True)
        if dry_run:
            return summary
        summary["final"] = _run_endpoint(runtime, plan)
        return summary


def _run_endpoint(runtime: Runtime, plan: EndpointPlan) -> dict[str, Any]:
    """Start the endpoint, publish its address file, serve until stopped; the final counters."""
    import uvicorn  # the endpoint's server

    from lakescore.serving.endpoint import Endpoint
    from lakescore.serving.endpoint_app import create_endpoint_app
    from lakescore.serving.replicas.backend import LocalProcessBackend

    token = ensure_token(runtime.home)
    state = ServingState(runtime.home)
    backend = LocalProcessBackend(model_name=plan.model_name, tracking_uri=plan.tracking_uri,
                                  log_dir=serving_dir(runtime.home) / "logs", start=plan.settings.replica_start)
    table = plan.settings.inference_table
    if runtime.placement.endpoint_reads_in_children:
        endpoint = Endpoint(plan, backend=backend, state=state,
                            write=lambda batch: forkserver.call(append_rows, runtime, table, batch,
                                                                timeout_s=WRITE_TIMEOUT_S, what=f"an append to {table}"),
                            reference=lambda: forkserver.call(read_reference, runtime, plan, what="the drift reference"),
                            features=functools.partial(read_serving_features, runtime))
    elif plan.lookups:  # the feature holder reads in a child, which this placement's runtime cannot enter
        raise RuntimeUnsupportedError(
            f"model {plan.model_uri} joins feature lookups ({', '.join(x['table_name'] for x in plan.lookups)}); "
            "a warm endpoint reads its feature tables in a child process, which this placement does not do. "
            "Serve it with --runtime local, or export it as a Databricks Model Serving endpoint.")
    else:  # the job's Spark session lives in this process
        endpoint = Endpoint(plan, backend=backend, state=state, write=lambda batch: append_rows(runtime, table, batch),
                            reference=lambda: read_reference(runtime, plan))
    listen = serving_bind(runtime, host=plan.settings.host)
    sock = bind(listen.host, plan.settings.port)
    address, url = listen.address(sock.getsockname()[1]), listen.client_url(sock.getsockname()[1])
    app = create_endpoint_app(endpoint, token=token, state=state, address=address)
    try:
        claim_endpoint(runtime.home, plan.name, {"address": address, "url": url, "version": plan.version,
                                                  "token_file": str(serving_dir(runtime.home) / "token")})
    except BaseException:  # refused: nothing of ours was recorded, and nothing started
        sock.close()
        state.close()
        raise
    print(json.dumps({"endpoint": plan.name, "address": address, "url": url, "model": plan.model_uri}), flush=True)
    server = graceful_server(uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False,
                                            timeout_graceful_shutdown=10))
    try:
        server.run(sockets=[sock])
    finally:
        release_endpoint(runtime.home, plan.name)  # only while the file still names this process
        backend.stop_all()
        final = {k: v for k, v in endpoint.status().items()
                 if k in ("counts", "recorder", "stale_reason", "last_scale_decision")}
        state.close()
    return final


def export_model_serving(project: ProjectConfig, runtime: Runtime, *, path: str | None = None,
                         candidate_version: int | None = None, create: bool = False,
                         allow_latest_features: bool = False) -> dict[str, Any]:
    """The endpoint as a Databricks Model Serving config
    (``lakescore serve --export-model-serving PATH [--candidate-version N] [--create]``).

    Resolves the pinned version as :func:`serve` does (in the registry the runtime's MLflow
    points at), checks the candidate version exists there, builds the config
    (:func:`lakescore.serving.model_serving.endpoint_config`), writes it to ``path`` and, with
    ``create``, creates the endpoint on the configured workspace.

    Parameters
    ----------
    path : str, optional
        Where to write the ``POST /api/2.0/serving-endpoints`` body (JSON).
    candidate_version : int, optional
        A registered version that takes ``canary.share_percent`` per cent of the traffic.
    create : bool, default False
        Send it with ``WorkspaceClient().serving_endpoints.create``.
    allow_latest_features : bool, default False
        Export a model with feature lookups anyway, with a warning (printed to stderr and in
        ``warnings``): Model Serving would serve the latest feature values, not point-in-time ones.

    Returns
    -------
    dict
        ``endpoint``, ``model``, ``candidate``, ``config`` (the request body), ``written`` (the
        path or None), ``warnings`` and, with ``create``, ``created`` (the SDK's answer).

    Raises
    ------
    ConfigError
        serving.yml problems, a missing pinned or candidate version, a candidate equal to the
        pinned version, or nothing to do (neither ``path`` nor ``create``).
    RuntimeUnsupportedError
        ``create`` without a configured workspace.
    ModelServingLookupsError
        The pinned version joins feature lookups and ``allow_latest_features`` is false.
    """
    import sys

    from lakescore.packaging import resolve_version
    from lakescore.serving import model_serving

    if path is None and not create:
        raise ConfigError(["lakescore serve: --candidate-version and --allow-latest-features need "
                           "--export-model-serving PATH or --create"])
    runtime.mlflow()
    plan = plan_endpoint(project, home=runtime.home)
    warnings = model_serving.refuse_lookups(plan.lookups, model_uri=plan.model_uri,
                                            allow_latest=allow_latest_features)
    for warning in warnings:
        print(f"lakescore serve: warning: {warning}", file=sys.stderr)
    if candidate_version is not None:
        try:
            resolve_version(plan.model_name, selection="pinned_version", version=candidate_version)
        except LakescoreError as err:
            raise ConfigError([f"--candidate-version {candidate_version}: {err.code}: {err}"]) from err
    config = model_serving.endpoint_config(plan.settings, model_name=plan.model_name, version=plan.version,
                                           candidate_version=candidate_version)
    gateway = model_serving.ai_gateway_config(plan.settings)
    summary: dict[str, Any] = {"endpoint": plan.name, "model": plan.model_uri, "candidate": candidate_version,
                               "config": model_serving.create_request(config, gateway), "written": None,
                               "warnings": warnings}
    if path is not None:
        summary["written"] = str(model_serving.write_request(path, config, gateway))
    if create:
        summary["created"] = model_serving.create_endpoint(config, gateway)
    return summary


def deploy(project: ProjectConfig, runtime: Runtime, version: int) -> dict[str, Any]:
    """Redeploy the project's running endpoint to ``version`` (``lakescore serve --deploy N``).

    Calls ``POST /deploy`` on the endpoint running from ``runtime.home`` (its address file and
    token): replicas of ``version`` start, traffic switches once one is ready, the old replicas drain.

    Returns
    -------
    dict
        The endpoint's deploy report.

    Raises
    ------
    ConfigError
        When serving.yml is missing or ``version`` is not a positive whole number.
    EndpointUnavailableError
        When the endpoint is not running.
    RequestError, ServingError
        When the endpoint refuses or cannot start the version (it keeps serving the old one).
    """
    from lakescore.serving.http.client import EndpointClient

    if project.serving is None:
        raise ConfigError([f"{project.config_dir.name}/serving.yml: file not found; create it (see config/)"])
    if version < 1:
        raise ConfigError([f"--deploy must be a registered version number (1 or more); got {version}"])
    client = EndpointClient.from_home(runtime.home, project.serving.endpoint_name)
    try:
        return client.deploy(version)
    finally:
        client.close()


def _plan(project: ProjectConfig, runtime: Runtime) -> EndpointPlan:
    runtime.mlflow()
    return plan_endpoint(project, home=runtime.home)


def append_rows(runtime: Runtime, table: str, batch: RecordBatch) -> None:
    """Append a batch of prediction records (:class:`lakescore.serving.state.recorder.PredictionRecorder`'s,
    one dict per answered row) to the inference table once, as its app transaction (a retried or
    racing write of the same batch adds nothing), in a child of the fork server where the placement
    has one; a column the table lacks (``feature_tables``, added with feature lookups) is added to it."""
    from lakescore.serving.state.recorder import records_frame

    runtime.append_once(table, records_frame(batch.records), app_id=batch.app_id, version=batch.version,
                        schema_mode="merge")


def read_serving_features(runtime: Runtime, specs: list[dict[str, Any]],
                          versions: dict[str, int] | None = None) -> FeatureTables:
    """A served lookup model's feature tables (:data:`lakescore.serving.features.FeatureReader`).

    Parameters
    ----------
    runtime : Runtime
    specs : list of dict
        The version's lookup specs (``FeatureLookup.to_json``).
    versions : dict of str to int, optional
        Table -> Delta version to read (the cold path pins the warm replicas' versions); default current.

    Returns
    -------
    FeatureTables
        :func:`lakescore.workflows.lookups.read_feature_tables`.
    """
    from lakescore.lookup import FeatureLookup  # pandas: in the feature holder or a cold-path child
    from lakescore.workflows.lookups import read_feature_tables

    return read_feature_tables(runtime, [FeatureLookup.from_json(x) for x in specs], versions=versions)


def read_reference(runtime: Runtime, plan: EndpointPlan) -> DriftReference:
    """The drift reference of the training rows: the input columns (and those the training
    filter names) that the training table has, after the filter."""
    from lakescore.serving.drift import reference_columns, training_reference  # pandas work, in a child

    table = plan.training_table
    available = set(runtime.table_columns(table))
    wanted = [n for n in reference_columns(list(plan.input_columns), plan.training_filter) if n in available]
    return training_reference(runtime.read_table(table, columns=wanted), row_filter=plan.training_filter,
                              columns=list(plan.input_columns))
