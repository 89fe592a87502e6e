"""Scale of the Spark route: score + publish of the incoming flights replicated to 1M and 5M rows
(not a test).

One run, in a temporary home:

1. set-up (this process): the demo tables (``workflows.demo.load_data``), one training
   (``workflows.train``), and the peer's model: the same features and estimator as a plain
   scikit-learn pipeline saved with ``mlflow.sklearn``;
2. the sources (one Spark process): ``main.flights.flights_incoming`` replicated with Spark to
   each size, every copy with fresh record keys (``flight_id + copy * stride``), written as Delta
   tables with change data feed on;
3. per size, each in a fresh process so its memory is its own:
   - lakescore: ``workflows.publish.score_and_publish`` with ``batch_compute: spark`` (whatever
     the Spark route does today: this script never reimplements it);
   - the peer: ``mlflow.pyfunc.spark_udf`` over the plain model (its ``predict_proba``: the key,
     a label and a probability, as lakescore's predictions have), then
     ``df.write.format("delta").saveAsTable``;
4. the largest size again on ``local[1]`` (``LAKESCORE_SPARK_MASTER``): the scaling ratio
   local[2] / local[1], a proxy for adding workers;
5. publication alone, on the largest run's staged predictions (one Spark process): the workflow's
   publication (``workflows.publish.publish``: the engine the route uses today is named in the
   output) and its replay; then the Spark Delta writer (``publish.spark_delta.publish``, the
   guarded commit) against a plain ``df.write.format("delta").mode("append")`` of the same
   persisted Spark DataFrame, and the writer's replay.

Peak RSS is sampled (psutil, every 50 ms) for the child's Python process (the driver) and its JVM
(in local mode the JVM is Spark's driver and executors at once), and, apart, the Python workers
the JVM starts. rows/s counts the time of the scoring and publishing calls (the SparkSession is
started before the clock starts).

Targets (issue 10): lakescore rows/s >= the peer's; driver RSS (Python + JVM) within 20 % between
the smallest and the largest size; scaling ratio >= 1.8; guarded Spark publication <= 1.2x a plain
append; the replay no-op well under a second.

Usage: python scripts/bench_scale.py [--sizes 1000000,5000000] [--quick] [--home DIR] [--config-dir config]
``--quick``: 100,000 rows only (a smoke run). Prints a table and one JSON line (``BENCH_SCALE {...}``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

INCOMING = "main.flights.flights_incoming"
FEATURES_NUMERIC = ["hour", "dep_delay", "distance"]  # config/training.yml feature_columns
FEATURES_TEXT = ["carrier", "origin", "dest"]
REPEATS = 3  # publication timings: median of three fresh tables


def source_table(size: int, prefix: str = "flights") -> str:
    return f"main.bench.{prefix}_{size}"


# --- children: each runs in a fresh process -----------------------------------------------------

def child_prepare(home: str, sizes: list[int], source: str = INCOMING, prefix: str = "flights") -> dict[str, Any]:
    """Write ``source`` replicated to each size (``main.bench.<prefix>_<size>``) with Spark: fresh
    keys per copy (``flight_id + copy * stride``), change data feed on."""
    from pyspark.sql import functions as F

    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(home)
    spark = runtime.spark()
    flights = spark.read.format("delta").load(runtime.table_location(source))
    stride = int(flights.agg(F.max("flight_id")).first()[0]) + 1
    rows = flights.count()
    written = {}
    for size in sizes:
        name = source_table(size, prefix)
        if runtime.table_exists(name):  # an earlier run in the same --home
            written[name] = runtime.row_count(name)
            continue
        copies = -(-size // rows)
        replicated = (flights.crossJoin(spark.range(copies).withColumnRenamed("id", "_copy"))
                      .withColumn("flight_id", F.col("flight_id") + F.col("_copy") * F.lit(stride))
                      .drop("_copy").limit(size).repartition(8))
        path = runtime.table_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        replicated.write.format("delta").option("delta.enableChangeDataFeed", "true").save(str(path))
        written[name] = runtime.row_count(name)
    return {"written": written}


def child_score(home: str, config_dir: str) -> dict[str, Any]:
    """``lakescore score --publish`` on the Spark route, timed after the SparkSession started."""
    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.publish import score_and_publish

    runtime = LocalRuntime(home)
    project = load_project(config_dir)
    runtime.spark()
    master = runtime.spark().sparkContext.master
    started = time.perf_counter()
    summary = score_and_publish(project, runtime)
    seconds = time.perf_counter() - started
    publish = summary["publish"]
    return {"seconds": seconds, "rows": summary["rows_in"], "run_id": summary["run_id"], "master": master,
            "action": publish["action"], "table_version": publish["table_version"],
            "engine": commit_engine(runtime.table_location(publish["table"]))}


def child_peer(home: str, size: int, model_dir: str) -> dict[str, Any]:
    """The peer: plain mlflow.sklearn model, ``spark_udf``, ``saveAsTable``."""
    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(home)
    spark = runtime.spark()
    started = time.perf_counter()
    scored = peer_scored(spark, runtime.table_location(source_table(size)), model_dir)
    name = f"peer_predictions_{size}_{int(time.time())}"
    scored.write.format("delta").saveAsTable(name)
    seconds = time.perf_counter() - started
    rows = spark.table(name).count()
    return {"seconds": seconds, "rows": rows, "master": spark.sparkContext.master}


def peer_scored(spark: Any, location: str, model_dir: str) -> Any:
    """:func:`peer_predict` of the Delta table at ``location``."""
    return peer_predict(spark.read.format("delta").load(location), model_dir)


def peer_predict(source: Any, model_dir: str) -> Any:
    """The peer's lazy scored frame of the Spark DataFrame ``source`` (flights): ``flight_id``,
    ``prediction`` (the class with the larger probability, ties to 0, as scikit-learn's argmax) and
    ``probability`` (of class 1), from a plain ``mlflow.pyfunc.spark_udf`` over the model
    :func:`peer_model` saved."""
    import mlflow.pyfunc
    from pyspark.sql import functions as F

    predict = mlflow.pyfunc.spark_udf(source.sparkSession, model_dir, result_type="array<double>", env_manager="local")
    inputs = [F.col(c).cast("double").alias(c) for c in FEATURES_NUMERIC] + [F.col(c) for c in FEATURES_TEXT]
    proba = source.select("flight_id", predict(F.struct(*inputs)).alias("_p"))  # the model's signature: doubles
    return proba.select("flight_id", (F.col("_p")[1] > F.col("_p")[0]).cast("long").alias("prediction"),
                        F.col("_p")[1].alias("probability"))


def child_publish(home: str, config_dir: str, run_id: str) -> dict[str, Any]:
    """Publication alone, of the staged run ``run_id``: the workflow's, the Spark Delta writer's and
    a plain append's, and the replays."""
    from lakescore.config import load_project
    from lakescore.publish import spark_delta
    from lakescore.publish.plan import Scope
    from lakescore.publish.run import spark_facts
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.publish import build_request, publish
    from lakescore.workflows.routes.writers import spark_rows
    from lakescore.workflows.score import load_scored

    runtime = LocalRuntime(home)
    project = load_project(config_dir)
    runtime.spark()  # the JVM starts here, before any clock
    run = load_scored(runtime, run_id)
    table = project.inference.prediction_table
    out: dict[str, Any] = {"rows": run.counts["rows_in"]}

    started = time.perf_counter()
    first = publish(project, runtime, run)
    out["workflow_publish_s"] = time.perf_counter() - started
    out["workflow_engine"] = commit_engine(runtime.table_location(table))
    started = time.perf_counter()
    again = publish(project, runtime, run)
    out["workflow_replay_s"] = time.perf_counter() - started
    out["workflow_actions"] = [first.action, again.action]

    pub = project.inference.publication
    frame = spark_rows(runtime, run).persist()  # the staged predictions with run_id, as the workflow publishes them
    frame.count()  # on the executors before either clock starts
    request = build_request(project, run, spark_facts(frame, pub.period_column), target=runtime.target)
    options = dict(allow_empty=pub.allow_empty, model_change_mode=pub.model_change_mode,
                   period_column=pub.period_column, keys=list(run.plan.record_keys),
                   read=Scope.from_json(run.scope).read, certificate_sha256=run.plan.certificate_sha256,
                   batch_compute="spark", env_manager=run.env_manager, batch_rows=run.batch_rows, **run.counts)
    guarded, plain, replay = [], [], []
    folder = Path(home) / f"bench-publish-{run_id}"
    for i in range(REPEATS):
        path = str(folder / f"plain_{i}")
        started = time.perf_counter()
        frame.write.format("delta").mode("append").save(path)
        plain.append(time.perf_counter() - started)
        path = str(folder / f"guarded_{i}")
        started = time.perf_counter()
        decision, _, _ = spark_delta.publish(path, frame, request, **options)
        guarded.append(time.perf_counter() - started)
        started = time.perf_counter()
        noop, _, _ = spark_delta.publish(path, frame, request, **options)
        replay.append(time.perf_counter() - started)
        if (decision.action, noop.action) != ("append", "noop"):
            raise RuntimeError(f"Spark Delta writer: expected append then noop, got {decision.action}, {noop.action}")
    out.update(plain_append_s=statistics.median(plain), guarded_spark_s=statistics.median(guarded),
               spark_replay_s=statistics.median(replay))
    return out


def commit_engine(path: str) -> str:
    """The engine of the newest data commit of the Delta table at ``path``, from its commitInfo."""
    from deltalake import DeltaTable

    for entry in DeltaTable(path).history():
        if entry.get("operation") in ("WRITE", "CREATE TABLE AS SELECT", "CREATE OR REPLACE TABLE AS SELECT"):
            if "Delta-Lake" in str(entry.get("engineInfo", "")):
                return "spark-delta"
            return str(entry.get("clientVersion", "?")).split("-")[0] + "-rs"
    return "?"


CHILDREN = {"prepare": child_prepare, "score": child_score, "peer": child_peer, "publish": child_publish}


# --- the parent: set-up, children, memory sampling, the figures ---------------------------------

def tree_rss(root: Any) -> dict[str, int]:
    """RSS (bytes) of the psutil process ``root`` and its descendants: ``python`` (the process itself),
    ``jvm`` (its ``java`` children: in local mode Spark's driver and executors at once), ``driver``
    (both), ``workers`` (the Python processes under them: Spark's Python workers) and ``total``
    (all of them; pages that forked workers share are counted once per process)."""
    import psutil

    python = root.memory_info().rss
    jvm = workers = 0
    for proc in root.children(recursive=True):
        try:
            rss, name = proc.memory_info().rss, proc.name()
        except psutil.Error:
            continue
        if name == "java":
            jvm += rss
        elif "python" in name:
            workers += rss
    return {"python": python, "jvm": jvm, "driver": python + jvm, "workers": workers,
            "total": python + jvm + workers}


class Peaks:
    """Peak RSS (bytes) of a child process tree (:func:`tree_rss`), sampled every ``every`` seconds."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.peak = {"python": 0, "jvm": 0, "driver": 0, "workers": 0, "total": 0}
        self.every, self._stop = every, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                sample = tree_rss(self.root)
            except psutil.Error:
                return
            self.peak = {k: max(v, sample[k]) for k, v in self.peak.items()}
            time.sleep(self.every)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self.thread.join()
        return {k: round(v / 2**20, 1) for k, v in self.peak.items()}


def run_child(home: Path, role: str, args: list[Any], *, master: str = "local[2]",
              script: str = __file__) -> dict[str, Any]:
    """Run ``role`` of ``script`` (``script --child role '<json args>'``) in a fresh Python process on
    ``master``; its result (the last ``BENCH {...}`` line it prints) with peak RSS (MiB, see
    :class:`Peaks`) and wall time."""
    import os

    env = {**os.environ, "LAKESCORE_SPARK_MASTER": master}
    log = home / f"{role}-{len(list(home.glob(f'{role}-*.log')))}.log"
    started = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, script, "--child", role, json.dumps(args)], env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        peaks = Peaks(proc.pid)
        out, _ = proc.communicate()
        rss = peaks.stop()
    if proc.returncode != 0:
        raise SystemExit(f"{Path(script).name}: child {role} {args[1:]} failed ({proc.returncode}); see {log}:\n"
                         + log.read_text()[-3000:])
    result = json.loads([line for line in out.splitlines() if line.startswith("BENCH ")][-1][6:])
    return {**result, "rss_mib": rss, "wall_s": time.perf_counter() - started}


def project_config(home: Path, base: Path, label: str, **inference: Any) -> str:
    """A copy of the project's config/ with ``inference`` keys changed; returns its folder."""
    target = home / f"config-{label}"
    shutil.copytree(base, target, dirs_exist_ok=True)
    path = target / "inference.yml"
    body = yaml.safe_load(path.read_text())
    body.update(inference)
    path.write_text(yaml.safe_dump(body))
    return str(target)


def training_rows(runtime: Any, project: Any) -> tuple[Any, Any]:
    """The training rows of config/training.yml (its table, filtered) and their label (int64)."""
    data = project.training.data
    rows = runtime.read_table(data.table)
    rows = rows.query(data.filter, engine="python") if data.filter else rows
    return rows, rows.eval(data.label_expression).astype("int64")


def sklearn_inputs(rows: Any) -> Any:
    """The peer's input frame: the features, numbers as float64 and text as object (its signature)."""
    x = rows[FEATURES_NUMERIC + FEATURES_TEXT].astype({c: "float64" for c in FEATURES_NUMERIC})
    return x.astype({c: "object" for c in FEATURES_TEXT})


def peer_model(runtime: Any, project: Any, folder: Path) -> str:
    """The peer's model: the training rows and estimator of config/training.yml as a plain
    scikit-learn pipeline, saved with ``mlflow.sklearn``; its pyfunc returns ``predict_proba``
    (one column per class), so the peer gives a label and a probability as lakescore does."""
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    if (folder / "MLmodel").is_file():  # saved by an earlier run in the same --home
        return str(folder)
    rows, y = training_rows(runtime, project)
    x = sklearn_inputs(rows)
    pipeline = make_pipeline(
        ColumnTransformer([("numeric", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), FEATURES_NUMERIC),
                           ("text", OneHotEncoder(handle_unknown="ignore"), FEATURES_TEXT)]),
        LogisticRegression(**project.training.model.params)).fit(x, y)
    sample = x.head(5)
    mlflow.sklearn.save_model(pipeline, str(folder), signature=infer_signature(sample, pipeline.predict_proba(sample)),
                              pyfunc_predict_fn="predict_proba",
                              skops_trusted_types=["numpy.dtype"])  # the one-hot encoder keeps its dtype
    return str(folder)


def setup(home: Path, config_dir: Path) -> tuple[Any, Any]:
    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.demo import load_data
    from lakescore.workflows.train import train

    runtime = LocalRuntime(home / ".lakescore")
    project = load_project(config_dir)
    load_data(runtime)
    trained = train(project, runtime)
    print(f"set-up: demo tables loaded, {trained.model_name} v{trained.version} trained", flush=True)
    return runtime, project


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def parent_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every benchmark with children takes: ``--home``, ``--config-dir`` and the
    hidden ``--child ROLE PAYLOAD`` that :func:`run_child` passes."""
    parser.add_argument("--home", default=None, help="a folder for the run (default: a new temp folder)")
    parser.add_argument("--config-dir", default=str(Path(__file__).resolve().parents[1] / "config"))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)


def serve_child(args: argparse.Namespace, children: dict[str, Any]) -> bool:
    """Run the child role ``args.child`` names (printing its ``BENCH`` line); False in the parent."""
    if not args.child:
        return False
    role, payload = args.child
    print("BENCH " + json.dumps(children[role](*json.loads(payload))), flush=True)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,5000000", help="rows per run, comma-separated")
    parser.add_argument("--quick", action="store_true", help="100,000 rows only (smoke run)")
    parent_arguments(parser)
    args = parser.parse_args(argv)
    if serve_child(args, CHILDREN):
        return

    sizes = [100_000] if args.quick else sorted(int(s) for s in args.sizes.split(","))
    home = Path(args.home or tempfile.mkdtemp(prefix="lakescore-bench-scale-"))
    home.mkdir(parents=True, exist_ok=True)
    print(f"bench_scale: home {home}, sizes {sizes}", flush=True)
    runtime, project = setup(home, Path(args.config_dir))
    lake = str(runtime.home)
    model_dir = peer_model(runtime, project, home / "peer-model")
    prepared = run_child(home, "prepare", [lake, sizes])
    print(f"sources: {prepared['written']} ({prepared['wall_s']:.0f} s)", flush=True)

    tag = time.strftime("%H%M%S")  # fresh prediction tables when --home is reused

    def lakescore_run(size: int, master: str) -> dict[str, Any]:
        # strip() drops the characters l, o, c, a, [ and ]: "local[2]" -> "2", as intended
        label = f"{size}-{master.strip('local[]')}-{tag}"  # noqa: B005
        config = project_config(home, Path(args.config_dir), label, batch_compute="spark",
                                score_source_table=source_table(size),
                                prediction_table=f"main.bench.predictions_{label.replace('-', '_')}")
        result = run_child(home, "score", [lake, config], master=master)
        print(f"lakescore {size:,} rows on {master}: {result['seconds']:.1f} s, "
              f"driver peak {result['rss_mib']['driver']:.0f} MiB", flush=True)
        return {**result, "config": config}

    runs: dict[int, dict[str, Any]] = {}
    for size in sizes:
        ours = lakescore_run(size, "local[2]")
        peer = run_child(home, "peer", [lake, size, model_dir])
        print(f"peer {size:,} rows on local[2]: {peer['seconds']:.1f} s, "
              f"driver peak {peer['rss_mib']['driver']:.0f} MiB", flush=True)
        runs[size] = {"lakescore": ours, "peer": peer}
    largest = sizes[-1]
    one = lakescore_run(largest, "local[1]")
    publish_config = project_config(home, Path(runs[largest]["lakescore"]["config"]), f"publish-{tag}",
                                    prediction_table=f"main.bench.predictions_publish_{tag}")
    published = run_child(home, "publish", [lake, publish_config, runs[largest]["lakescore"]["run_id"]])

    figures = report(sizes, runs, one, published)
    print("BENCH_SCALE " + json.dumps(figures, sort_keys=True))


def report(sizes: list[int], runs: dict[int, dict[str, Any]], one: dict[str, Any],
           published: dict[str, Any]) -> dict[str, Any]:
    """Print the table of figures; return them for the JSON line."""
    rate = {size: {k: r["rows"] / r["seconds"] for k, r in run.items()} for size, run in runs.items()}
    print()
    print(f"{'rows':>10} {'who':<10} {'seconds':>8} {'rows/s':>10} {'python':>8} {'jvm':>8} {'driver':>8} "
          f"{'workers':>8}  (peak RSS, MiB)")
    for size in sizes:
        for who in ("lakescore", "peer"):
            r = runs[size][who]
            m = r["rss_mib"]
            print(f"{size:>10,} {who:<10} {r['seconds']:>8.1f} {rate[size][who]:>10,.0f} {m['python']:>8.0f} "
                  f"{m['jvm']:>8.0f} {m['driver']:>8.0f} {m['workers']:>8.0f}")
    largest, smallest = sizes[-1], sizes[0]
    one_rate = one["rows"] / one["seconds"]
    m = one["rss_mib"]
    print(f"{largest:>10,} {'lakescore':<10} {one['seconds']:>8.1f} {one_rate:>10,.0f} {m['python']:>8.0f} "
          f"{m['jvm']:>8.0f} {m['driver']:>8.0f} {m['workers']:>8.0f}  on local[1]")
    ours, _peer = runs[largest]["lakescore"], runs[largest]["peer"]
    figures = {
        "sizes": sizes,
        "engine": ours["engine"],
        "rows_per_s": {str(s): round(rate[s]["lakescore"]) for s in sizes},
        "peer_rows_per_s": {str(s): round(rate[s]["peer"]) for s in sizes},
        "vs_peer": {str(s): ratio(rate[s]["lakescore"], rate[s]["peer"]) for s in sizes},
        "driver_rss_mib": {str(s): runs[s]["lakescore"]["rss_mib"] for s in sizes},
        "peer_driver_rss_mib": {str(s): runs[s]["peer"]["rss_mib"] for s in sizes},
        "driver_rss_growth": ratio(ours["rss_mib"]["driver"], runs[smallest]["lakescore"]["rss_mib"]["driver"]),
        "scaling_ratio": ratio(rate[largest]["lakescore"], one_rate),
        "publication": {k: round(v, 3) if isinstance(v, float) else v for k, v in published.items()
                        if k not in ("rss_mib",)},
        "guarded_vs_plain": ratio(published["guarded_spark_s"], published["plain_append_s"]),
    }
    print()
    print(f"engine that wrote lakescore's predictions: {ours['engine']}")
    print(f"rows/s vs peer at {largest:,}: {figures['vs_peer'][str(largest)]}x (target >= 1)")
    print(f"driver RSS {largest:,} / {smallest:,} rows: {figures['driver_rss_growth']}x (target <= 1.2)")
    print(f"scaling local[2] / local[1] at {largest:,} rows: {figures['scaling_ratio']}x (target >= 1.8)")
    print(f"publication of {published['rows']:,} staged rows: workflow ({published['workflow_engine']}) "
          f"{published['workflow_publish_s']:.2f} s, its replay {published['workflow_replay_s']:.2f} s; Spark Delta "
          f"writer {published['guarded_spark_s']:.2f} s vs plain append {published['plain_append_s']:.2f} s = "
          f"{figures['guarded_vs_plain']}x (target <= 1.2), its replay {published['spark_replay_s']:.2f} s")
    return figures


if __name__ == "__main__":
    main()
