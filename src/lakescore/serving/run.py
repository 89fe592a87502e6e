"""``lakescore serve``: resolve the version, start the endpoint on 127.0.0.1, run until stopped.

The endpoint's address, process id and token file are written to
``<home>/serving/endpoints/<name>.json`` while it runs, so clients on this machine can find it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any, Iterator

from lakescore.config import ProjectConfig
from lakescore.errors import ConfigError

CEILING_SENTENCE = "This is an upper bound of compute, not a spending limit: nothing stops the endpoint when it is reached."


def monthly_ceiling(cost_per_hour: float, max_replicas: int) -> float:
    """The most an endpoint's copies can cost in a month: 24 h x 31 days x ``max_replicas`` x H.

    >>> monthly_ceiling(0.5, 3)
    1116.0
    """
    return 24 * 31 * max_replicas * cost_per_hour


def ceiling_text(cost_per_hour: float, max_replicas: int) -> str:
    """The sentence ``lakescore serve --cost-per-hour H`` prints."""
    total = monthly_ceiling(cost_per_hour, max_replicas)
    return (f"monthly ceiling: 24 h x 31 days x {max_replicas} replicas (replicas.max) x {cost_per_hour:g} per hour "
            f"= {total:,.2f}. {CEILING_SENTENCE}")


def endpoint_file(home: str | Path, name: str) -> Path:
    """Where a running endpoint writes its address: ``<home>/serving/endpoints/<name>.json``."""
    return Path(home) / "serving" / "endpoints" / f"{name}.json"


def read_endpoint(home: str | Path, name: str) -> dict[str, Any] | None:
    """The running endpoint's ``{"address", "pid", "version", "token_file"}``, or None."""
    path = endpoint_file(home, name)
    return json.loads(path.read_text()) if path.exists() else None


def _graceful_server(config: Any) -> Any:
    """A uvicorn server that stops gracefully on SIGINT/SIGTERM and then returns, instead of
    re-raising the signal (uvicorn's default), so ``serve_project`` can clean up and report."""
    import uvicorn  # the endpoint's server

    class GracefulServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return GracefulServer(config)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP proto: asyncio then sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ConfigError([f"config/serving.yml: port {port} on {host} cannot be used ({err.strerror}); "
                           "stop what holds it, choose another port, or set port: 0 for any free one"]) from err
    sock.listen(1024)
    return sock


def serve_project(project: ProjectConfig, runtime: Any, *, cost_per_hour: float | None = None,
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
    import uvicorn  # the endpoint's server

    from lakescore.serving.backend import LocalProcessBackend
    from lakescore.serving.endpoint import Endpoint
    from lakescore.serving.plan import plan_endpoint
    from lakescore.serving.server import create_endpoint_app
    from lakescore.serving.state import ServingState, ensure_token, serving_dir

    if cost_per_hour is not None and cost_per_hour < 0:
        raise ConfigError([f"--cost-per-hour must be zero or more; got {cost_per_hour:g}"])
    plan = plan_endpoint(project, runtime)
    summary = plan.summary()
    if cost_per_hour is not None:
        summary["monthly_ceiling"] = monthly_ceiling(cost_per_hour, plan.settings.replicas.max)
        summary["ceiling"] = ceiling_text(cost_per_hour, plan.settings.replicas.max)
        print(summary["ceiling"], flush=True)
    if dry_run:
        return summary
    token = ensure_token(runtime.home)
    state = ServingState(runtime.home)
    backend = LocalProcessBackend(model_name=plan.model_name, tracking_uri=plan.tracking_uri, token=token,
                                  log_dir=serving_dir(runtime.home) / "logs",
                                  max_body_bytes=plan.settings.max_body_bytes,
                                  max_rows=plan.settings.max_rows_per_request, start=plan.settings.copy_start)
    table = plan.settings.inference_table
    endpoint = Endpoint(plan, backend=backend, state=state, token=token, runtime=runtime,
                        write=lambda frame: runtime.write_table(table, frame, mode="append"))
    sock = _bind(plan.settings.host, plan.settings.port)
    address = f"http://{plan.settings.host}:{sock.getsockname()[1]}"
    app = create_endpoint_app(endpoint, token=token, state=state, address=address)
    where = endpoint_file(runtime.home, plan.name)
    where.parent.mkdir(parents=True, exist_ok=True)
    partial = where.with_suffix(".tmp")
    partial.write_text(json.dumps({"address": address, "pid": os.getpid(), "version": plan.version,
                                   "token_file": str(serving_dir(runtime.home) / "token")}))
    partial.replace(where)  # readers never see a half-written file
    print(json.dumps({"endpoint": plan.name, "address": address, "model": plan.model_uri}), flush=True)
    server = _graceful_server(uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False,
                                             timeout_graceful_shutdown=10))
    try:
        server.run(sockets=[sock])
    finally:
        where.unlink(missing_ok=True)
        backend.stop_all()
        summary["final"] = {k: v for k, v in endpoint.status().items()
                            if k in ("counts", "recorder", "stale_reason", "last_scale_decision")}
        state.close()
    return summary
