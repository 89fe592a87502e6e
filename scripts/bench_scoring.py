"""Scoring throughput on all 336,776 nycflights13 flights, in one run (not a test).

Four ways to score the same rows with the same kind of fitted model (median impute + scale on
numeric columns, one-hot on carrier/origin/dest, LogisticRegression max_iter=500, fitted on the
training rows of months 1-9):

1. limit      plain ``Pipeline.predict_proba`` of a scikit-learn pipeline on one pandas frame;
2. single     lakescore's single-node route (registered pyfunc, certificate checked, whole frame);
3. spark      lakescore's Spark route (``spark_udf`` struct result, admitted batches, local[2]);
4. peer       the same scikit-learn pipeline logged with ``mlflow.sklearn`` and scored through a
              plain ``mlflow.pyfunc.spark_udf`` (what a user would otherwise write).

Each prints rows/s (warm: second call; the first call is shown too) and a correctness aggregate:
the count of labels that differ from the limit's. The lakescore chain here has no rules or outlier
steps, so every row gets a label and the counts compare like with like.

Usage: python scripts/bench_scoring.py [--home /tmp/lakescore-bench]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd

NUMERIC = ["month", "day", "hour", "dep_delay", "distance"]
CATEGORIES = ["carrier", "origin", "dest"]
RECIPE = [
    {"step": "SimpleImputer", "name": "impute_numeric", "columns": NUMERIC, "strategy": "median"},
    {"step": "StandardScaler", "name": "scale_numeric", "columns": NUMERIC},
    {"step": "OneHotEncoder", "name": "one_hot", "columns": CATEGORIES, "max_categories": None,
     "include_missing": False, "column_names": "slug"},
]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def sklearn_pipeline():
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    prep = ColumnTransformer([("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), NUMERIC),
                              ("cat", OneHotEncoder(handle_unknown="ignore"), CATEGORIES)])
    return Pipeline([("prep", prep), ("model", LogisticRegression(max_iter=500, random_state=42))])


def demo_flights(home: str | Path):
    """A fresh local runtime under ``home`` holding all demo flights as a Delta table; the
    training rows (months 1-9 with an arrival delay) and their label. Returns
    ``(runtime, flights, train, y)``."""
    from lakescore.demo_data import FLIGHTS, demo_frames
    from lakescore.frames import derive_label
    from lakescore.runtime import LocalRuntime

    shutil.rmtree(home, ignore_errors=True)
    runtime = LocalRuntime(Path(home))
    flights = demo_frames()[FLIGHTS]
    runtime.write_table(FLIGHTS, flights)
    train = flights[(flights["month"] <= 9) & flights["arr_delay"].notna()]
    return runtime, flights, train, derive_label(train, column="is_late", expression="arr_delay > 15")


def register_chain(runtime, flights, train, y):
    """The lakescore chain (:data:`RECIPE`, LogisticRegression) fitted on ``train``, admitted and
    registered as ``main.bench.lakescore``; returns ``(chain, registered)``."""
    import mlflow

    from lakescore.admission.evidence import admit
    from lakescore.packaging import log_and_register
    from lakescore.training import fit_chain

    chain = fit_chain(train, y, recipe=RECIPE, model_class="LogisticRegression", model_params={"max_iter": 500},
                      feature_columns=NUMERIC + CATEGORIES)
    runtime.mlflow()
    with mlflow.start_run():
        registered = log_and_register(chain, example=flights.head(5), name="main.bench.lakescore", alias="champion",
                                      evidence=admit(chain, train.tail(1000)))
    return chain, registered


def spark_plan(registered):
    """The :class:`~lakescore.scoring.preflight.ScorePlan` of the demo flights (version 0) and ``registered``."""
    from lakescore.demo_data import FLIGHTS
    from lakescore.scoring.preflight import ScorePlan

    return ScorePlan(FLIGHTS, 0, registered.name, registered.version, registered.model_uri, tuple(NUMERIC + CATEGORIES),
                     ("flight_id",), registered.certificate.digest, registered.certificate.artifact_sha256)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default="/tmp/lakescore-bench")
    args = parser.parse_args()

    import mlflow

    from lakescore.demo_data import FLIGHTS
    from lakescore.scoring.spark import score_spark

    runtime, flights, train, y = demo_flights(args.home)
    features = NUMERIC + CATEGORIES
    rows = len(flights)
    print(f"rows scored: {rows:,} (all flights); training rows: {len(train):,}")

    pipe = sklearn_pipeline().fit(train[features], y.astype(int))
    limit, t_first = timed(lambda: pipe.predict_proba(flights[features]))
    limit, t_limit = timed(lambda: pipe.predict_proba(flights[features]))
    limit_labels = pipe.classes_[limit.argmax(axis=1)]
    results = [("limit: sklearn predict_proba", t_first, t_limit, 0)]

    _, registered = register_chain(runtime, flights, train, y)
    with mlflow.start_run():
        peer = mlflow.sklearn.log_model(pipe, name="peer", serialization_format="cloudpickle",
                                        input_example=flights[features].head(3))

    def single():
        model = mlflow.pyfunc.load_model(registered.model_uri)
        return model.predict(flights[features], params={"batch_rows": rows})

    out, t_first = timed(single)
    out, t_warm = timed(single)
    diff = int((out["prediction"].to_numpy(dtype="int64") != limit_labels).sum())
    results.append(("lakescore single-node", t_first, t_warm, diff))

    plan = spark_plan(registered)
    spark = runtime.spark()
    source = runtime.spark_source(FLIGHTS, version=0)
    out, t_first = timed(lambda: score_spark(source, plan, batch_rows=10000, env_manager="local").toPandas())
    out, t_warm = timed(lambda: score_spark(source, plan, batch_rows=10000, env_manager="local").toPandas())
    by_id = dict(zip(flights["flight_id"], limit_labels))
    diff = int((out["prediction"].to_numpy(dtype="int64") != out["flight_id"].map(by_id).to_numpy()).sum())
    results.append(("lakescore spark (local[2])", t_first, t_warm, diff))

    from pyspark.sql import functions as F

    def peer_spark():
        source = runtime.spark_source(FLIGHTS, version=0).repartition(spark.sparkContext.defaultParallelism)
        udf = mlflow.pyfunc.spark_udf(spark, peer.model_uri, result_type="long", env_manager="local")
        return source.select("flight_id", udf(F.struct(*features)).alias("prediction")).toPandas()

    out, t_first = timed(peer_spark)
    out, t_warm = timed(peer_spark)
    diff = int((out["prediction"].to_numpy() != out["flight_id"].map(by_id).to_numpy()).sum())
    results.append(("peer: mlflow.sklearn + spark_udf", t_first, t_warm, diff))

    print(f"{'route':<36}{'first s':>9}{'warm s':>9}{'rows/s (warm)':>16}{'labels != limit':>17}")
    for name, first, warm, diff in results:
        print(f"{name:<36}{first:>9.2f}{warm:>9.2f}{rows / warm:>16,.0f}{diff:>17}")
    spark.stop()


if __name__ == "__main__":
    main()
