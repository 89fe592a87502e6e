"""The local runtime's Spark: classic, or Spark Connect to a server in the same Delta-enabled JVM
(``LAKESCORE_SPARK_CONNECT=1``), on a loopback port that only token holders may use."""

from pathlib import Path

import pandas as pd
import pytest

from lakescore.runtime import LocalRuntime
from lakescore.runtime.local_spark import CONNECT_ENV, CONNECT_MODE_ENV, session_confs


def test_the_environment_asks_for_spark_connect_and_an_argument_overrides_it(tmp_path, monkeypatch):
    monkeypatch.delenv(CONNECT_ENV, raising=False)
    assert LocalRuntime(tmp_path).connect is False
    monkeypatch.setenv(CONNECT_ENV, "1")
    assert LocalRuntime(tmp_path).connect is True
    assert LocalRuntime(tmp_path, connect=False).connect is False
    monkeypatch.setenv(CONNECT_ENV, "true")  # only "1" turns it on
    assert LocalRuntime(tmp_path).connect is False


def test_both_session_kinds_get_delta_arrow_and_a_parallelism_a_connect_session_can_read(tmp_path):
    confs = session_confs(tmp_path, [tmp_path / "a.jar", tmp_path / "b.jar"])
    assert confs["spark.jars"] == f"{tmp_path}/a.jar,{tmp_path}/b.jar"
    assert confs["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert (confs["spark.default.parallelism"], confs["spark.sql.execution.arrow.pyspark.enabled"]) == ("2", "true")
    assert confs["spark.sql.sources.parallelPartitionDiscovery.parallelism"] == "2"  # VACUUM's listing tasks


@pytest.mark.spark
@pytest.mark.connect
def test_a_connect_session_reads_pinned_delta_versions_and_has_no_spark_context(spark_connect, tmp_path, monkeypatch):
    from pyspark.errors import PySparkAttributeError

    monkeypatch.setenv(CONNECT_MODE_ENV, "1")
    runtime = LocalRuntime(tmp_path, connect=True)
    runtime.spark_session = spark_connect  # the test session's client: LocalRuntime(connect=True).spark() made it
    name = "main.s.pinned"
    runtime.write_table(name, pd.DataFrame({"k": [1, 2, 3]}))
    runtime.write_table(name, pd.DataFrame({"k": [4, 5]}), mode="append")
    assert type(runtime.spark()).__module__ == "pyspark.sql.connect.session"
    assert runtime.spark_source(name, version=0).count() == 3
    assert sorted(r["k"] for r in runtime.spark_source(name, version=1).collect()) == [1, 2, 3, 4, 5]
    history = spark_connect.sql(f"DESCRIBE HISTORY delta.`{runtime.table_location(name)}`").select("version")
    assert sorted(r["version"] for r in history.collect()) == [0, 1]  # Delta's SQL extension on the server
    with pytest.raises(PySparkAttributeError):
        spark_connect.sparkContext  # noqa: B018 - JVM-only: what the route must never touch


@pytest.mark.spark
@pytest.mark.connect
def test_the_connect_server_refuses_a_client_without_its_token(spark, spark_connect):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    port = spark.conf.get("spark.connect.grpc.binding.port")  # the server in the classic session's JVM
    stranger = ConnectSession(connection=f"sc://localhost:{port}/;token=not-the-token")
    try:
        with pytest.raises(Exception, match="(?i)authenticat|UNAUTHENTICATED"):
            stranger.range(1).count()
    finally:
        stranger.client.close()
    assert spark_connect.range(3).count() == 3  # the runtime's own client still works


def test_the_arrow_batch_is_the_measured_one_locally_and_on_the_score_job_cluster(tmp_path):
    import yaml

    from lakescore.runtime.local_spark import ARROW_BATCH_ROWS

    job = yaml.safe_load((Path(__file__).resolve().parents[2] / "resources" / "score.job.yml").read_text())
    cluster = job["resources"]["jobs"]["score"]["job_clusters"][0]["new_cluster"]
    assert ARROW_BATCH_ROWS == 10000  # the fastest cell of scripts/bench_spark_batches.py (README, Figures)
    assert session_confs(tmp_path, [])["spark.sql.execution.arrow.maxRecordsPerBatch"] == "10000"
    assert cluster["spark_conf"]["spark.sql.execution.arrow.maxRecordsPerBatch"] == "10000"


@pytest.mark.spark
def test_the_local_session_reads_times_in_utc_whatever_the_machines_zone(spark):
    """Pinned, not the JVM's zone (here 'Etc/UTC' unless pinned): a naive pandas time and a
    timestamp_ntz are read as UTC, as delta-rs, serving and Databricks read them."""
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    naive = spark.createDataFrame(pd.DataFrame({"t": [pd.Timestamp("2013-01-01 05:00")]}))
    # 2013-01-01 00:00 UTC is 1356998400 s after the epoch (15706 days x 86400); + 5 h = 1357016400
    assert naive.selectExpr("unix_timestamp(t) AS s").first()["s"] == 1357016400
    same = spark.sql("SELECT timestamp_ntz'2013-01-01 05:00:00' = timestamp'2013-01-01 05:00:00+00:00' AS same")
    assert same.first()["same"] is True


@pytest.mark.spark
def test_delta_replays_a_local_tables_log_in_one_task(spark, tmp_path):
    """The state reconstruction an idempotent append needs (Delta Lake reads the app's last
    ``txnVersion`` from it) runs its log replay in one task, not one per core: on a local table
    each extra task costs more than it saves (``SPARK_DELTA_CONF``, ``snapshotPartitions``)."""
    path = str(tmp_path / "t")
    spark.range(5).write.format("delta").save(path)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("txn-append", "an idempotent append")
    try:
        rows = spark.range(5, 10, numPartitions=1)  # the write itself: one task
        rows.write.format("delta").mode("append").options(txnAppId="app", txnVersion="1").save(path)
    finally:  # what setJobGroup set, unset (this thread runs the other tests' jobs)
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            spark.sparkContext.setLocalProperty(key, None)
    jobs = tracker.getJobIdsForGroup("txn-append")
    tasks = [info.numTasks for j in jobs for s in tracker.getJobInfo(j).stageIds
             if (info := tracker.getStageInfo(s)) is not None]
    assert len(jobs) >= 4 and max(tasks) == 1, tasks  # the replay's jobs ("Compute snapshot ..."), the write


def test_the_local_driver_jvm_options_come_before_the_log_configuration(tmp_path):
    from lakescore.runtime.local_spark import DRIVER_JVM_OPTIONS

    options = session_confs(tmp_path, [])["spark.driver.extraJavaOptions"].split(" ")
    assert options[:-1] == list(DRIVER_JVM_OPTIONS) and options[-1].startswith("-Dlog4j2.configurationFile=file:")
    assert "-XX:+UseParallelGC" in options


@pytest.mark.spark
def test_the_local_driver_jvm_runs_with_the_throughput_collector_and_less_inlining(spark):
    """The session's JVM took :data:`DRIVER_JVM_OPTIONS` (a short local run's JVM spends less CPU
    collecting and compiling): its garbage collectors are the parallel ones ("PS ..."), not G1's,
    and HotSpot reports the inlining flags at their set values."""
    jvm = spark.sparkContext._jvm
    management = jvm.java.lang.management.ManagementFactory
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}, collectors
    hotspot = management.getPlatformMXBean(jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    flags = {name: hotspot.getVMOption(name).getValue() for name in ("MaxInlineLevel", "InlineSmallCode", "FreqInlineSize")}
    assert flags == {"MaxInlineLevel": "6", "InlineSmallCode": "1000", "FreqInlineSize": "100"}
