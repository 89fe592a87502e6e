"""Read splits of the Spark route's source: the split size per core, the scanned bytes read from a
real Delta plan, and a session that refuses a conf."""

import pytest

from lakescore.scoring.splits import SPLIT_CEILING_BYTES, SPLIT_FLOOR_BYTES, scanned_bytes, set_conf, split_bytes


def test_the_split_is_the_total_over_the_cores_within_its_bounds():
    assert split_bytes(7_259_684, 2) == 3_629_842
    assert split_bytes(7_259_685, 2) == 3_629_843  # rounded up: never a third split of one byte
    assert split_bytes(10_000, 2) == SPLIT_FLOOR_BYTES == 1_048_576
    assert split_bytes(64 << 30, 16) == SPLIT_CEILING_BYTES == 134_217_728
    assert split_bytes(0, 0) == SPLIT_FLOOR_BYTES


@pytest.mark.spark
def test_scanned_bytes_are_the_delta_snapshots_file_sizes(spark_runtime, flights_sample):
    runtime = spark_runtime
    runtime.write_table("main.t.splits", flights_sample.iloc[:1000])
    runtime.write_table("main.t.splits", flights_sample.iloc[1000:], mode="append")
    sizes = [f.stat().st_size for f in runtime.table_path("main.t.splits").glob("*.parquet")]
    assert len(sizes) == 2
    assert scanned_bytes(runtime.spark_source("main.t.splits", version=1)) == sum(sizes)
    assert scanned_bytes(runtime.spark_source("main.t.splits", version=0)) in sizes  # the first file only


@pytest.mark.spark
def test_a_conf_the_session_refuses_is_skipped_and_other_errors_propagate(spark):
    from pyspark.errors import PySparkException

    assert set_conf(spark, "spark.sql.warehouse.dir", "/elsewhere") is False  # static: CANNOT_MODIFY_STATIC_CONFIG
    assert spark.conf.get("spark.sql.warehouse.dir") != "/elsewhere"
    assert set_conf(spark, "spark.sql.files.maxPartitionBytes", "2097152") is True
    assert spark.conf.get("spark.sql.files.maxPartitionBytes") == "2097152"
    spark.conf.unset("spark.sql.files.maxPartitionBytes")
    with pytest.raises(PySparkException):
        set_conf(spark, "spark.sql.files.maxPartitionBytes", "not a size")


def test_the_split_size_is_put_back_after_the_block_set_or_not(spark):
    from lakescore.scoring.splits import MAX_PARTITION_BYTES_CONF, reads_restored

    spark.conf.unset(MAX_PARTITION_BYTES_CONF)
    default = spark.conf.get(MAX_PARTITION_BYTES_CONF)
    with reads_restored(spark):
        spark.conf.set(MAX_PARTITION_BYTES_CONF, "1048576")
    assert spark.conf.get(MAX_PARTITION_BYTES_CONF) == default  # unset again: Spark's own value
    spark.conf.set(MAX_PARTITION_BYTES_CONF, "64m")
    try:
        with reads_restored(spark):
            spark.conf.set(MAX_PARTITION_BYTES_CONF, "1048576")
        assert spark.conf.get(MAX_PARTITION_BYTES_CONF) == "64m"
    finally:
        spark.conf.unset(MAX_PARTITION_BYTES_CONF)
