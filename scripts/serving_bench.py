"""What the serving benchmarks share (``bench_serving.py``, ``bench_serving_memory.py``): the demo
model in a runtime home, one-row request bodies, a bounded load from keep-alive client threads, and
starting and stopping ``lakescore serve``. Not a test: imported by the scripts beside it.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

MODEL = "main.flights.late_arrival"
READY_TIMEOUT_S = 300.0


def bench_config(repo: Path, scratch: Path, serving: dict[str, Any], *, lookups: bool = False) -> Path:
    """``scratch/config``: the repo's config with ``serving`` merged into serving.yml and the demo
    recipe without its feature lookups (:func:`lakescore.demo_data.without_feature_lookups`): the
    peer, ``mlflow models serve``, cannot join feature tables, so both serve the same plain chain.
    With ``lookups``: ``scratch/config-lookups``, the demo recipe as it is (weather and planes joined)."""
    import shutil

    import yaml

    from lakescore.demo_data import without_feature_lookups

    config = scratch / ("config-lookups" if lookups else "config")
    shutil.copytree(repo / "config", config)
    recipe = (lambda d: d) if lookups else without_feature_lookups
    for name, edit in (("serving.yml", lambda d: {**d, **serving}), ("training.yml", recipe)):
        path = config / name
        path.write_text(yaml.safe_dump(edit(yaml.safe_load(path.read_text())), sort_keys=False))
    return config


def champion(home: Path, config: Path, *, lookups: bool = False) -> int:
    """The demo tables and the champion version of the demo model in ``home`` (trained from
    ``config`` when missing); it joins feature lookups exactly when ``lookups`` says so (else exit)."""
    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.demo import load_data

    runtime = LocalRuntime(home)
    load_data(runtime)
    mlflow = runtime.mlflow()
    try:
        version = int(mlflow.MlflowClient().get_model_version_by_alias(MODEL, "champion").version)
    except mlflow.exceptions.MlflowException:
        from lakescore.workflows.train import train

        print(f"training the demo model{' with its feature lookups' if lookups else ''} (all 2013 flights of "
              "months 1-9) ...", flush=True)
        version = train(load_project(config), runtime).version
        mlflow.MlflowClient().set_registered_model_alias(MODEL, "champion", str(version))
        return version
    from lakescore.serving.plan import model_lookups

    joins = bool(model_lookups(f"models:/{MODEL}/{version}"))
    if joins and not lookups:
        raise SystemExit(f"the champion in {home} (v{version}) joins feature lookups, which `mlflow models serve` "
                         "cannot; give a --home without the demo model (it is trained without them) or none")
    if lookups and not joins:
        raise SystemExit(f"the champion in {home} (v{version}) joins no feature lookups; give a --lookup-home "
                         "without the demo model (it is trained with them) or none")
    return version


def request_bodies(home: Path, version: int, n: int) -> list[bytes]:
    """``n`` one-row ``dataframe_records`` bodies from the demo's incoming flights (null for NaN)."""
    from lakescore.runtime import LocalRuntime
    from lakescore.serving.plan import input_columns

    runtime = LocalRuntime(home)
    runtime.mlflow()
    columns = list(input_columns(f"models:/{MODEL}/{version}"))
    frame = runtime.read_table("main.flights.flights_incoming", columns=columns).head(n)
    bodies = []
    for record in frame.to_dict("records"):
        row = {k: _json_value(v) for k, v in record.items()}
        bodies.append(json.dumps({"dataframe_records": [row]}).encode())
    return bodies


def _json_value(value: object) -> object:
    """A frame value as JSON: NaN -> null, a timestamp -> ISO 8601 text (a lookup's point-in-time key),
    a numpy scalar -> its Python value."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value.item() if hasattr(value, "item") else value


def run_load(url: str, headers: dict[str, str], bodies: list[bytes], *, concurrency: int, requests: int,
             max_s: float, keep: list[float] | None = None) -> dict[str, float]:
    """``requests`` POSTs from ``concurrency`` threads (each its own keep-alive client), stopped after
    ``max_s`` seconds: requests done, errors (non-200), p50/p99 latency (ms) and requests/s. ``keep``:
    a list that each request's latency (seconds) is appended to as well."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    counter = iter(range(requests))
    deadline = time.monotonic() + max_s

    def worker() -> None:
        with httpx.Client(headers={**headers, "Content-Type": "application/json"}, timeout=60) as client:
            for i in counter:
                if time.monotonic() > deadline:
                    return
                t0 = time.perf_counter()
                resp = client.post(url, content=bodies[i % len(bodies)])
                took = time.perf_counter() - t0
                with lock:
                    latencies.append(took)
                    errors[0] += resp.status_code != 200

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if keep is not None:
        keep.extend(latencies)
    return {"requests": len(latencies), "errors": errors[0], **percentiles(latencies), "rps": len(latencies) / wall}


def percentiles(latencies: list[float]) -> dict[str, float]:
    """``p50_ms`` and ``p99_ms`` (nearest rank) of latencies in seconds; NaN for none."""
    ordered = sorted(latencies) or [float("nan")]
    return {"p50_ms": 1000 * statistics.median(ordered),
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]}


def wait_until(check: Any, what: str, proc: subprocess.Popen[bytes]) -> float:
    """Poll ``check()`` every 0.2 s until true (seconds waited); exit when ``proc`` dies or after
    READY_TIMEOUT_S."""
    started = time.perf_counter()
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{what}: the process exited with code {proc.returncode}")
        try:
            if check():
                return time.perf_counter() - started
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        if time.perf_counter() - started > READY_TIMEOUT_S:
            raise SystemExit(f"{what}: not ready after {READY_TIMEOUT_S:g} s")
        time.sleep(0.2)


@dataclass(frozen=True)
class Served:
    """A running ``lakescore serve`` process, its URLs and the authorisation header."""

    proc: subprocess.Popen[bytes]
    url: str
    status_url: str
    auth: dict[str, str]
    ready_s: float

    def status(self) -> dict[str, Any]:
        return httpx.get(self.status_url, headers=self.auth, timeout=30).json()


def start_endpoint(home: Path, config: Path, env: dict[str, str], log: Path, *, name: str = "bench") -> Served:
    """Start ``lakescore serve`` and wait until its first replica is ready (``ready_s``: from launch)."""
    where = home / "serving" / "endpoints" / f"{name}.json"
    where.unlink(missing_ok=True)  # never read an earlier run's address
    launched = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "lakescore.cli", "serve", "--config-dir", str(config),
                             "--home", str(home)], env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: where.exists() and json.loads(where.read_text())["pid"] == proc.pid, "lakescore serve", proc)
        info = json.loads(where.read_text())
        auth = {"Authorization": f"Bearer {Path(info['token_file']).read_text().strip()}"}
        status_url = info["address"] + "/status"
        wait_until(lambda: any(c["state"] == "ready" for c in httpx.get(status_url, headers=auth).json()["replicas"]),
                   "the first replica", proc)
    except BaseException:
        stop(proc)
        raise
    return Served(proc, info["address"] + "/invocations", status_url, auth, time.perf_counter() - launched)


def stop(proc: subprocess.Popen[bytes] | None, *, group: bool = False) -> None:
    """SIGTERM ``proc`` (its process group with ``group``) and wait; SIGKILL after 30 s."""
    if proc is None or proc.poll() is not None:
        return
    if group:
        os.killpg(proc.pid, signal.SIGTERM)  # the peer's server runs as a child of the mlflow CLI
    else:
        proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
        proc.wait(timeout=10)
