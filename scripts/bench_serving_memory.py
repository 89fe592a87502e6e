"""Benchmark of a warm endpoint's memory and of its cold path, on the registered demo model.

Starts ``lakescore serve`` (one replica forked from the preloaded fork server), sends one-row requests
from a few client threads, and prints the resident (RSS) and proportional (PSS) memory of each of
the endpoint's processes after 1,000 and after ``--requests`` answered requests, read from
``/proc/<pid>/smaps_rollup`` by :func:`lakescore.serving.replicas.memory.footprint` (what ``GET /status``
reports). It then times the endpoint's cold path (a request for another version: a child of the
fork server loads it and scores; 3 runs, median) and the client's fallback (a fresh process).

RSS counts pages shared between processes in each of them; the sum of PSS is what the processes
cost the machine together, and the footprint target (<= 400 MB with one warm replica) is judged on it.

    .venv/bin/python scripts/bench_serving_memory.py --home /path/to/home --requests 100000
    .venv/bin/python scripts/bench_serving_memory.py --requests 1200 --max-seconds 60   # a smoke run

``--home`` is copied to a temporary folder first (never changed); without it the demo model is
trained in a temporary home (a few minutes). Everything binds 127.0.0.1; every load is bounded in
requests and seconds; every process started here is stopped at the end. Not a test: figures vary
with the machine and what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from serving_bench import MODEL, bench_config, champion, request_bodies, run_load, start_endpoint, stop, wait_until

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = 1_000


def prepare(home: Path, config: Path) -> tuple[int, int]:
    """The champion version of the demo model in ``home`` (trained when missing) and a second
    version registered from the same artifacts, which the endpoint answers on its cold path."""
    from lakescore.runtime import LocalRuntime

    version = champion(home, config)
    client = LocalRuntime(home).mlflow().MlflowClient()
    pinned = client.get_model_version(MODEL, str(version))
    other = client.create_model_version(MODEL, source=pinned.source, run_id=pinned.run_id)
    return version, int(other.version)


def measure(status_url: str, headers: dict[str, str], endpoint_pid: int) -> dict[str, Any]:
    """The endpoint's own figures (``/status`` memory) plus the multiprocessing resource tracker."""
    from lakescore.serving.replicas.memory import process_memory

    memory = httpx.get(status_url, headers=headers, timeout=30).json()["memory"]
    trackers = [p.pid for p in psutil.Process(endpoint_pid).children()
                if "resource_tracker" in " ".join(p.cmdline())]
    tracker = process_memory(trackers[0]) if trackers else None
    memory["resource_tracker"] = tracker.summary() if tracker else None
    return memory


def bench(home: Path, config: Path, env: dict[str, str], scratch: Path, *, version: int, other: int,
          requests: int, threads: int, max_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    served = start_endpoint(home, config, env, scratch / "serve.log")
    proc, url, status_url, auth = served.proc, served.url, served.status_url, served.auth
    try:
        wait_until(lambda: served.status()["drift_reference"], "the drift reference", proc)
        bodies = request_bodies(home, version, 500)
        first = run_load(url, auth, bodies, concurrency=threads, requests=min(CHECKPOINT, requests), max_s=max_s)
        time.sleep(2)  # let the recorder's flush child finish
        out["at_first"] = (first, measure(status_url, auth, proc.pid))
        rest = run_load(url, auth, bodies, concurrency=threads, requests=max(requests - CHECKPOINT, 0), max_s=max_s)
        time.sleep(2)
        out["at_last"] = ({"requests": first["requests"] + rest["requests"], "errors": first["errors"] + rest["errors"],
                           "rps": rest["rps"]}, measure(status_url, auth, proc.pid))
        cold = []
        for body in bodies[:3]:
            asked = json.dumps({**json.loads(body), "model_version": other}).encode()
            t0 = time.perf_counter()
            resp = httpx.post(url, content=asked, headers={**auth, "Content-Type": "application/json"}, timeout=300)
            cold.append(time.perf_counter() - t0)
            if resp.status_code != 200 or resp.json()["served"] != "cold":
                raise SystemExit(f"the cold path did not answer: {resp.status_code} {resp.text[:300]}")
        out["cold_s"] = cold
        out["bodies"] = bodies[:3]
    finally:
        stop(proc)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None, help="runtime home with the demo model (copied first); default: train")
    parser.add_argument("--requests", type=int, default=100_000, help="one-row requests in all (default 100000; the first "
                        "checkpoint is after 1,000, or after all of them when fewer)")
    parser.add_argument("--threads", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="time cap per load phase (default 1800)")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="bench-serving-memory-"))
    try:
        home = scratch / ".lakescore"
        if args.home:
            shutil.copytree(Path(args.home), home, ignore=shutil.ignore_patterns("serving"))
        config = bench_config(REPO, scratch, {"endpoint_name": "bench", "port": 0, "replicas": {"min": 1, "max": 1},
                                              "keep_warm": True, "max_queue": 256, "record_flush_interval_s": 30,
                                              "replica_start": "preloaded_fork"})
        version, other = prepare(home, config)
        tracking = f"sqlite:///{home / 'mlflow.db'}"
        env = {**os.environ, "MLFLOW_TRACKING_URI": tracking, "MLFLOW_REGISTRY_URI": tracking,
               "PYTHONUNBUFFERED": "1"}
        figures = bench(home, config, env, scratch, version=version, other=other, requests=args.requests,
                        threads=args.threads, max_s=args.max_seconds)
        from lakescore.serving.replicas.cold import score_cold_sync

        fresh = []
        for body in figures["bodies"]:
            split = json.loads(body)["dataframe_records"][0]
            t0 = time.perf_counter()
            score_cold_sync(model_uri=f"models:/{MODEL}/{other}", version=other, tracking_uri=tracking,
                            body=json.dumps({"dataframe_split": {"columns": list(split), "data": [list(split.values())]}}
                                            ).encode(), timeout_s=300)
            fresh.append(time.perf_counter() - t0)
        figures["fresh_s"] = fresh
        report(figures, version)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def report(f: dict[str, Any], version: int) -> None:
    (load1, m1), (load2, m2) = f["at_first"], f["at_last"]
    n1, n2 = load1["requests"], load2["requests"]
    print(f"\nmodels:/{MODEL}/{version}, one replica (preloaded_fork); one-row requests on loopback; "
          f"{os.cpu_count()} cores")
    print(f"load: {n2:,} requests, {load2['errors']} errors, {load2['rps']:.0f} req/s")
    print(f"{'process':28}{f'RSS @{n1:,}':>12}{f'PSS @{n1:,}':>12}{f'RSS @{n2:,}':>14}{f'PSS @{n2:,}':>14}   MB")

    def row(name: str, a: dict[str, Any] | None, b: dict[str, Any] | None) -> None:
        cells = [x[k] if x else float("nan") for x in (a, b) for k in ("rss_mb", "pss_mb")]
        print(f"{name:28}{cells[0]:12.1f}{cells[1]:12.1f}{cells[2]:14.1f}{cells[3]:14.1f}")

    row("endpoint process", m1["endpoint"], m2["endpoint"])
    row("fork server", m1["fork_server"], m2["fork_server"])
    for i, (a, b) in enumerate(zip(m1["replicas"], m2["replicas"])):
        row(f"replica {i + 1}", a, b)
    row("resource tracker", m1["resource_tracker"], m2["resource_tracker"])
    tracker = [(m["resource_tracker"] or {}).get(k, 0.0) for m in (m1, m2) for k in ("rss_mb", "pss_mb")]
    print(f"{'sum (3 processes)':28}{m1['total_rss_mb']:12.1f}{m1['total_pss_mb']:12.1f}"
          f"{m2['total_rss_mb']:14.1f}{m2['total_pss_mb']:14.1f}")
    print(f"{'sum (with the tracker)':28}{m1['total_rss_mb'] + tracker[0]:12.1f}{m1['total_pss_mb'] + tracker[1]:12.1f}"
          f"{m2['total_rss_mb'] + tracker[2]:14.1f}{m2['total_pss_mb'] + tracker[3]:14.1f}")
    c1, c2 = m1["replicas"][0]["pss_mb"], m2["replicas"][0]["pss_mb"]
    print(f"replica PSS growth {n1:,} -> {n2:,} requests: {100 * (c2 - c1) / c1:+.1f}% (target <= 10%, PSS <= 120 MB)")
    print(f"footprint with one warm replica, sum of PSS: {m2['total_pss_mb']:.0f} MB (target <= 400 MB; the sum of RSS, "
          f"{m2['total_rss_mb']:.0f} MB, counts the shared imports once per process)")
    cold = ", ".join(f"{x:.2f}" for x in f["cold_s"])
    print(f"cold path through the endpoint (child of the fork server loads the version, scores one row): "
          f"{cold} s; median {statistics.median(f['cold_s']):.2f} s (target <= 3 s)")
    fresh = ", ".join(f"{x:.2f}" for x in f["fresh_s"])
    print(f"client fallback (fresh `python -m lakescore.serving.replicas.cold`): {fresh} s; "
          f"median {statistics.median(f['fresh_s']):.2f} s")


if __name__ == "__main__":
    sys.exit(main())
