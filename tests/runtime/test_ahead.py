"""A Spark action started ahead (lakescore.runtime.ahead): it runs beside the caller, on a thread
that carries the caller's operation tags (classic and Spark Connect) and job properties
(classic), hands back its value or its error, and is waited for when its block ends."""

import threading
import time

import pytest

from lakescore.runtime.ahead import Ahead
from lakescore.runtime.local_spark import CONNECT_MODE_ENV


@pytest.mark.spark
def test_an_action_started_ahead_runs_on_a_thread_of_its_own_with_the_callers_tags(route_spark):
    def work():
        return threading.get_ident(), route_spark.getTags(), route_spark.range(10).count()

    route_spark.addTag("lakescore-ahead")
    try:
        with Ahead(route_spark, work) as ahead:
            thread, tags, rows = ahead.result()
    finally:
        route_spark.removeTag("lakescore-ahead")
    assert thread != threading.get_ident() and "lakescore-ahead" in tags and rows == 10


@pytest.mark.spark
def test_on_a_classic_session_the_callers_job_group_goes_along(spark):
    """The job group is what a cancel of the caller's jobs reaches (a notebook's, a job run's)."""
    context = spark.sparkContext
    context.setJobGroup("lakescore-ahead", "a key check")
    try:
        group = Ahead(spark, lambda: context.getLocalProperty("spark.jobGroup.id")).result()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]  # None removes it
    assert group == "lakescore-ahead"


@pytest.mark.spark
def test_the_works_error_is_raised_by_result_and_leaving_the_block_waits_for_the_work(spark):
    def failing():
        raise ValueError("repeated keys")

    with pytest.raises(ValueError, match="repeated keys"):
        Ahead(spark, failing).result()
    done = threading.Event()

    def slow():
        time.sleep(0.3)
        done.set()

    with pytest.raises(RuntimeError, match="the UDF set-up failed"), Ahead(spark, slow):
        raise RuntimeError("the UDF set-up failed")
    assert done.is_set()  # nothing the work runs outlives the block


@pytest.mark.spark
def test_a_block_left_by_an_error_cancels_the_works_jobs_instead_of_waiting_for_them(route_spark, spark, tmp_path):
    """A scan of Parquet files (as the key check's) whose job takes about half a minute on its
    own: the block is left within seconds of its error, and the cores are free again at once, on
    classic Spark and on Spark Connect."""
    spark.range(0, 2_000_000, 1, 2).write.parquet(str(tmp_path / "rows"))
    chains = []
    for start in range(4):  # 4 chains of 30 hashes a row (deeper nesting is more than Spark's analyzer takes)
        chain = f"CAST(id + {start} AS string)"
        for _ in range(30):
            chain = f"sha2({chain}, 256)"
        chains.append(chain)
    hashed = f"concat({', '.join(chains)})"

    def slow():
        return route_spark.read.parquet(str(tmp_path / "rows")).selectExpr(f"max({hashed})").first()

    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="the UDF set-up failed"), Ahead(route_spark, slow) as ahead:
        time.sleep(1.0)  # the job is running
        raise RuntimeError("the UDF set-up failed")
    assert time.perf_counter() - started < 10
    with pytest.raises(Exception, match="(?i)cancel|interrupt"):  # what the work itself met
        ahead.result()
    started = time.perf_counter()
    assert route_spark.range(3).count() == 3
    assert time.perf_counter() - started < 5  # no task of the cancelled job holds a core


@pytest.mark.spark
def test_a_classic_session_in_a_process_switched_to_spark_connect_still_runs_its_work(spark, monkeypatch):
    """pyspark's thread reads the session kind from the process (``SPARK_CONNECT_MODE_ENABLED``);
    a process holding both kinds gets a plain thread for the other kind."""
    monkeypatch.setenv(CONNECT_MODE_ENV, "1")
    assert Ahead(spark, lambda: spark.range(3).count()).result() == 3
