"""Benchmark of the warm endpoint against `mlflow models serve` on the same registered demo model.

Prints, for one-row requests at concurrency 1 and 8: p50/p99 latency, requests/s and requests/s per
replica of ``lakescore serve`` (replicas min 1, max 2: the scaler adds the second replica during a c=8
warm-up, before the c=8 level is measured) and of ``mlflow models serve --env-manager local`` (the
peer, one worker); and the memory of one replica, the fork server and the endpoint process. The cold
path and memory over 100,000 requests are measured by ``bench_serving_memory.py``. Everything binds
127.0.0.1; every load level is bounded in requests and seconds; every process started here is
stopped at the end.

    .venv/bin/python scripts/bench_serving.py                 # trains the demo model in a temp home
    .venv/bin/python scripts/bench_serving.py --home .lakescore   # reuse a home that has the demo model
    .venv/bin/python scripts/bench_serving.py --requests 50 --seconds 20 --kill-requests 200   # a smoke run

With ``--lookups`` it measures instead the demo model as config/training.yml has it (two feature
lookups: weather point in time by origin and time_hour, planes by tailnum) against the same recipe
without them, both on ``lakescore serve`` (the peer cannot join feature tables), one replica each:
p50/p99 at c=1 and c=8 and the ratio lookups / without, the two endpoints loaded in alternating
rounds so that a change in the machine's load falls on both; and whether 50 answers with lookups
equal the batch route's (the single-node join, then the chain) for the same incoming flights.

    .venv/bin/python scripts/bench_serving.py --lookups       # trains both models in temp homes
    .venv/bin/python scripts/bench_serving.py --lookups --home H1 --lookup-home H2   # reuse them

Not a test: figures vary with the machine and what else runs on it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from serving_bench import (
    MODEL,
    bench_config,
    champion,
    percentiles,
    request_bodies,
    run_load,
    start_endpoint,
    stop,
    wait_until,
)

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ready_replicas(status_url: str, auth: dict[str, str]) -> int:
    replicas = httpx.get(status_url, headers=auth).json()["replicas"]
    return sum(c["state"] == "ready" and c["role"] == "serve" for c in replicas)


def warm_to(replicas: int, url: str, status_url: str, auth: dict[str, str], bodies: list[bytes]) -> int:
    """Send c=8 load until ``replicas`` replicas are ready (the scaler adds them), at most 90 s; the
    number of ready replicas then."""
    deadline = time.monotonic() + 90
    while ready_replicas(status_url, auth) < replicas and time.monotonic() < deadline:
        run_load(url, auth, bodies, concurrency=8, requests=400, max_s=5)
    return ready_replicas(status_url, auth)


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


def kill_under_load(served: Any, bodies: list[bytes], *, requests: int = 1000) -> dict[str, Any]:
    """``requests`` one-row requests at c=8 while one of two ready replicas is killed (SIGKILL) once a
    fifth of them are answered: how many failed (anything but 200)."""
    import signal
    import threading

    victim = next(c for c in served.status()["replicas"] if c["state"] == "ready")
    result: dict[str, Any] = {}

    def load() -> None:
        result.update(run_load(served.url, served.auth, bodies, concurrency=8, requests=requests, max_s=300))

    loader = threading.Thread(target=load)
    loader.start()
    time.sleep(requests / 5 / 300)  # about a fifth of the requests at ~300 req/s
    os.kill(victim["pid"], signal.SIGKILL)
    loader.join()
    return {"requests": result["requests"], "failed": result["errors"], "replica": victim["replica_id"]}


def bench_ours(mode: str, *, home: Path, config: Path, env: dict[str, str], scratch: Path, version: int,
               requests: int, seconds: float, kill_requests: int = 1000) -> dict[str, Any]:
    """Start ``lakescore serve`` with ``replica_start: mode``, load it, measure it, stop it."""
    serving = yaml.safe_load((config / "serving.yml").read_text())
    serving["replica_start"] = mode
    (config / "serving.yml").write_text(yaml.safe_dump(serving))
    out: dict[str, Any] = {}
    served = start_endpoint(home, config, env, scratch / f"serve-{mode}.log")
    url, status_url, auth = served.url, served.status_url, served.auth
    try:
        out["ready_s"] = round(served.ready_s, 1)
        out["bodies"] = request_bodies(home, version, 500)
        run_load(url, auth, out["bodies"][:20], concurrency=1, requests=20, max_s=30)  # warm-up
        out["c1"] = {**run_load(url, auth, out["bodies"], concurrency=1, requests=requests, max_s=seconds),
                     "replicas": ready_replicas(status_url, auth)}
        replicas = warm_to(2, url, status_url, auth, out["bodies"])
        out["c8"] = {**run_load(url, auth, out["bodies"], concurrency=8, requests=requests, max_s=seconds),
                     "replicas": replicas}
        if mode == "preloaded_fork":
            out["killed"] = kill_under_load(served, out["bodies"], requests=kill_requests)
        replica_pid = [c for c in httpx.get(status_url, headers=auth).json()["replicas"] if c["state"] == "ready"][0]["pid"]
        out["replica_memory"] = memory(replica_pid)
        servers = [p for p in psutil.Process(served.proc.pid).children() if "forkserver" in " ".join(p.cmdline())]
        out["fork_server_memory"] = memory(servers[0].pid) if servers else None
        out["endpoint_memory"] = memory(served.proc.pid)
        out["answers"] = [httpx.post(url, content=b, headers={**auth, "Content-Type": "application/json"}).json()
                          ["predictions"][0] for b in out["bodies"][:50]]
    finally:
        stop(served.proc)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None, help="runtime home with (or to get) the demo model; default: temp")
    parser.add_argument("--requests", type=int, default=400, help="requests per load level (default 400)")
    parser.add_argument("--seconds", type=float, default=60.0, help="time cap per load level (default 60)")
    parser.add_argument("--kill-requests", type=int, default=1000,
                        help="requests sent while one replica is killed (default 1000)")
    parser.add_argument("--lookups", action="store_true",
                        help="measure the demo model with its feature lookups against the same recipe without")
    parser.add_argument("--lookup-home", default=None,
                        help="--lookups: runtime home with (or to get) the lookup model; default: temp")
    parser.add_argument("--rounds", type=int, default=4,
                        help="--lookups: alternating rounds per load level, each requests/rounds (default 4)")
    args = parser.parse_args(argv)
    if args.lookups:
        return bench_lookups(args)

    scratch = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    home = Path(args.home).resolve() if args.home else scratch / ".lakescore"
    config = bench_config(REPO, scratch, {"endpoint_name": "bench", "port": 0, "replicas": {"min": 1, "max": 2},
                                          "keep_warm": True, "max_queue": 256, "record_flush_interval_s": 30,
                                          "scale_interval_s": 5})
    started = time.perf_counter()
    version = champion(home, config)
    setup_s = time.perf_counter() - started
    tracking = f"sqlite:///{home / 'mlflow.db'}"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "MLFLOW_TRACKING_URI": tracking, "MLFLOW_REGISTRY_URI": tracking, "PYTHONUNBUFFERED": "1"}
    figures: dict[str, Any] = {"model": f"models:/{MODEL}/{version}", "setup_s": round(setup_s, 1)}
    for mode in ("preloaded_fork", "new_process"):
        figures[mode] = bench_ours(mode, home=home, config=config, env=env, scratch=scratch, version=version,
                                   requests=args.requests, seconds=args.seconds, kill_requests=args.kill_requests)
    bodies = figures["preloaded_fork"]["bodies"]

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
                                                   requests=args.requests, max_s=args.seconds), "replicas": 1}
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


def bench_lookups(args: argparse.Namespace) -> int:
    """``--lookups``: the demo model with and without its feature lookups, each on its own
    ``lakescore serve`` (one replica, preloaded_fork), loaded in alternating rounds; prints the table."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-serving-lookups-"))
    serving = {"endpoint_name": "bench", "port": 0, "replicas": {"min": 1, "max": 1}, "keep_warm": True,
               "max_queue": 256, "record_flush_interval_s": 30, "scale_interval_s": 60,
               "replica_start": "preloaded_fork"}
    sides: dict[str, dict[str, Any]] = {}
    for name, lookups, given in (("without lookups", False, args.home), ("with lookups", True, args.lookup_home)):
        home = Path(given).resolve() if given else scratch / (".lakescore-lookups" if lookups else ".lakescore")
        config = bench_config(REPO, scratch, serving, lookups=lookups)
        started = time.perf_counter()
        version = champion(home, config, lookups=lookups)
        tracking = f"sqlite:///{home / 'mlflow.db'}"
        env = {**os.environ, "MLFLOW_TRACKING_URI": tracking, "MLFLOW_REGISTRY_URI": tracking, "PYTHONUNBUFFERED": "1"}
        sides[name] = {"home": home, "config": config, "version": version, "env": env,
                       "setup_s": round(time.perf_counter() - started, 1), "bodies": request_bodies(home, version, 500)}
    served: dict[str, Any] = {}
    try:
        for i, (name, side) in enumerate(sides.items()):
            served[name] = start_endpoint(side["home"], side["config"], side["env"], scratch / f"serve-{i}.log")
            side["ready_s"] = round(served[name].ready_s, 1)
        for name, ep in served.items():  # warm-up
            run_load(ep.url, ep.auth, sides[name]["bodies"][:50], concurrency=1, requests=50, max_s=60)
        per_round = max(1, args.requests // args.rounds)
        for c in (1, 8):
            kept: dict[str, list[float]] = {name: [] for name in sides}
            errors = dict.fromkeys(sides, 0)
            for _ in range(args.rounds):
                for name, ep in served.items():
                    got = run_load(ep.url, ep.auth, sides[name]["bodies"], concurrency=c, requests=per_round,
                                   max_s=args.seconds / args.rounds, keep=kept[name])
                    errors[name] += int(got["errors"])
            for name in sides:
                sides[name][f"c{c}"] = {**percentiles(kept[name]), "requests": len(kept[name]), "errors": errors[name]}
        lookup = sides["with lookups"]
        ep = served["with lookups"]
        lookup["answers"] = [httpx.post(ep.url, content=b, headers={**ep.auth, "Content-Type": "application/json"})
                             .json()["predictions"][0] for b in lookup["bodies"][:50]]
        lookup["replica_memory"] = memory(next(c for c in ep.status()["replicas"] if c["state"] == "ready")["pid"])
    finally:
        for ep in served.values():
            stop(ep.proc)
    same, total = same_as_batch(lookup["home"], lookup["version"], lookup["answers"])
    report_lookups(sides, f"{same} of {total}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


def same_as_batch(home: Path, version: int, answers: list[dict[str, Any]]) -> tuple[int, int]:
    """How many of ``answers`` (the endpoint's, for the first incoming flights in table order) carry
    the prediction and probabilities the batch route gives the same flights: the feature tables read
    at their current versions, :func:`lakescore.lookup.join_all`, then the version's pyfunc ``predict``
    (values within 1e-9); and how many answers there are."""
    import math

    import mlflow

    from lakescore.lookup import join_all
    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(home)
    runtime.mlflow()
    model = mlflow.pyfunc.load_model(f"models:/{MODEL}/{version}").unwrap_python_model()
    specs = model.chain.lookups
    rows = runtime.read_table("main.flights.flights_incoming").head(len(answers))
    tables = {s.table_name: runtime.read_table(s.table_name) for s in specs}
    scored = model.predict(None, join_all(rows, tables, specs)).to_dict("records")

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) or isinstance(b, float):
            a, b = (math.nan if v is None else float(v) for v in (a, b))
            return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9
        return bool(a == b)

    return sum(all(same(ans.get(k), v) for k, v in row.items()) for ans, row in zip(answers, scored)), len(answers)


def report_lookups(sides: dict[str, dict[str, Any]], same: str) -> None:
    print(f"\nthe demo model with and without its feature lookups, lakescore serve (preloaded_fork, one replica "
          f"each), one-row requests on loopback, alternating rounds; {os.cpu_count()} cores")
    print(f"{'':32}{'p50 ms':>9}{'p99 ms':>9}{'n':>6}{'errors':>8}")
    for c in (1, 8):
        for name, side in sides.items():
            x, label = side[f"c{c}"], f"{name} (v{side['version']}), c={c}"
            print(f"{label:32}{x['p50_ms']:9.1f}{x['p99_ms']:9.1f}{x['requests']:6d}{x['errors']:8d}")
        with_, without = sides["with lookups"][f"c{c}"], sides["without lookups"][f"c{c}"]
        print(f"{f'ratio with / without, c={c}':32}{with_['p50_ms'] / without['p50_ms']:9.2f}"
              f"{with_['p99_ms'] / without['p99_ms']:9.2f}")
    print("setup (tables, training when missing): " + ", ".join(f"{n} {s['setup_s']} s" for n, s in sides.items()))
    print("ready after launch: " + ", ".join(f"{n} {s['ready_s']} s" for n, s in sides.items()))
    m = sides["with lookups"]["replica_memory"]
    print(f"memory of the lookup model's replica: proportional {m['pss_mb']:.0f} MB, unique {m['uss_mb']:.0f} MB")
    print(f"answers with lookups equal to the batch route's (join_all, then predict): {same} rows")


def report(f: dict[str, Any]) -> None:
    print(f"\nmodel {f['model']} (setup {f['setup_s']} s); one-row requests on loopback; {os.cpu_count()} cores")
    print(f"{'':40}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}{'replicas':>8}{'req/s/replica':>12}{'n':>6}{'errors':>8}")
    rows = [("lakescore serve, preloaded_fork", f["preloaded_fork"]), ("lakescore serve, new_process", f["new_process"]),
            ("mlflow models serve", f["peer"])]
    for name, r in rows:
        for c in (1, 8):
            x = r[f"c{c}"]
            print(f"{name + f', c={c}':40}{x['p50_ms']:9.1f}{x['p99_ms']:9.1f}{x['rps']:9.1f}{x['replicas']:8d}"
                  f"{x['rps'] / max(x['replicas'], 1):12.1f}{x['requests']:6d}{x['errors']:8d}")
    print("ready after launch (first replica answering): " + ", ".join(f"{n} {r['ready_s']} s" for n, r in rows))
    print("cold path and memory over 100,000 requests: scripts/bench_serving_memory.py")
    for mode in ("preloaded_fork", "new_process"):
        m = f[mode]["replica_memory"]
        print(f"memory per replica, {mode}: proportional {m['pss_mb']:.0f} MB, unique {m['uss_mb']:.0f} MB, "
              f"RSS {m['rss_mb']:.0f} MB (RSS counts shared pages)")
    fs = f["preloaded_fork"]["fork_server_memory"]
    if fs:
        print(f"fork server (imports shared by all replicas of the endpoint): RSS {fs['rss_mb']:.0f} MB, "
              f"proportional {fs['pss_mb']:.0f} MB")
    e = f["preloaded_fork"]["endpoint_memory"]
    print(f"endpoint process (pool, scaler, recorder): RSS {e['rss_mb']:.0f} MB")
    p = f["peer"]["memory"]
    print(f"mlflow models serve: RSS {p['rss_mb']:.0f} MB over {p['processes']:.0f} processes "
          f"(proportional {p['pss_mb']:.0f} MB)")
    print(f"same labels as the peer: {f['same_as_peer']} rows")
    k = f["preloaded_fork"]["killed"]
    print(f"a replica killed under load (c=8, two replicas): {k['failed']} of {k['requests']} requests failed")


if __name__ == "__main__":
    sys.exit(main())
