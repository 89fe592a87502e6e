"""``lakescore serve``: resolve the version, start the endpoint on 127.0.0.1, run until stopped.

The endpoint's address, process id and token file are written to
``<home>/serving/endpoints/<name>.json`` while it runs, so clients on this machine can find it.
Answered rows are appended to the inference table through the runtime; the drift reference is
built once, in the background, from the training table.

The endpoint process holds no model, so it keeps no model-registry or table library either: the
plan (MLflow registry reads), the drift reference (the training rows) and each append to the
inference table (delta-rs) run in children forked from the endpoint's preloaded fork server
(:mod:`lakescore.serving.forkserver`), which has those libraries imported; whatever they load
leaves with them. ``--dry-run`` plans in place and starts no fork server.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from lakescore.config import ProjectConfig
from lakescore.errors import ConfigError
from lakescore.serving import forkserver
from lakescore.serving.plan import EndpointPlan, plan_endpoint
from lakescore.serving.run import bind, ceiling_text, endpoint_file, graceful_server, monthly_ceiling
from lakescore.serving.state import ServingState, ensure_token, serving_dir

if TYPE_CHECKING:
    import pandas as pd

    from lakescore.runtime import Runtime
    from lakescore.serving.drift import DriftReference

WRITE_TIMEOUT_S = 600.0


def serve(project: ProjectConfig, runtime: Runtime, *, cost_per_hour: float | None = None,
          dry_run: bool = False) -> dict[str, Any]:
    """Run the project's endpoint until SIGINT/SIGTERM (``lakescore serve``).

    Parameters
    ----------
    cost_per_hour : float, optional
        Compute price of one copy per hour; prints the monthly ceiling
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
    """
    if cost_per_hour is not None and cost_per_hour < 0:
        raise ConfigError([f"--cost-per-hour must be zero or more; got {cost_per_hour:g}"])
    if dry_run:
        plan = _plan(project, runtime)
    else:  # in a child of the fork server: the endpoint process never imports MLflow
        plan = forkserver.call(_plan, project, runtime, what="planning the endpoint")
        forkserver.child_env.update(MLFLOW_TRACKING_URI=plan.tracking_uri, MLFLOW_REGISTRY_URI=plan.tracking_uri)
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

    from lakescore.serving.backend import LocalProcessBackend
    from lakescore.serving.endpoint import Endpoint
    from lakescore.serving.server import create_endpoint_app

    token = ensure_token(runtime.home)
    state = ServingState(runtime.home)
    backend = LocalProcessBackend(model_name=plan.model_name, tracking_uri=plan.tracking_uri, token=token,
                                  log_dir=serving_dir(runtime.home) / "logs",
                                  max_body_bytes=plan.settings.max_body_bytes,
                                  max_rows=plan.settings.max_rows_per_request, start=plan.settings.copy_start)
    table = plan.settings.inference_table
    endpoint = Endpoint(plan, backend=backend, state=state, token=token,
                        write=lambda frame: forkserver.call(append_rows, runtime, table, frame, timeout_s=WRITE_TIMEOUT_S,
                                                            what=f"an append to {table}"),
                        reference=lambda: forkserver.call(read_reference, runtime, plan, what="the drift reference"))
    sock = bind(plan.settings.host, plan.settings.port)
    address = f"http://{plan.settings.host}:{sock.getsockname()[1]}"
    app = create_endpoint_app(endpoint, token=token, state=state, address=address)
    where = endpoint_file(runtime.home, plan.name)
    where.parent.mkdir(parents=True, exist_ok=True)
    partial = where.with_suffix(".tmp")
    partial.write_text(json.dumps({"address": address, "pid": os.getpid(), "version": plan.version,
                                   "token_file": str(serving_dir(runtime.home) / "token")}))
    partial.replace(where)  # readers never see a half-written file
    print(json.dumps({"endpoint": plan.name, "address": address, "model": plan.model_uri}), flush=True)
    server = graceful_server(uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False,
                                            timeout_graceful_shutdown=10))
    try:
        server.run(sockets=[sock])
    finally:
        where.unlink(missing_ok=True)
        backend.stop_all()
        final = {k: v for k, v in endpoint.status().items()
                 if k in ("counts", "recorder", "stale_reason", "last_scale_decision")}
        state.close()
    return final


def _plan(project: ProjectConfig, runtime: Runtime) -> EndpointPlan:
    runtime.mlflow()
    return plan_endpoint(project, home=runtime.home)


def append_rows(runtime: Runtime, table: str, frame: pd.DataFrame) -> None:
    """Append prediction records to the inference table (run in a child of the fork server)."""
    runtime.write_table(table, frame, mode="append")


def read_reference(runtime: Runtime, plan: EndpointPlan) -> DriftReference:
    """The drift reference of the training rows: the input columns (and those the training
    filter names) that the training table has, after the filter."""
    from lakescore.serving.drift import reference_columns, training_reference  # pandas work, in a child

    table = plan.training_table
    available = set(runtime.table_columns(table))
    wanted = [n for n in reference_columns(list(plan.input_columns), plan.training_filter) if n in available]
    return training_reference(runtime.read_table(table, columns=wanted), row_filter=plan.training_filter,
                              columns=list(plan.input_columns))
