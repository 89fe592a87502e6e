"""Read splits of the Spark route's source: Spark's open cost lowered (never raised) so that the
scan gives each core a split, put back after the run, and a session that refuses a conf."""

import pytest

from lakescore.scoring.splits import OPEN_COST_BYTES, OPEN_COST_CONF, byte_size, reads_restored, set_conf, spread_reads


def test_spark_size_settings_read_as_bytes():
    assert [byte_size(t) for t in ("4194304b", "4194304", "4m", "4MB", "1k", "2g", " 8 m ")] == [
        4 << 20, 4 << 20, 4 << 20, 4 << 20, 1024, 2 << 30, 8 << 20]
    assert [byte_size(t) for t in (None, "", "lots", "4 mib", "-1m", "1.5m")] == [None] * 6


@pytest.mark.spark
def test_many_small_files_are_read_in_one_split_per_core_and_a_lower_open_cost_is_kept(spark_runtime,
                                                                                     flights_sample):
    """8 files of ~25 KB on local[2]: Spark's 4 MiB open cost per file made them 8 splits under a
    split size of bytes / cores; at 1 MiB Spark packs them into 2."""
    runtime, spark = spark_runtime, spark_runtime.spark()
    for i in range(8):
        runtime.write_table("main.t.small_files", flights_sample.iloc[i * 250:(i + 1) * 250],
                            mode="overwrite" if i == 0 else "append")
    assert len(list(runtime.table_path("main.t.small_files").glob("*.parquet"))) == 8
    source = runtime.spark_source("main.t.small_files", version=7)
    spark.conf.unset(OPEN_COST_CONF)
    try:
        with reads_restored(spark):
            assert spread_reads(spark) == OPEN_COST_BYTES
            assert source.rdd.getNumPartitions() == 2 == spark.sparkContext.defaultParallelism
        assert spark.conf.get(OPEN_COST_CONF, None) is None  # put back: unset, Spark's own 4 MiB
        spark.conf.set(OPEN_COST_CONF, "512k")  # a session set lower keeps its own
        with reads_restored(spark):
            assert spread_reads(spark) is None and spark.conf.get(OPEN_COST_CONF) == "512k"
        spark.conf.set(OPEN_COST_CONF, "8m")  # higher: lowered for the run, then put back
        with reads_restored(spark):
            assert spread_reads(spark) == OPEN_COST_BYTES
        assert spark.conf.get(OPEN_COST_CONF) == "8m"
    finally:
        spark.conf.unset(OPEN_COST_CONF)


@pytest.mark.spark
def test_a_conf_the_session_refuses_is_skipped_and_other_errors_propagate(spark):
    from pyspark.errors import PySparkException

    assert set_conf(spark, "spark.sql.warehouse.dir", "/elsewhere") is False  # static: CANNOT_MODIFY_STATIC_CONFIG
    assert spark.conf.get("spark.sql.warehouse.dir") != "/elsewhere"
    assert set_conf(spark, OPEN_COST_CONF, "2097152") is True
    assert spark.conf.get(OPEN_COST_CONF) == "2097152"
    spark.conf.unset(OPEN_COST_CONF)
    with pytest.raises(PySparkException):
        set_conf(spark, OPEN_COST_CONF, "not a size")
