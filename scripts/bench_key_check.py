"""The one pass's key check of the source read, alone and beside a busy driver thread (not a test).

    python scripts/bench_key_check.py [--rows 336776] [--repeats 8] [--home DIR]

The one pass checks the source's keys (``publish.spark_delta.key_check``) on a thread of its own
while the driver copies the model and sets up the UDF, Python work that holds the interpreter's
lock most of the time. A thread waits for that lock at every round trip to the JVM, so the check
builds its query on the calling thread and the thread only runs it. This script times, on
``local[2]`` after the SparkSession started, over a Delta table of ``--rows`` unique integer keys
(``spark.range``) with a timestamp period column:

- ``alone``: building and running the check on this thread;
- ``beside_busy``: the check built here and run on a thread (``runtime.ahead.Ahead``, as the one pass
  does) while this thread runs pure Python until it is done; the seconds until its result;
- ``built_there_beside_busy``: the same, but the query built on the thread too.

Prints the medians of the repeats after the first, and one JSON line (``BENCH_KEY_CHECK {...}``).
Latest figures: docs/figures.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def busy_until(done: threading.Event) -> None:
    """Pure Python work on this thread (the interpreter's lock held, as the driver's set-up holds it)
    until ``done`` is set."""
    while not done.is_set():
        sum(i * i for i in range(2000))


def beside_busy(spark: Any, work: Callable[[], Any]) -> float:
    """Seconds until ``work`` (run on an :class:`~lakescore.runtime.ahead.Ahead` thread) is done while
    this thread runs :func:`busy_until`."""
    from lakescore.runtime.ahead import Ahead

    started = time.perf_counter()
    done = threading.Event()
    ahead = Ahead(spark, lambda: (work(), done.set()))
    busy_until(done)
    ahead.result()
    return time.perf_counter() - started


def summary(seconds: dict[str, list[float]]) -> dict[str, Any]:
    """Medians of each case's repeats after the first (the first one warms the JVM), in seconds,
    and the ratio of each case to ``alone``."""
    medians = {case: statistics.median(values[1:] or values) for case, values in seconds.items()}
    return {"median_s": medians, "vs_alone": {case: m / medians["alone"] for case, m in medians.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=336_776, help="unique keys in the table (default 336,776)")
    parser.add_argument("--repeats", type=int, default=8, help="timed repeats of each case (default 8)")
    parser.add_argument("--home", help="folder for the session and the table (default: a new temporary one)")
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    from lakescore.publish.spark_delta import key_check
    from lakescore.runtime import LocalRuntime
    from lakescore.scoring.splits import spread_reads

    home = Path(args.home or tempfile.mkdtemp(prefix="lakescore-bench-key-check-"))
    spark = LocalRuntime(home / ".lakescore").spark()
    spread_reads(spark)  # the one pass's reads: one split per core
    table = str(home / f"keys_{args.rows}")
    if not (Path(table) / "_delta_log").is_dir():
        (spark.range(args.rows).withColumnRenamed("id", "flight_id")
         .withColumn("time_hour", F.timestamp_seconds(F.col("flight_id") * 60)).write.format("delta").save(table))

    def build() -> Callable[[], Any]:
        """The key check of the table read anew, its query built on the calling thread."""
        return key_check(spark.read.format("delta").load(table), ["flight_id"], period_column="time_hour")

    def check(built: Callable[[], Any]) -> Any:
        found = built()
        if found.repeated is not None or found.totals["rows"] != args.rows:
            raise SystemExit(f"bench_key_check: the check found {found.totals} of {args.rows} unique keys")
        return found

    cases: dict[str, Callable[[], float]] = {
        "alone": lambda: _timed(lambda: check(build())),
        "beside_busy": lambda: _built_here(spark, build, check),
        "built_there_beside_busy": lambda: beside_busy(spark, lambda: check(build())),
    }
    seconds: dict[str, list[float]] = {case: [] for case in cases}
    for _ in range(args.repeats + 1):
        for case, run in cases.items():
            seconds[case].append(run())
    found = summary(seconds)
    print(f"key check of {args.rows:,} unique keys (local[2], {spark.version}), medians of {args.repeats} repeats:")
    for case, median in found["median_s"].items():
        print(f"  {case:24s} {median:6.3f} s  {found['vs_alone'][case]:5.2f}x alone")
    print("BENCH_KEY_CHECK " + json.dumps({"rows": args.rows, **found}, sort_keys=True))


def _timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _built_here(spark: Any, build: Callable[[], Callable[[], Any]], check: Callable[[Callable[[], Any]], Any]) -> float:
    """:func:`beside_busy` of a check whose query is built on this thread first (counted in)."""
    started = time.perf_counter()
    built = build()
    return time.perf_counter() - started + beside_busy(spark, lambda: check(built))


if __name__ == "__main__":
    main()
