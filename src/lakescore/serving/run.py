"""Running an endpoint process: the monthly cost ceiling, the endpoint's address file, the listening
socket and a uvicorn server that stops gracefully.

While an endpoint runs (:func:`lakescore.workflows.serve.serve`), its address, client URL (the
driver-proxy URL on Databricks), process id and token file are in
``<home>/serving/endpoints/<name>.json``, so clients can find it.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lakescore.errors import ConfigError

CEILING_SENTENCE = "This is an upper bound of compute, not a spending limit: nothing stops the endpoint when it is reached."


def monthly_ceiling(cost_per_hour: float, max_replicas: int) -> float:
    """The most an endpoint's replicas can cost in a month: 24 h x 31 days x ``max_replicas`` x H.

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
    """The running endpoint's ``{"address", "url", "pid", "version", "token_file"}``, or None."""
    path = endpoint_file(home, name)
    return json.loads(path.read_text()) if path.exists() else None


def graceful_server(config: Any) -> Any:
    """A uvicorn server that stops gracefully on SIGINT/SIGTERM and then returns, instead of
    re-raising the signal (uvicorn's default), so the serve workflow can clean up and report."""
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


def bind(host: str, port: int) -> socket.socket:
    """The endpoint's listening TCP socket on ``host``:``port`` (backlog 1024).

    Parameters
    ----------
    host : str
        The address the placement chose (:func:`lakescore.runtime.serving_bind`): 127.0.0.1
        locally, the driver's address on Databricks.
    port : int
        0 for any free port.

    Raises
    ------
    ConfigError
        The address and port cannot be bound (in use, or not an address of this machine).
    """
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
