"""The databricks runtime on a local Spark Connect session, for the tests.

Run as a script (``python on_connect.py WAREHOUSE VOLUME``) it starts ``remote("local[2]")`` with
Delta's jars on the server side (as serverless jobs and standard-access clusters hand a job a
Connect session), runs the runtime's table reads and a publication by name twice, and prints the
results as JSON. A process of its own: the test session already holds a classic SparkSession.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pandas as pd


def main(warehouse: str, volume: str) -> dict:
    from pyspark.sql import SparkSession

    from lakescore.publish.plan import PublishRequest
    from lakescore.publish.spark_delta import publish
    from lakescore.runtime.databricks import DatabricksRuntime
    from lakescore.runtime.delta_log import app_txn_version
    from lakescore.runtime.jars import SPARK_DELTA_CONF, delta_jars, spark_environment

    spark_environment()
    builder = SparkSession.builder.remote("local[2]")
    for key, value in {**SPARK_DELTA_CONF, "spark.jars": ",".join(str(j) for j in delta_jars()),
                       "spark.sql.warehouse.dir": warehouse, "spark.ui.enabled": "false"}.items():
        builder = builder.config(key, value)  # server-side: static ones cannot be re-set on the client
    spark = builder.getOrCreate()
    runtime = DatabricksRuntime(volume, target="staging", session=spark)
    spark.sql("CREATE SCHEMA IF NOT EXISTS spark_catalog.connect")
    name = "spark_catalog.connect.source"
    runtime.write_table(name, pd.DataFrame({"id": pd.array([1, 2], dtype="Int64")}),
                        configuration={"delta.enableChangeDataFeed": "true"})
    runtime.write_table(name, pd.DataFrame({"id": pd.array([3], dtype="Int64")}), mode="append")
    target = "spark_catalog.connect.preds"
    rows = spark.createDataFrame([(1, 0, "r1"), (2, 1, "r1")], "flight_id long, prediction long, run_id string")
    request = PublishRequest(f"lakescore/score/staging/{target}", "r1", target, name, "sid", "incremental", "append",
                             None, 1, None, None, "m.m.m", 1, "sha", "cfg",
                             (("flight_id", "long"), ("prediction", "long"), ("run_id", "string")), 2)
    first = publish(runtime.table_ref(target), rows, request, keys=["flight_id"])
    again = publish(runtime.table_ref(target), rows, replace(request, run_id="r2"), keys=["flight_id"])
    return {"session": type(spark).__module__, "version": runtime.table_version(name),
            "properties_v0": runtime.table_properties(name, version=0),
            "changes": runtime.read_changes(name, first=1, last=1, columns=["id"]).to_pylist(),
            "rows_v0": runtime.read_table(name, version=0)["id"].sort_values().tolist(),
            "published": [first[0].action, first[1]], "replayed": [again[0].action, again[1]],
            "app_txn": app_txn_version(spark, runtime.table_location(target), request.app_id, 1),
            "runs": str(runtime.runs_dir())}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
