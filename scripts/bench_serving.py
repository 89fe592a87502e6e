"""Benchmark of the warm endpoint against `mlflow models serve` on the same registered demo model.

Prints, for one-row requests at concurrency 1 and 8: p50/p99 latency, requests/s and requests/s per
copy of ``lakescore serve`` (replicas min 1, max 2: the scaler adds the second copy during a c=8
warm-up, before the c=8 level is measured) and of ``mlflow models serve --env-manager local`` (the
peer, one worker); the cold-path wall time; and resident memory per copy. Everything binds 127.0.0.1; every load level is
bounded in requests and seconds; every process started here is stopped at the end.

    .venv/bin/python scripts/bench_serving.py                 # trains the demo model in a temp home
    .venv/bin/python scripts/bench_serving.py --home .lakescore   # reuse a home that has the demo model

Not a test: figures vary with the machine and what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
MODEL = "main.flights.late_arrival"
READY_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare(home: Path, config: Path) -> tuple[int, float]:
    """Demo tables and a registered demo model in ``home``; returns (version, seconds spent)."""
    from lakescore.config import load_project
    from lakescore.workflows.demo import load_data
    from lakescore.runtime import LocalRuntime

    started = time.perf_counter()
    runtime = LocalRuntime(home)
    load_data(runtime)
    mlflow = runtime.mlflow()
    try:
        version = int(mlflow.MlflowClient().get_model_version_by_alias(MODEL, "champion").version)
    except mlflow.exceptions.MlflowException:
        from lakescore.workflows.train import train

        print("training the demo model (all 2013 flights of months 1-9) ...", flush=True)
        version = train(load_project(config), runtime).version
    return version, time.perf_counter() - started


def request_rows(home: Path, columns: list[str], n: int) -> list[dict[str, Any]]:
    from lakescore.runtime import LocalRuntime

    frame = LocalRuntime(home).read_table("main.flights.flights_incoming", columns=columns).head(n)
    rows = []
    for record in frame.to_dict("records"):
        rows.append({k: (None if isinstance(v, float) and math.isnan(v) else (v.item() if hasattr(v, "item") else v))
                     for k, v in record.items()})
    return rows


def run_load(url: str, headers: dict[str, str], bodies: list[bytes], *, concurrency: int, requests: int,
             max_s: float) -> dict[str, float]:
    """``requests`` one-row POSTs from ``concurrency`` threads (each its own keep-alive client)."""
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
    ordered = sorted(latencies)
    return {"requests": len(ordered), "errors": errors[0], "p50_ms": 1000 * statistics.median(ordered),
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)],
            "rps": len(ordered) / wall}


def ready_copies(status_url: str, auth: dict[str, str]) -> int:
    copies = httpx.get(status_url, headers=auth).json()["copies"]
    return sum(c["state"] == "ready" and c["role"] == "serve" for c in copies)


def warm_to(copies: int, url: str, status_url: str, auth: dict[str, str], bodies: list[bytes]) -> int:
    """Send c=8 load until ``copies`` copies are ready (the scaler adds them), at most 90 s; the
    number of ready copies then."""
    deadline = time.monotonic() + 90
    while ready_copies(status_url, auth) < copies and time.monotonic() < deadline:
        run_load(url, auth, bodies, concurrency=8, requests=400, max_s=5)
    return ready_copies(status_url, auth)


def wait_until(check: Any, what: str, proc: subprocess.Popen[bytes]) -> float:
    started = time.perf_counter()
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{what}: the process exited with code {proc.returncode}")
        try:
            if check():
                return time.perf_counter() - started
        except httpx.HTTPError:
            pass
        if time.perf_counter() - started > READY_TIMEOUT_S:
            raise SystemExit(f"{what}: not ready after {READY_TIMEOUT_S:g} s")
        time.sleep(0.2)


def memory(pid: int, *, tree: bool = False) -> dict[str, float]:
    """Resident (RSS), unique (USS) and proportional (PSS) memory in MB of a process (and children)."""
    procs = [psutil.Process(pid)]
    if tree:
        procs += procs[0].children(recursive=True)
    out = {"rss_mb": 0.0, "uss_mb": 0.0, "pss_mb": 0.0, "processes": float(len(procs))}
    for proc in procs:
        info = proc.memory_full_info()
        out["rss_mb"] += info.rss / 2**20
        out["uss_mb"] += info.uss / 2**20
        out["pss_mb"] += info.pss / 2**20
    return out


def stop(proc: subprocess.Popen[bytes] | None, *, group: bool = False) -> None:
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


def bench_ours(mode: str, *, home: Path, config: Path, env: dict[str, str], scratch: Path, version: int,
               requests: int, seconds: float) -> dict[str, Any]:
    """Start ``lakescore serve`` with ``copy_start: mode``, load it, measure it, stop it."""
    from lakescore.runtime import LocalRuntime
    from lakescore.serving.plan import input_columns

    serving = yaml.safe_load((config / "serving.yml").read_text())
    serving["copy_start"] = mode
    (config / "serving.yml").write_text(yaml.safe_dump(serving))
    out: dict[str, Any] = {}
    where = home / "serving" / "endpoints" / "bench.json"
    where.unlink(missing_ok=True)  # never read an earlier run's address
    launched = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "lakescore.cli", "serve", "--config-dir", str(config),
                             "--home", str(home)], env=env, stdout=open(scratch / f"serve-{mode}.log", "wb"),
                            stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: where.exists() and json.loads(where.read_text())["pid"] == proc.pid, "lakescore serve", proc)
        info = json.loads(where.read_text())
        auth = {"Authorization": f"Bearer {Path(info['token_file']).read_text().strip()}"}
        status_url = info["address"] + "/status"
        wait_until(lambda: any(c["state"] == "ready" for c in httpx.get(status_url, headers=auth).json()["copies"]),
                   "the first copy", proc)
        out["ready_s"] = round(time.perf_counter() - launched, 1)
        LocalRuntime(home).mlflow()
        rows = request_rows(home, list(input_columns(f"models:/{MODEL}/{version}")), 500)
        out["bodies"] = [json.dumps({"dataframe_records": [row]}).encode() for row in rows]
        url = info["address"] + "/invocations"
        run_load(url, auth, out["bodies"][:20], concurrency=1, requests=20, max_s=30)  # warm-up
        out["c1"] = {**run_load(url, auth, out["bodies"], concurrency=1, requests=requests, max_s=seconds),
                     "copies": ready_copies(status_url, auth)}
        copies = warm_to(2, url, status_url, auth, out["bodies"])
        out["c8"] = {**run_load(url, auth, out["bodies"], concurrency=8, requests=requests, max_s=seconds),
                     "copies": copies}
        copy_pid = [c for c in httpx.get(status_url, headers=auth).json()["copies"] if c["state"] == "ready"][0]["pid"]
        out["copy_memory"] = memory(copy_pid)
        servers = [p for p in psutil.Process(proc.pid).children() if "forkserver" in " ".join(p.cmdline())]
        out["fork_server_memory"] = memory(servers[0].pid) if servers else None
        out["endpoint_memory"] = memory(proc.pid)
        out["answers"] = [httpx.post(url, content=b, headers={**auth, "Content-Type": "application/json"}).json()
                          ["predictions"][0] for b in out["bodies"][:50]]
    finally:
        stop(proc)
    return out


def time_cold(version: int, tracking: str, bodies: list[bytes]) -> tuple[list[float], list[float]]:
    """Seconds of the endpoint's cold path (a child of an already running preloaded fork server loads
    the version and scores one row, as :func:`lakescore.serving.cold.score_cold` does for the endpoint)
    and of the client's fallback (a fresh ``python -m lakescore.serving.cold`` process), per body."""
    import asyncio

    from lakescore.serving import forkserver
    from lakescore.serving.cold import score_cold, score_cold_sync

    uri = f"models:/{MODEL}/{version}"
    forkserver.child_env.update(MLFLOW_TRACKING_URI=tracking, MLFLOW_REGISTRY_URI=tracking)
    forkserver.call(os.getpid)  # the endpoint's fork server is up before any cold request
    forked, fresh = [], []
    for body in bodies:
        t0 = time.perf_counter()
        asyncio.run(score_cold(model_uri=uri, version=version, tracking_uri=tracking, body=body, timeout_s=300))
        forked.append(round(time.perf_counter() - t0, 2))
        t0 = time.perf_counter()
        score_cold_sync(model_uri=uri, version=version, tracking_uri=tracking, body=body, timeout_s=300)
        fresh.append(round(time.perf_counter() - t0, 2))
    return forked, fresh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None, help="runtime home with (or to get) the demo model; default: temp")
    parser.add_argument("--requests", type=int, default=400, help="requests per load level (default 400)")
    parser.add_argument("--seconds", type=float, default=60.0, help="time cap per load level (default 60)")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    home = Path(args.home).resolve() if args.home else scratch / ".lakescore"
    config = scratch / "config"
    shutil.copytree(REPO / "config", config)
    serving = yaml.safe_load((config / "serving.yml").read_text())
    serving.update({"endpoint_name": "bench", "port": 0, "replicas": {"min": 1, "max": 2}, "keep_warm": True,
                    "max_queue": 256, "record_flush_interval_s": 30, "scale_interval_s": 5})
    (config / "serving.yml").write_text(yaml.safe_dump(serving))
    version, setup_s = prepare(home, config)
    tracking = f"sqlite:///{home / 'mlflow.db'}"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "MLFLOW_TRACKING_URI": tracking, "MLFLOW_REGISTRY_URI": tracking, "PYTHONUNBUFFERED": "1"}
    figures: dict[str, Any] = {"model": f"models:/{MODEL}/{version}", "setup_s": round(setup_s, 1)}
    for mode in ("preloaded_fork", "new_process"):
        figures[mode] = bench_ours(mode, home=home, config=config, env=env, scratch=scratch, version=version,
                                   requests=args.requests, seconds=args.seconds)
    bodies = figures["preloaded_fork"]["bodies"]

    figures["cold_path_s"], figures["fresh_process_s"] = time_cold(version, tracking, bodies[:3])

    peer = None
    try:  # the peer: mlflow models serve --env-manager local
        port = free_port()
        launched = time.perf_counter()
        peer = subprocess.Popen(["mlflow", "models", "serve", "-m", f"models:/{MODEL}/{version}", "--env-manager",
                                 "local", "-h", "127.0.0.1", "-p", str(port)], env=env, start_new_session=True,
                                stdout=open(scratch / "peer.log", "wb"), stderr=subprocess.STDOUT)
        peer_url = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(peer_url + "/ping").status_code == 200, "mlflow models serve", peer)
        figures["peer"] = {"ready_s": round(time.perf_counter() - launched, 1)}
        run_load(peer_url + "/invocations", {}, bodies[:20], concurrency=1, requests=20, max_s=30)
        for c in (1, 8):
            figures["peer"][f"c{c}"] = {**run_load(peer_url + "/invocations", {}, bodies, concurrency=c,
                                                   requests=args.requests, max_s=args.seconds), "copies": 1}
        figures["peer"]["memory"] = memory(peer.pid, tree=True)
        answers = [httpx.post(peer_url + "/invocations", content=b, headers={"Content-Type": "application/json"})
                   .json()["predictions"][0] for b in bodies[:50]]
        ours = figures["preloaded_fork"]["answers"]
        figures["same_as_peer"] = f"{sum(a['prediction'] == b.get('prediction') for a, b in zip(ours, answers))} of 50"
    finally:
        stop(peer, group=True)
    report(figures)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


def report(f: dict[str, Any]) -> None:
    print(f"\nmodel {f['model']} (setup {f['setup_s']} s); one-row requests on loopback; {os.cpu_count()} cores")
    print(f"{'':40}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}{'copies':>8}{'req/s/copy':>12}{'n':>6}{'errors':>8}")
    rows = [("lakescore serve, preloaded_fork", f["preloaded_fork"]), ("lakescore serve, new_process", f["new_process"]),
            ("mlflow models serve", f["peer"])]
    for name, r in rows:
        for c in (1, 8):
            x = r[f"c{c}"]
            print(f"{name + f', c={c}':40}{x['p50_ms']:9.1f}{x['p99_ms']:9.1f}{x['rps']:9.1f}{x['copies']:8d}"
                  f"{x['rps'] / max(x['copies'], 1):12.1f}{x['requests']:6d}{x['errors']:8d}")
    print("ready after launch (first copy answering): " + ", ".join(f"{n} {r['ready_s']} s" for n, r in rows))
    print(f"cold path (a child of the preloaded fork server loads the version and scores one row): "
          f"{', '.join(f'{x} s' for x in f['cold_path_s'])}; the client's fallback (a fresh process): "
          f"{', '.join(f'{x} s' for x in f['fresh_process_s'])}")
    for mode in ("preloaded_fork", "new_process"):
        m = f[mode]["copy_memory"]
        print(f"memory per copy, {mode}: proportional {m['pss_mb']:.0f} MB, unique {m['uss_mb']:.0f} MB, "
              f"RSS {m['rss_mb']:.0f} MB (RSS counts shared pages)")
    fs = f["preloaded_fork"]["fork_server_memory"]
    if fs:
        print(f"fork server (imports shared by all copies of the endpoint): RSS {fs['rss_mb']:.0f} MB, "
              f"proportional {fs['pss_mb']:.0f} MB")
    e = f["preloaded_fork"]["endpoint_memory"]
    print(f"endpoint process (pool, scaler, recorder): RSS {e['rss_mb']:.0f} MB")
    p = f["peer"]["memory"]
    print(f"mlflow models serve: RSS {p['rss_mb']:.0f} MB over {p['processes']:.0f} processes "
          f"(proportional {p['pss_mb']:.0f} MB)")
    print(f"same labels as the peer: {f['same_as_peer']} rows")


if __name__ == "__main__":
    sys.exit(main())
