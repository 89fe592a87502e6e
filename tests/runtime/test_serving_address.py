"""Where an endpoint listens, per placement: serving.yml's host locally; on Databricks the
driver's address behind the driver proxy, from the cluster's Spark conf (a real local session
given the confs a Databricks cluster sets) or the environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakescore.errors import RuntimeUnsupportedError
from lakescore.runtime import PLACEMENTS, DatabricksRuntime, LocalRuntime, ServingBind, serving_bind

CONFS = {"spark.databricks.workspaceUrl": "adb-1234567890123456.7.azuredatabricks.net",
         "spark.databricks.clusterUsageTags.clusterOwnerOrgId": "1234567890123456",
         "spark.databricks.clusterUsageTags.clusterId": "0101-123456-abcde123"}


def test_locally_the_endpoint_binds_the_configured_host(tmp_path: Path) -> None:
    where = serving_bind(LocalRuntime(tmp_path / ".lakescore"), host="127.0.0.1")
    assert where == ServingBind("127.0.0.1")
    assert (where.address(8765), where.client_url(8765)) == ("http://127.0.0.1:8765", "http://127.0.0.1:8765")
    assert (PLACEMENTS["local"].serving_bind, PLACEMENTS["databricks"].serving_bind) == ("configured", "driver")


@pytest.fixture
def cluster_session(spark, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The test session with the confs a Databricks cluster sets (removed afterwards), no env fallbacks."""
    for name in ("DATABRICKS_HOST", "DB_CLUSTER_ID", "DB_DRIVER_IP"):
        monkeypatch.delenv(name, raising=False)
    for key, value in CONFS.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key in CONFS:
            spark.conf.unset(key)


@pytest.mark.spark
def test_on_databricks_the_driver_address_and_the_proxy_url_come_from_the_spark_conf(cluster_session) -> None:
    runtime = DatabricksRuntime(Path("/Volumes/main/flights/lakescore"), session=cluster_session)
    where = serving_bind(runtime, host="127.0.0.1")
    assert where.host == cluster_session.conf.get("spark.driver.host")  # the driver's address, as Spark knows it
    assert where.address(8765) == f"http://{where.host}:8765"
    assert where.client_url(8765) == ("https://adb-1234567890123456.7.azuredatabricks.net/driver-proxy-api/o/"
                                      "1234567890123456/0101-123456-abcde123/8765/")


@pytest.mark.spark
def test_the_environment_fills_in_and_a_missing_fact_names_its_key(spark, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = DatabricksRuntime(Path("/Volumes/main/flights/lakescore"), session=spark)
    for name in ("DATABRICKS_HOST", "DB_CLUSTER_ID", "DB_DRIVER_IP"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeUnsupportedError, match=r"no spark.databricks.workspaceUrl \(or \$DATABRICKS_HOST\), "
                       r"spark.databricks.clusterUsageTags.clusterOwnerOrgId, spark.databricks.clusterUsageTags."
                       r"clusterId \(or \$DB_CLUSTER_ID\)\. Run it on a classic cluster's driver"):
        serving_bind(runtime, host="127.0.0.1")
    monkeypatch.setenv("DATABRICKS_HOST", "https://dbc-a1b2c3d4-e5f6.cloud.databricks.com/")
    monkeypatch.setenv("DB_CLUSTER_ID", "0202-000000-xyz")
    spark.conf.set("spark.databricks.clusterUsageTags.clusterOwnerOrgId", "0")
    try:
        where = serving_bind(runtime, host="127.0.0.1")
    finally:
        spark.conf.unset("spark.databricks.clusterUsageTags.clusterOwnerOrgId")
    assert where.client_url(9000) == "https://dbc-a1b2c3d4-e5f6.cloud.databricks.com/driver-proxy-api/o/0/0202-000000-xyz/9000/"
