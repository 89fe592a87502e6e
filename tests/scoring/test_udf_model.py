"""The Spark route's Connect-safe helpers: the model copied once on the driver for spark_udf (its
workers never open the registry), and the parallelism read from the session's conf."""

from pathlib import Path

import mlflow
import pytest

from lakescore.admission.certificate import Certificate
from lakescore.admission.evidence import admit
from lakescore.packaging import log_and_register
from lakescore.scoring.udf_model import DEFAULT_PARALLELISM, default_parallelism, local_model


def test_each_call_copies_the_registered_model_into_a_folder_of_its_own_that_loads_without_the_registry(
        runtime, small_chain, flights_sample, tmp_path):
    runtime.mlflow()
    with mlflow.start_run():
        model = log_and_register(small_chain, example=flights_sample.head(5), name="main.t.udf", alias="champion",
                                 evidence=admit(small_chain, flights_sample.iloc[1500:]))
    first, second = (Path(local_model(model.model_uri, tmp_path / "models")) for _ in range(2))
    assert first != second
    for copy in (first, second):
        assert copy.relative_to(tmp_path / "models").parts[0].startswith("main.t.udf_1-")
        assert (copy / "MLmodel").is_file()
        assert Certificate.from_json((copy / "artifacts" / "certificate.json").read_text()) == model.certificate
    rows = flights_sample.iloc[1500:1520].reset_index(drop=True)
    mlflow.set_registry_uri(f"sqlite:///{tmp_path / 'no-such-dir' / 'registry.db'}")  # what a worker must not need
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'no-such-dir' / 'tracking.db'}")
    try:
        got = mlflow.pyfunc.load_model(str(first)).predict(rows[list(small_chain.input_columns)])
    finally:
        runtime.mlflow()
    assert got["prediction"].tolist() == small_chain.predict(rows)["prediction"].tolist()


@pytest.mark.spark
def test_the_parallelism_is_the_local_cores_on_both_session_kinds(route_spark, spark):
    assert default_parallelism(route_spark) == 2
    assert default_parallelism(route_spark) == spark.sparkContext.defaultParallelism  # what classic Spark says


class ServerlessConf:
    """A Databricks serverless session's conf (none exists here): some keys refuse to be read."""

    def __init__(self, values: dict[str, str], refused: set[str]) -> None:
        self.values, self.refused = values, refused

    def get(self, key: str, default: str | None = None) -> str | None:
        if key in self.refused:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available.")
        return self.values.get(key, default)


class Session:
    def __init__(self, conf: ServerlessConf) -> None:
        self.conf = conf


def test_without_a_default_parallelism_the_shuffle_partitions_or_sparks_default_are_used():
    refused = {"spark.default.parallelism"}
    assert default_parallelism(Session(ServerlessConf({"spark.sql.shuffle.partitions": "16"}, refused))) == 16
    assert default_parallelism(Session(ServerlessConf({"spark.sql.shuffle.partitions": "auto"}, refused))) == 200
    assert default_parallelism(Session(ServerlessConf({"spark.default.parallelism": "0",
                                                       "spark.sql.shuffle.partitions": "8"}, set()))) == 8
    assert DEFAULT_PARALLELISM == 200
