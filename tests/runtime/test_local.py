"""The local runtime: the Runtime Protocol it implements, table naming and its errors, the table facts
and change feed the workflows read, a session on Delta Lake's cached Spark jars, and reading a
table's exact snapshot on both engines (deletion vectors, column mapping, pinned versions)."""

import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
from deltalake import DeltaTable
from fixtures.spark_delta import write_spark_delta

from lakescore.errors import (
    ChangeFeedReadError,
    ConfigError,
    DeltaJarsMissingError,
    TableExistsError,
    TableNotFoundError,
)
from lakescore.runtime import PLACEMENTS, LocalRuntime, Runtime, get_runtime
from lakescore.runtime.base import Tables
from lakescore.runtime.jars import DELTA_SPARK_PACKAGE, setup_command
from lakescore.runtime.local_spark import spark_master


def test_the_local_runtime_is_a_runtime_and_names_its_placement(tmp_path):
    runtime = get_runtime("local", home=tmp_path / "home", target="staging")
    assert isinstance(runtime, Runtime) and isinstance(runtime, Tables)
    assert (runtime.kind, runtime.target, runtime.home) == ("local", "staging", (tmp_path / "home").resolve())
    assert runtime.placement is PLACEMENTS["local"] and set(PLACEMENTS) == {"local", "databricks"}
    assert runtime.table_ref("main.s.t") == runtime.table_location("main.s.t")  # Spark Delta writes by path here


def test_the_table_facts_the_workflows_read(tmp_path):
    runtime = LocalRuntime(tmp_path)
    name = "main.s.facts"
    runtime.write_table(name, pd.DataFrame({"k": [1, 2], "v": pd.array([None, 7], dtype="Int64")}),
                        configuration={"delta.enableChangeDataFeed": "true"})
    runtime.write_table(name, pd.DataFrame({"k": [3, 4, 5], "v": pd.array([None, None, 9], dtype="Int64")}),
                        mode="append")
    runtime.write_table(name, pd.DataFrame({"k": [6], "v": pd.array([1], dtype="Int64")}), mode="append")
    table = DeltaTable(str(runtime.table_path(name)))
    assert runtime.table_location(name) == str(tmp_path.resolve() / "warehouse" / "main" / "s" / "facts")
    assert runtime.table_id(name) == table.metadata().id
    assert runtime.table_properties(name, version=0) == {"delta.enableChangeDataFeed": "true"}
    assert runtime.history_versions(name, version=2, limit=2) == [2, 1]
    assert runtime.history_versions(name, version=1, limit=2) == [1, 0]
    assert (runtime.row_count(name), runtime.row_count(name, version=0)) == (6, 2)
    assert (runtime.null_rows(name, "v"), runtime.null_rows(name, "v", version=0)) == (3, 1)
    assert [f.nullable for f in runtime.table_schema(name)] == [True, True]
    only = runtime.read_table(name, filters=[("v", ">", 5)]).sort_values("k")
    assert only["k"].tolist() == [2, 5] and str(only["v"].dtype) == "Int64"
    changes = runtime.read_changes(name, first=1, last=2, columns=["k"])
    assert sorted(zip(changes["_commit_version"].to_pylist(), changes["k"].to_pylist())) == [(1, 3), (1, 4), (1, 5),
                                                                                            (2, 6)]
    assert set(changes["_change_type"].to_pylist()) == {"insert"}


def test_a_change_feed_that_cannot_be_read_says_which_table_and_versions(tmp_path):
    runtime = LocalRuntime(tmp_path)
    name = "main.s.vacuumed"
    runtime.write_table(name, pd.DataFrame({"k": [1]}), configuration={"delta.enableChangeDataFeed": "true"})
    runtime.write_table(name, pd.DataFrame({"k": [2]}), mode="append")
    for data_file in runtime.table_path(name).glob("*.parquet"):  # as a VACUUM would leave it
        data_file.unlink()
    with pytest.raises(ChangeFeedReadError, match=r"the change data feed of main.s.vacuumed cannot be read for "
                                                  r"versions 1\.\.1 \(") as err:
        runtime.read_changes(name, first=1, last=1, columns=["k"])
    assert err.value.code == "change_feed_unreadable" and err.value.fields["reason"]


def test_three_part_names_map_to_warehouse_folders(tmp_path):
    runtime = LocalRuntime(tmp_path / "home")
    assert runtime.table_path("main.flights.flights") == (tmp_path / "home" / "warehouse" / "main" / "flights" / "flights")


@pytest.mark.parametrize("name", ["flights", "main.flights", "main.flights.flights.x", "main.flights.fl-ights", "main..x"])
def test_names_that_are_not_three_parts_are_refused(tmp_path, name):
    with pytest.raises(TableNotFoundError, match="is not a three-part name catalog.schema.table"):
        LocalRuntime(tmp_path).table_path(name)


def test_a_missing_table_names_the_folder_and_the_fix(tmp_path):
    runtime = LocalRuntime(tmp_path)
    with pytest.raises(TableNotFoundError) as err:
        runtime.table_version("main.flights.nope")
    assert "main.flights.nope does not exist" in str(err.value)
    assert str(tmp_path / "warehouse" / "main" / "flights" / "nope") in str(err.value)


def test_written_tables_read_back_at_a_pinned_version(tmp_path):
    runtime = LocalRuntime(tmp_path)
    runtime.write_table("main.s.t", pd.DataFrame({"k": [1, 2]}))
    runtime.write_table("main.s.t", pd.DataFrame({"k": [3]}), mode="append")
    assert runtime.table_version("main.s.t") == 1
    assert runtime.read_table("main.s.t", version=0)["k"].tolist() == [1, 2]
    assert sorted(runtime.read_table("main.s.t")["k"].tolist()) == [1, 2, 3]
    with pytest.raises(TableExistsError, match="table main.s.t already exists at .*never overwrites") as err:
        runtime.write_table("main.s.t", pd.DataFrame({"k": [4]}))  # mode="error" never overwrites
    assert err.value.code == "table_exists"
    assert sorted(runtime.read_table("main.s.t")["k"].tolist()) == [1, 2, 3]


FIRST_USE = """
import sys
import mlflow  # imported before the start signal, so the four first uses really overlap
from lakescore.runtime import LocalRuntime
wait_for_start()
print(LocalRuntime(sys.argv[1]).mlflow().get_experiment_by_name("lakescore").experiment_id)
"""


def test_four_processes_initialise_a_fresh_home_at_once(tmp_path, at_once):
    home = tmp_path / "home"
    done = at_once(FIRST_USE, [str(home)] * 4)
    assert [code for code, _, _ in done] == [0, 0, 0, 0], [err[-2000:] for _, _, err in done]
    assert len({out.strip() for _, out, _ in done}) == 1  # one lakescore experiment, made once
    mlflow = LocalRuntime(home).mlflow()  # a later command on the same home
    assert [e.name for e in mlflow.search_experiments()].count("lakescore") == 1
    client = mlflow.MlflowClient()
    client.create_registered_model("main.s.m")
    assert [m.name for m in client.search_registered_models()] == ["main.s.m"]


def test_a_spark_session_without_the_jars_stops_before_starting_with_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))  # an environment where setup.sh never ran
    runtime = LocalRuntime(tmp_path / "home")
    with pytest.raises(DeltaJarsMissingError) as err:
        runtime.spark()
    assert str(err.value) == (f"Delta Lake's Spark jars are not in {tmp_path / 'env' / 'lakescore-jars'}: run "
                              f"`{setup_command()}` once (fetches {DELTA_SPARK_PACKAGE} from Maven Central).")
    assert err.value.fields["folder"] == str(tmp_path / "env" / "lakescore-jars")
    assert runtime.spark_session is None and not (tmp_path / "home" / "spark-warehouse").exists()


def test_the_local_master_is_two_threads_unless_the_environment_names_another_local_one(monkeypatch):
    monkeypatch.delenv("LAKESCORE_SPARK_MASTER", raising=False)
    assert spark_master() == "local[2]"
    for value in ("local[1]", "local[8]", "local[*]", " local[1] "):
        monkeypatch.setenv("LAKESCORE_SPARK_MASTER", value)
        assert spark_master() == value.strip()
    for bad in ("local", "local[0]", "local[x]", "spark://10.0.0.1:7077", "yarn"):
        monkeypatch.setenv("LAKESCORE_SPARK_MASTER", bad)
        with pytest.raises(ConfigError) as err:
            spark_master()
        assert err.value.problems == [f"environment variable LAKESCORE_SPARK_MASTER must be local[N] (N >= 1 worker "
                                      f"threads) or local[*]; got {bad!r}. Unset it for the default local[2]."]


@pytest.mark.spark
def test_the_session_loads_delta_from_cached_jars_not_packages(spark):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf.get("spark.sql.catalog.spark_catalog") == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf.get("spark.jars.packages", None) is None  # no resolution, so no network at start
    assert conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert spark.version == pyspark.__version__  # the JVM is the installed pyspark's (4.2, or 4.1 in .venv-dbr)


@pytest.mark.spark
def test_spark_source_reads_the_pinned_version_through_delta(spark_runtime):
    spark_runtime.write_table("main.s.t", pd.DataFrame({"k": [1, 2], "p": ["a", "b"]}), partition_by=["p"])
    spark_runtime.write_table("main.s.t", pd.DataFrame({"k": [3], "p": ["a"]}), mode="append")
    at = {v: sorted(r.k for r in spark_runtime.spark_source("main.s.t", version=v).collect()) for v in (0, 1)}
    assert at == {0: [1, 2], 1: [1, 2, 3]}  # partitioned tables too (the Parquet route refused them)


@pytest.fixture
def deleted_two_of_ten(spark_runtime):
    """A Spark Delta table of keys 0..9 whose v1 deletes keys 3 and 7 through a deletion vector."""
    path = spark_runtime.table_path("main.s.dv")
    write_spark_delta(spark_runtime.spark(), path, pd.DataFrame({"k": range(10), "x": [k * 1.5 for k in range(10)]}),
                      properties={"delta.enableDeletionVectors": "true"}, delete="k IN (3, 7)")
    table = DeltaTable(str(path))
    assert len(pa.table(table.deletion_vectors())) == 1  # one file with a deletion vector,
    assert sum(pq.read_metadata(u.removeprefix("file://")).num_rows for u in table.file_uris()) == 10  # still 10 rows
    return spark_runtime


@pytest.mark.spark
def test_both_engines_read_a_deletion_vector_tables_snapshot(deleted_two_of_ten):
    runtime = deleted_two_of_ten
    kept = [0, 1, 2, 4, 5, 6, 8, 9]
    assert sorted(r.k for r in runtime.spark_source("main.s.dv", version=1).collect()) == kept
    assert sorted(r.k for r in runtime.spark_source("main.s.dv", version=0).collect()) == list(range(10))
    frame = runtime.read_table("main.s.dv", version=1, columns=["x", "k"]).sort_values("k", ignore_index=True)
    assert frame.columns.tolist() == ["x", "k"] and frame["k"].tolist() == kept
    assert frame["x"].tolist() == [k * 1.5 for k in kept] and str(frame["k"].dtype) == "Int64"
    assert sorted(runtime.read_table("main.s.dv", version=0)["k"]) == list(range(10))
    assert sorted(runtime.read_table("main.s.dv", version=1, filters=[("k", ">", 5)])["k"]) == [6, 8, 9]
    assert runtime.reader_features("main.s.dv") == {"deletionVectors"}
    assert runtime.unreadable_features("main.s.dv") == frozenset()


@pytest.mark.spark
def test_a_column_mapped_table_is_read_by_name_not_as_nulls(spark_runtime):
    path = spark_runtime.table_path("main.s.cm")
    write_spark_delta(spark_runtime.spark(), path, pd.DataFrame({"k": [1, 2], "x": [0.5, 2.5]}),
                      properties={"delta.columnMapping.mode": "name"})
    assert spark_runtime.reader_features("main.s.cm") == {"columnMapping"}
    assert spark_runtime.read_table("main.s.cm").sort_values("k")["x"].tolist() == [0.5, 2.5]


@pytest.mark.spark
def test_delta_rs_cannot_read_type_widening_and_says_so(spark_runtime):
    path = spark_runtime.table_path("main.s.tw")
    write_spark_delta(spark_runtime.spark(), path, pd.DataFrame({"k": [1, 2]}),
                      properties={"delta.enableTypeWidening": "true"})
    assert spark_runtime.unreadable_features("main.s.tw") == {"typeWidening"}
    assert spark_runtime.unreadable_features("main.s.tw", engine="spark") == frozenset()
    assert sorted(r.k for r in spark_runtime.spark_source("main.s.tw", version=0).collect()) == [1, 2]


def test_a_nullable_long_and_boolean_column_read_back_exact(tmp_path):
    runtime = LocalRuntime(tmp_path)
    big = 2**53 + 1  # 9007199254740993: a double holds only ...992
    runtime.write_table("main.s.t", pd.DataFrame({"k": pd.array([big, None, -big], dtype="Int64"),
                                                  "ok": pd.array([True, None, False], dtype="boolean"),
                                                  "x": [0.5, None, 1.5]}))
    got = runtime.read_table("main.s.t")
    assert str(got["k"].dtype) == "Int64" and str(got["ok"].dtype) == "boolean" and str(got["x"].dtype) == "float64"
    assert got["k"].tolist() == [9007199254740993, pd.NA, -9007199254740993]
    assert got["ok"].tolist() == [True, pd.NA, False]
    assert runtime.read_table("main.s.t", columns=["k"])["k"].iloc[0] == 9007199254740993


@pytest.mark.spark
def test_spark_changes_reads_the_change_feed_window_on_spark(spark_runtime, spark):
    from chispa import assert_df_equality

    runtime, name = spark_runtime, "main.s.feed"
    runtime.write_table(name, pd.DataFrame({"k": [1, 2], "v": [10, 20]}),
                        configuration={"delta.enableChangeDataFeed": "true"})  # v0
    runtime.write_table(name, pd.DataFrame({"k": [3], "v": [30]}), mode="append")  # v1
    DeltaTable(str(runtime.table_path(name))).update(predicate="k = 1", updates={"v": "11"})  # v2
    changes = runtime.spark_changes(name, first=1, last=2, columns=["k", "v"])
    assert changes.columns == ["k", "v", "_change_type", "_commit_version"]
    expected = spark.createDataFrame([(3, 30, "insert", 1), (1, 10, "update_preimage", 2),
                                      (1, 11, "update_postimage", 2)],
                                     "k long, v long, _change_type string, _commit_version long")
    assert_df_equality(changes, expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.spark
def test_spark_changes_of_versions_the_log_no_longer_has_is_a_change_feed_error(spark_runtime):
    runtime, name = spark_runtime, "main.s.cleaned"
    runtime.write_table(name, pd.DataFrame({"k": [1]}), configuration={"delta.enableChangeDataFeed": "true"})
    for k in (2, 3):
        runtime.write_table(name, pd.DataFrame({"k": [k]}), mode="append")  # v1, v2
    table = DeltaTable(str(runtime.table_path(name)))
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})  # v3
    DeltaTable(str(runtime.table_path(name))).create_checkpoint()
    DeltaTable(str(runtime.table_path(name))).cleanup_metadata()  # the log starts at v3 now
    with pytest.raises(ChangeFeedReadError, match=r"the change data feed of main.s.cleaned cannot be read for "
                                                  r"versions 1\.\.2 \(") as err:
        runtime.spark_changes(name, first=1, last=2, columns=["k"])
    assert err.value.code == "change_feed_unreadable" and err.value.fields["reason"]


def test_written_tables_come_in_row_groups_the_spark_scan_can_split(tmp_path):
    runtime = LocalRuntime(tmp_path)
    runtime.write_table("main.s.groups", pd.DataFrame({"k": range(150_000)}))
    files = list(runtime.table_path("main.s.groups").glob("*.parquet"))
    groups = [pq.ParquetFile(f).metadata.row_group(i).num_rows for f in files
              for i in range(pq.ParquetFile(f).metadata.num_row_groups)]
    assert len(files) == 1 and groups == [65536, 65536, 18928]  # 2**16 rows at most (delta-rs: 2**20)
