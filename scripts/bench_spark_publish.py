"""Cost of guarded Spark publication: the Spark Delta writer (``publish.spark_delta.publish``) against
a plain ``df.write.format("delta").mode("append")`` of the same staged predictions.

    python scripts/bench_spark_publish.py [ROWS] [--repeats N] [--home DIR]

The predictions are synthetic (the demo's prediction columns, unique ``flight_id`` keys), staged
as Parquet like a Spark run's ``predictions/`` folder and read back lazily, as the workflow does.
Each repeat times, on ``local[2]`` after the SparkSession started:

- ``plain``: a plain Delta append to a new table;
- ``plain_stats``: the same to a new table created with the file statistics lakescore gives a
  prediction table it creates (``publish.layout.new_table_properties``: the key, ``run_id`` and
  ``model_version``; Delta's default is every column): what those statistics save a write;
- ``plain_next``: a second plain append (the second window's rows) to that table;
- ``plain_next_txn``: the same append again with Delta's idempotent-write options, ``txnAppId`` /
  ``txnVersion``, as every lakescore publication writes (what Delta Lake itself adds to an append for
  the exactly-once commit, before lakescore adds anything);
- ``guarded_first``: the writer's first publication to a new table (one commit creates it with the rows);
- ``guarded_next``: a second window appended to that table (key check against its rows);
- ``replay``: the same request again (a no-op).

Prints one JSON line of medians and the ratios: the guarded publication against the plain append
(target: <= 1.3x), the guarded next window against the idempotent plain append (what lakescore's
own checks add), and ``stats_vs_plain`` (``plain_stats`` over ``plain``). Latest figures:
docs/figures.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any


def staged_frame(spark: Any, folder: Path, rows: int, first_key: int) -> Any:
    """``rows`` synthetic predictions with keys ``first_key``.., written once as Parquet and read
    back lazily (what ``workflows.score.stage_run`` hands the writer)."""
    from pyspark.sql import functions as F

    frame = spark.range(first_key, first_key + rows).select(
        F.col("id").alias("flight_id"),
        (F.col("id") % 2).alias("prediction"),
        (F.rand(7)).alias("probability"),
        F.when(F.col("id") % 50 == 0, F.lit("excluded")).otherwise(F.lit("predicted")).alias("scoring_status"),
        F.when(F.col("id") % 50 == 0, F.lit("ineligible:cancelled")).alias("exclusion_reason"),
        F.lit("main.bench.model").alias("model_name"), F.lit(1).cast("long").alias("model_version"),
        F.lit("run").alias("run_id"))
    frame.write.mode("errorifexists").parquet(str(folder))
    return spark.read.parquet(str(folder))


def request_for(table: str, rows: int, first: int | None, last: int, run_id: str) -> Any:
    from lakescore.publish.plan import PublishRequest

    schema = (("flight_id", "long"), ("prediction", "long"), ("probability", "double"), ("scoring_status", "string"),
              ("exclusion_reason", "string"), ("model_name", "string"), ("model_version", "long"),
              ("run_id", "string"))
    return PublishRequest(f"lakescore/bench/dev/{table}", run_id, table, "main.bench.src", "sid", "incremental",
                          "append", first, last, None, None, "main.bench.model", 1, "sha", "cfg", schema, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rows", type=int, nargs="?", default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--home", default=None)
    args = parser.parse_args(argv)

    from bench_publish import timed  # scripts/ is on the path as a script runs from it

    from lakescore.publish import spark_delta
    from lakescore.publish.layout import new_table_properties
    from lakescore.runtime import LocalRuntime

    home = Path(args.home or tempfile.mkdtemp(prefix="bench-publish-"))
    runtime = LocalRuntime(home / ".lakescore")
    spark = runtime.spark()
    first = staged_frame(spark, home / "staged-1", args.rows, 0)
    second = staged_frame(spark, home / "staged-2", args.rows, args.rows)
    times: dict[str, list[float]] = {}

    def record(name: str, call: Callable[..., Any], *given: Any, **options: Any) -> Any:
        """``call(*given, **options)``, its wall seconds appended to ``times[name]`` (:func:`bench_publish.timed`)."""
        out, seconds = timed(partial(call, *given, **options))
        times.setdefault(name, []).append(seconds)
        return out

    for i in range(args.repeats):
        plain = str(home / f"plain_{i}")
        record("plain", first.write.format("delta").mode("append").save, plain)
        narrow = first.write.format("delta").mode("append").options(**new_table_properties(first.columns, keys=["flight_id"]))
        record("plain_stats", narrow.save, str(home / f"plain_stats_{i}"))
        record("plain_next", second.write.format("delta").mode("append").save, plain)
        idempotent = second.write.format("delta").mode("append").option("txnAppId", f"bench-{i}").option("txnVersion", 1)
        record("plain_next_txn", idempotent.save, plain)
        path = str(home / f"guarded_{i}")
        table = f"main.bench.guarded_{i}"
        one = request_for(table, args.rows, None, 1, f"run-a{i}")
        decision, _, _ = record("guarded_first", spark_delta.publish, path, first, one, keys=["flight_id"])
        two = request_for(table, args.rows, 2, 2, f"run-b{i}")
        appended, _, _ = record("guarded_next", spark_delta.publish, path, second, two, keys=["flight_id"])
        noop, _, _ = record("replay", spark_delta.publish, path, second, replace(two, run_id=f"run-c{i}"),
                            keys=["flight_id"])
        if (decision.action, appended.action, noop.action) != ("append", "append", "noop"):
            raise RuntimeError(f"expected append, append, noop; got {decision.action}, {appended.action}, "
                               f"{noop.action}")
    medians = {k: round(statistics.median(v), 3) for k, v in times.items()}
    print(json.dumps({"rows": args.rows, "repeats": args.repeats, "median_s": medians,
                      "first_vs_plain": round(medians["guarded_first"] / medians["plain"], 2),
                      "stats_vs_plain": round(medians["plain_stats"] / medians["plain"], 2),
                      "next_vs_plain": round(medians["guarded_next"] / medians["plain"], 2),
                      "txn_vs_plain_next": round(medians["plain_next_txn"] / medians["plain_next"], 2),
                      "next_vs_txn": round(medians["guarded_next"] / medians["plain_next_txn"], 2)}))


if __name__ == "__main__":
    main()
