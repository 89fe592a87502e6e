"""The score workflow reads exactly the source's Delta snapshot on both routes: a deletion vector
that hides 2 of 10 rows hides them from scoring and from the published predictions."""

import dataclasses

import mlflow
import pytest
from fixtures.runs import as_pandas
from fixtures.spark_delta import write_spark_delta

from lakescore.admission.evidence import admit
from lakescore.config import load_project
from lakescore.demo_data import INCOMING
from lakescore.packaging import log_and_register
from lakescore.runtime.local_spark import CONNECT_MODE_ENV
from lakescore.workflows.publish import publish
from lakescore.workflows.score import score

pytestmark = pytest.mark.spark
NAME = "main.flights.late_arrival"


@pytest.fixture
def dv_project(spark_runtime, project_dir, flights_sample, small_chain):
    """Ten real flights as a Spark Delta source whose v1 deletes two of them through a deletion vector."""
    ten = flights_sample.head(10)
    deleted = [int(ten["flight_id"].iloc[2]), int(ten["flight_id"].iloc[6])]
    write_spark_delta(spark_runtime.spark(), spark_runtime.table_path(INCOMING), ten,
                      properties={"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
                      delete=f"flight_id IN ({deleted[0]}, {deleted[1]})")
    spark_runtime.mlflow()
    with mlflow.start_run():
        log_and_register(small_chain, example=flights_sample.head(5), name=NAME, alias="champion",
                         evidence=admit(small_chain, flights_sample.iloc[1000:]))
    kept = sorted(int(k) for k in ten["flight_id"] if int(k) not in deleted)
    return load_project(project_dir), spark_runtime, ten, kept


def test_deleted_rows_are_neither_scored_nor_published_on_either_route(dv_project, small_chain):
    project, runtime, ten, kept = dv_project
    assert project.inference.batch_compute == "spark"
    on_spark = score(project, runtime)
    assert on_spark.plan.source_version == 1 and on_spark.counts["rows_in"] == 8
    spark_rows = as_pandas(on_spark.predictions)
    assert spark_rows["flight_id"].tolist() == kept

    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    on_one_node = score(single, runtime)
    assert on_one_node.predictions["flight_id"].tolist() == kept
    assert on_one_node.predictions["prediction"].equals(spark_rows["prediction"])
    rows = ten.set_index("flight_id").loc[kept].reset_index()  # independent: the chain on the kept rows
    assert spark_rows["prediction"].tolist() == small_chain.predict(rows)["prediction"].tolist()

    publish(project, runtime, on_spark)
    stored = runtime.read_table(project.inference.prediction_table)
    assert sorted(stored["flight_id"]) == kept


@pytest.mark.connect
def test_the_spark_route_scores_stages_and_publishes_on_spark_connect(dv_project, spark_connect, monkeypatch):
    project, runtime, _, kept = dv_project
    monkeypatch.setenv(CONNECT_MODE_ENV, "1")  # as LAKESCORE_SPARK_CONNECT=1 sets it: Connect columns
    runtime._spark = spark_connect
    run = score(project, runtime)  # preflight, scope, spark_udf, staging from the executors
    assert run.counts["rows_in"] == 8 and sorted(as_pandas(run.predictions)["flight_id"]) == kept
    assert not list((runtime.runs_dir() / "models").glob("*/*"))  # the run's model copy is gone once staged
    result = publish(project, runtime, run)
    assert (result.action, result.engine, result.table_version) == ("append", "spark-delta", 1)
    assert sorted(runtime.read_table(project.inference.prediction_table)["flight_id"]) == kept
