"""Arrow batch size x model-call slice on the Spark route, measured (not a test).

Scores the demo flights (all 336,776 by default) through lakescore's Spark route (``score_spark``, local session,
the model of ``scripts/bench_capacity.py``, registered and admitted) for each ``spark.sql.execution.arrow.maxRecordsPerBatch``
(rows per Arrow batch handed to a Python worker) and each ``batch_rows``
(``spark_udf_prediction_batch_rows``: rows per model call inside a batch), and prints rows/s.
Each cell runs the whole route into Spark's ``noop`` sink (nothing reaches the driver) ``--repeat``
times and keeps the fastest; one untimed run first loads the Python workers.

``--rows N`` at most the flights' count scores the first N flights; above it, the flights
replicated to N rows with fresh keys (``bench_scale.child_prepare``'s table ``main.bench.batches_<N>``,
written once per ``--home`` and kept for the next run), as ``scripts/bench_capacity.py`` scores them.

Usage: python scripts/bench_spark_batches.py [--home /tmp/lakescore-bench-batches] [--config-dir config]
       [--arrow 2000 10000 50000] [--batch-rows 2000 10000 50000] [--repeat 2] [--rows N]
(``--rows 2000 --arrow 1000 --batch-rows 1000 --repeat 1``: a smoke run of every step)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import bench_scale  # scripts/ is on sys.path: the script's folder
from bench_capacity import register

ARROW_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"


def run_once(runtime, plan, *, arrow_rows: int, batch_rows: int, rows: int | None = None) -> float:
    """Seconds to score every row of the plan's source (its first ``rows`` only, when given) through
    the Spark route into ``noop``."""
    from lakescore.scoring.spark import score_spark

    spark = runtime.spark()
    spark.conf.set(ARROW_CONF, str(arrow_rows))
    source = runtime.spark_source(plan.source_table, version=plan.source_version)
    source = source if rows is None else source.limit(rows)
    start = time.perf_counter()
    scored = score_spark(source, plan,
                         batch_rows=batch_rows, env_manager="local")
    scored.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default="/tmp/lakescore-bench-batches")
    parser.add_argument("--config-dir", default=str(Path(__file__).resolve().parents[1] / "config"))
    parser.add_argument("--arrow", type=int, nargs="+", default=[2000, 10000, 50000])
    parser.add_argument("--batch-rows", type=int, nargs="+", default=[2000, 10000, 50000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--rows", type=int, default=None,
                        help="score the first N flights (default: all 336,776); above that, the flights replicated to N rows")
    args = parser.parse_args(argv)

    from dataclasses import replace

    from lakescore.config import load_project
    from lakescore.demo_data import FLIGHTS
    from lakescore.runtime import LocalRuntime
    from lakescore.scoring.preflight import preflight
    from lakescore.workflows.demo import load_data

    home = Path(args.home)
    runtime, project = LocalRuntime(home / ".lakescore"), load_project(args.config_dir)
    load_data(runtime)
    register(runtime, project, home)
    plan = preflight(project, runtime)
    source, flights = FLIGHTS, runtime.row_count(FLIGHTS)
    if args.rows is not None and args.rows > flights:
        source = bench_scale.source_table(args.rows, "batches")
        bench_scale.child_prepare(str(runtime.home), [args.rows], FLIGHTS, "batches")
    plan = replace(plan, source_table=source, source_version=runtime.table_version(source))
    spark = runtime.spark()
    rows = runtime.row_count(plan.source_table, version=plan.source_version)
    limit = args.rows if args.rows is not None and args.rows < rows else None
    rows = limit or rows
    print(f"python {sys.version.split()[0]}, spark {spark.version}, master {spark.sparkContext.master}, "
          f"cores on the machine {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    what = ("the first N flights" if limit else "all flights" if source == FLIGHTS
            else f"the flights replicated with fresh keys, {source}")
    print(f"rows scored per run: {rows:,} ({what}); best of {args.repeat} runs per cell")
    run_once(runtime, plan, arrow_rows=10000, batch_rows=10000, rows=limit)  # warm-up: workers, imports

    print(f"{'maxRecordsPerBatch':>19}{'batch_rows':>12}{'best s':>9}{'rows/s':>11}")
    for arrow_rows in args.arrow:
        for batch_rows in args.batch_rows:
            best = min(run_once(runtime, plan, arrow_rows=arrow_rows, batch_rows=batch_rows, rows=limit)
                       for _ in range(args.repeat))
            print(f"{arrow_rows:>19,}{batch_rows:>12,}{best:>9.2f}{rows / best:>11,.0f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
