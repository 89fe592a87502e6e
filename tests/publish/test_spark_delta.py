"""The Spark Delta writer: its options and state reading, its key checks as Spark aggregates, a
write whose receipt cannot be read back, and the tables both writers share (each reads the
receipts the other wrote, a replay across writers is a no-op, delta-rs reads what Spark wrote)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC

import pytest
from deltalake import DeltaTable
from engines import stats_columns_in  # tests/publish/engines.py

from lakescore.publish.commit import Period
from lakescore.publish.plan import Decision, PublishRequest, app_id_for, build_receipt, decide
from lakescore.publish.spark_delta import target_state, write_options

TARGET_NAME = "main.flights.late_arrival_predictions"  # config/inference.yml
SCHEMA = (("flight_id", "long"), ("prediction", "long"), ("time_hour", "timestamp"))
REQUEST = PublishRequest("lakescore/score/prod/main.f.preds", "run-1", "main.f.preds", "main.f.src", "sid",
                         "incremental", "append", 5, 6, None, None, "m", 2, "sha", "cfg", SCHEMA, 10)


def test_append_carries_app_transaction_and_receipt():
    decision = Decision("append", "append", read_version=7, watermark_before=4, watermark_after=6)
    receipt = {"lakescore_receipt": 1, "run_id": "run-1"}
    mode, options = write_options(REQUEST, decision, receipt)
    assert mode == "append"
    assert options == {"txnAppId": "lakescore/score/prod/main.f.preds", "txnVersion": "8",
                       "userMetadata": '{"lakescore_receipt": 1, "run_id": "run-1"}'}


def test_period_replacement_uses_replace_where():
    request = replace(REQUEST, action="replace_period", period_start="2013-10-01T00:00:00Z",
                      period_end="2013-10-03T00:00:00Z")
    decision = Decision("replace_period", "", read_version=2)
    mode, options = write_options(request, decision, {}, Period("time_hour", request.period_start, request.period_end))
    assert mode == "overwrite"
    assert options["replaceWhere"] == ("`time_hour` >= '2013-10-01T00:00:00Z' AND "
                                       "`time_hour` < '2013-10-03T00:00:00Z'")
    _, dated = write_options(request, decision, {}, Period("day", request.period_start, request.period_end, "date"))
    assert dated["replaceWhere"] == "`day` >= '2013-10-01' AND `day` < '2013-10-03'"
    with pytest.raises(ValueError, match="needs period_column and bounds"):
        write_options(request, decision, {})


def test_migrate_and_rebuild_options():
    merge = write_options(REQUEST, Decision("append", "", 1, schema_mode="merge"), {})
    assert merge[1]["mergeSchema"] == "true" and "overwriteSchema" not in merge[1]
    rebuild = write_options(REQUEST, Decision("replace_table", "", 1, schema_mode="overwrite"), {})
    assert rebuild[0] == "overwrite" and rebuild[1]["overwriteSchema"] == "true"
    with pytest.raises(ValueError, match="writes nothing"):
        write_options(REQUEST, Decision("noop", "", 1), {})


def test_history_rows_give_the_same_state_and_decision_as_delta_rs():
    earlier = replace(REQUEST, run_id="run-0", source_version_from=None, source_version_to=4)
    state_then = target_state("main.f.preds", table_id="tid", schema=list(SCHEMA), num_files=0,
                              history=[{"version": 0, "timestamp": 0, "userMetadata": None}])
    first = decide(earlier, state_then)
    receipt = build_receipt(earlier, first, state_then)
    history = [{"version": 0, "timestamp": 1_700_000_000_000, "userMetadata": None},
               {"version": 1, "timestamp": 1_700_000_100_000, "userMetadata": json.dumps(receipt)},
               {"version": 2, "timestamp": 1_700_000_200_000, "userMetadata": "OPTIMIZE by hand"}]
    state = target_state("main.f.preds", table_id="tid", schema=list(SCHEMA), num_files=3, history=history)
    assert (state.version, state.has_rows, len(state.receipts)) == (2, True, 1)
    assert state.watermark.source_version == 4 and state.watermark.table_version == 1
    assert state.receipts[0]["committed_at"] == "2023-11-14T22:15:00+00:00"
    decision = decide(REQUEST, state)
    assert (decision.action, decision.read_version, decision.txn_version) == ("append", 2, 3)
    assert decide(earlier, state).message == "replay: no-op (run run-0 already published this request to main.f.preds v1)"


def test_receipts_table_rows_outlive_a_cleaned_history():
    earlier = replace(REQUEST, run_id="run-0", source_version_from=None, source_version_to=4)
    state_then = target_state("main.f.preds", table_id="tid", schema=list(SCHEMA), num_files=0,
                              history=[{"version": 0, "timestamp": 0, "userMetadata": None}])
    receipt = {**build_receipt(earlier, decide(earlier, state_then), state_then), "table_version": 1,
               "committed_at": "2023-11-14T22:15:00+00:00"}
    cleaned = [{"version": 9, "timestamp": 1_700_000_900_000, "userMetadata": None}]  # OPTIMIZE after log cleanup
    state = target_state("main.f.preds", table_id="tid", schema=list(SCHEMA), num_files=1, history=cleaned,
                         stored=[json.loads(json.dumps(receipt))])
    assert (state.version, state.watermark.source_version, state.watermark.table_version) == (9, 4, 1)
    assert decide(earlier, state).action == "noop"
    assert (decide(REQUEST, state).action, decide(REQUEST, state).txn_version) == ("append", 10)


@pytest.mark.spark
def test_null_periods_are_counted_on_spark_and_refused_before_any_write(spark, tmp_path):
    from datetime import date, datetime

    from lakescore.errors import NullPeriodError
    from lakescore.publish.spark_delta import period_nulls, publish

    stamp = datetime(2013, 10, 1, 5, tzinfo=UTC)
    frame = spark.createDataFrame([(1, stamp, date(2013, 10, 1)), (2, None, date(2013, 10, 2)), (3, stamp, None),
                                   (4, None, None)], "flight_id long, sched_ts timestamp, sched_day date")
    assert (period_nulls(frame, "sched_ts"), period_nulls(frame, "sched_day")) == (2, 2)
    snapshot = replace(REQUEST, mode="snapshot", action="replace_period", source_version_from=None)
    with pytest.raises(NullPeriodError, match=r"main.f.src v6 has 2 row\(s\) with a null publication.period_column 'sched_day'"):
        publish(str(tmp_path / "preds"), frame, snapshot, period_column="sched_day")
    assert not (tmp_path / "preds").exists()  # refused before creating it


@pytest.mark.spark
def test_repeated_keys_are_counted_by_a_spark_aggregate(spark):
    from lakescore.publish.spark_delta import repeated_keys

    new = spark.createDataFrame([(5, "a"), (1, "b"), (3, "a"), (9, "c"), (7, "a")], "k long, s string")
    assert repeated_keys(new, spark.createDataFrame([(2,), (4,)], "k long"), keys=["k"], table="t") is None
    assert repeated_keys(new, None, keys=["k"], table="t") is None
    held = repeated_keys(new, spark.createDataFrame([(9,), (9,), (3,), (8,), (1,), (7,)], "k long"), keys=["k"],
                         table="t")
    assert (held.count, held.examples, held.where) == (4, ({"k": 1}, {"k": 3}, {"k": 7}), "already in t")
    twice = repeated_keys(spark.createDataFrame([(7,), (7,), (8,), (2,), (2,), (2,)], "k long"),
                          spark.createDataFrame([(8,)], "k long"), keys=["k"], table="t")
    assert (twice.count, twice.examples, twice.where) == (2, ({"k": 2}, {"k": 7}), "within this run")
    assert repeated_keys(new, None, keys=["s", "k"], table="t") is None
    assert repeated_keys(new, None, keys=["s"], table="t").examples == ({"s": "a"},)


@pytest.mark.spark
def test_an_integer_key_is_checked_in_words_of_64_keys_with_the_totals_of_a_group_by(spark):
    from datetime import datetime

    from pyspark.sql import functions as F

    from lakescore.publish.spark_delta import _word_query, _word_totals, check_keys_within

    stamp = datetime(2013, 10, 1, 5, tzinfo=UTC)
    once = [-65, -64, -1, 0, 1, 62, 63, 64, 127, 128, 2**62, -2**63, 2**63 - 1, None]  # word edges, both signs
    cases = {
        "each key once, one null": (once, "long", 0),
        "63 and 64 set in one word and the next": ([63, 64, 64], "long", 1),
        "two nulls repeat the null key": ([1, None, None], "long", 1),
        "a key three times": ([5, 5, 5, 6], "int", 2),
        "a negative key twice": ([-1, -1, -2], "int", 1),
        "nothing": ([], "long", 0),
    }
    for name, (keys, kind, surplus) in cases.items():
        rows = spark.createDataFrame([(k, None if k == 0 else stamp) for k in keys], f"k {kind}, t timestamp")
        period = ["min(unix_micros(t)) AS _plo", "max(unix_micros(t)) AS _phi", "sum(CAST(t IS NULL AS BIGINT)) AS _pnull"]
        query = _word_query(rows, "k", period, ["sum(_pnull) AS nulls", "min(_plo) AS low", "max(_phi) AS high"])
        found = _word_totals(query.first().asDict())
        present = [k for k in keys if k is not None]
        assert found["twice"] == surplus, name
        assert (found["rows"] or 0, found["_null0"], found["_lo0"], found["_hi0"]) == (
            len(keys), keys.count(None) if keys else None, min(present, default=None), max(present, default=None)), name
        assert (found["nulls"] or 0) == keys.count(0), name
    rows = spark.createDataFrame([(k, None if k == 0 else stamp) for k in once], "k long, t timestamp")
    checked = check_keys_within(rows, ["k"], period_column="t")
    plain = check_keys_within(rows.withColumn("k", F.col("k").cast("string")), ["k"], period_column="t")  # grouped
    assert checked.repeated is None and checked.totals == {**plain.totals, "_lo0": -2**63, "_hi0": 2**63 - 1}
    repeated = check_keys_within(spark.createDataFrame([(7,), (7,), (8,), (2,), (2,), (2,)], "k long"), ["k"]).repeated
    assert (repeated.count, repeated.examples) == (2, ({"k": 2}, {"k": 7}))  # the keys named, as a group-by names them


@pytest.fixture
def spark_lake(lake, request):
    """The publication lake; its tests choose the writer per publication."""
    return lake.on("spark", request)


@pytest.fixture
def route_lake(lake, route_spark, request):
    """The publication lake on classic Spark and again on Spark Connect (see ``route_spark``)."""
    return lake.on("spark", request)


def app_id_of(lake) -> str:
    inf = lake.project.inference
    return app_id_for(inf.job_name, lake.runtime.target, inf.prediction_table)


@pytest.mark.spark
@pytest.mark.parametrize("one_pass", [False, True], ids=["staged", "one-pass"])
def test_a_write_whose_receipt_cannot_be_read_back_is_never_written_again(spark_lake, one_pass):
    from deltalake import DeltaTable

    from lakescore.errors import CdfRecoveryRequiredError, ReceiptUnreadableError
    from lakescore.publish.spark_delta import SparkDeltaWriter

    class DropsUserMetadata(SparkDeltaWriter):
        """An engine that keeps the app transaction but drops userMetadata (as some do on saveAsTable)."""

        def commit(self, staged, request, decision, receipt, period):
            super().commit(staged, request, decision, {"note": "dropped"}, period)

    lake = spark_lake
    lake.add_source(lake.flights.iloc[:200])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[200:260])
    run = lake.score()
    with pytest.raises(ReceiptUnreadableError, match=(
            r"the write of run \w+ \(app transaction lakescore/\S+ v1\) returned, the table records app transaction "
            r"v1, and no receipt of v1 can be read back")):
        lake.publish(run, writer=DropsUserMetadata, one_pass=one_pass)
    assert DeltaTable(lake.path).version() == 1 and len(lake.table()) == 260  # written once
    for engine in ("spark", "delta-rs"):  # neither writer writes it again
        with pytest.raises(CdfRecoveryRequiredError, match="records a lakescore commit at v1, but the receipt"):
            lake.publish(run, engine=engine)
    assert DeltaTable(lake.path).version() == 1 and len(lake.table()) == 260


@pytest.mark.spark
def test_each_writer_reads_the_receipts_the_other_wrote_in_the_log_and_the_receipts_table(spark_lake):
    from lakescore.publish.spark_delta import SparkDeltaWriter
    from lakescore.publish.state import receipts, stored_receipts

    lake = spark_lake
    lake.add_source(lake.flights.iloc[:300])
    first = lake.score()
    lake.publish(first, engine="delta-rs")
    lake.add_source(lake.flights.iloc[300:400])
    second = lake.score()
    by_spark = lake.publish(second, engine="spark")
    assert (by_spark.action, by_spark.table_version, by_spark.receipt["watermark_before"]) == ("append", 2, 0)
    lake.add_source(lake.flights.iloc[400:450])
    third = lake.score()
    assert (third.scope["source_version_from"], third.scope["source_version_to"]) == (2, 2)  # from Spark's receipt
    by_delta_rs = lake.publish(third, engine="delta-rs")
    assert (by_delta_rs.table_version, by_delta_rs.receipt["watermark_before"]) == (3, 1)
    expected = [(third.run_id, 3, "single_node"), (second.run_id, 2, "spark"), (first.run_id, 1, "single_node")]

    def seen_by_spark():
        state = SparkDeltaWriter(lake.path, lake.runtime.spark().range(0), table=TARGET_NAME, app_id="-").read()
        return [(r["run_id"], r["table_version"], r["batch_compute"]) for r in state.receipts]

    assert [(r["run_id"], r["table_version"], r["batch_compute"]) for r in receipts(lake.path)] == expected
    assert seen_by_spark() == expected
    assert sorted(r["table_version"] for r in stored_receipts(lake.path)) == [1, 2, 3]  # rows by both writers
    lake.maintain()  # the log no longer holds them: both read the receipts table
    assert [(r["run_id"], r["table_version"], r["batch_compute"]) for r in receipts(lake.path)] == expected
    assert seen_by_spark() == expected
    lake.assert_whole()


@pytest.mark.spark
def test_a_replay_across_writers_is_a_noop(route_lake):
    from deltalake import DeltaTable

    lake = route_lake
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score(), engine="delta-rs")
    lake.add_source(lake.flights.iloc[100:150])
    window = lake.score()
    assert lake.publish(window, engine="spark").table_version == 2
    again = lake.publish(window, engine="delta-rs")
    assert (again.action, again.table_version) == ("noop", 2)
    assert again.message == f"replay: no-op (run {window.run_id} already published this request to {TARGET_NAME} v2)"
    own = lake.publish(window, engine="spark")  # Spark reads back the receipt it wrote
    assert (own.action, own.table_version, own.message) == ("noop", 2, again.message)
    lake.add_source(lake.flights.iloc[150:170])
    later = lake.score()
    assert lake.publish(later, engine="delta-rs").table_version == 3
    replayed = lake.publish(later, engine="spark")
    assert (replayed.action, replayed.table_version, replayed.receipt["run_id"]) == ("noop", 3, later.run_id)
    assert DeltaTable(lake.path).version() == 3
    lake.assert_whole()


@pytest.mark.spark
def test_delta_rs_reads_what_spark_wrote_and_spark_reads_what_delta_rs_wrote(route_lake):
    from deltalake import DeltaTable

    lake = route_lake
    lake.add_source(lake.flights.iloc[:120])
    run = lake.score()
    assert lake.publish(run, engine="spark").table_version == 0  # created by its commit
    table = DeltaTable(lake.path)
    assert (table.protocol().min_reader_version, table.protocol().min_writer_version) == (1, 2)
    stored = lake.table().set_index("flight_id").sort_index()  # read by delta-rs
    scored = run.predictions.set_index("flight_id").sort_index()  # computed in pandas, before any writer
    assert stored.index.tolist() == scored.index.tolist()
    assert stored["prediction"].astype("float64").tolist() == scored["prediction"].astype("float64").tolist()
    assert (stored["scoring_status"] == scored["scoring_status"]).all()
    assert set(stored["run_id"]) == {run.run_id}
    assert table.transaction_version(app_id_of(lake)) == 0  # Spark's app transaction, read by delta-rs
    lake.add_source(lake.flights.iloc[120:150])
    assert lake.publish(lake.score(), engine="delta-rs").table_version == 1  # delta-rs appends to Spark's table
    both = lake.runtime.spark().read.format("delta").load(lake.path)
    assert both.count() == 150 and both.select("flight_id").distinct().count() == 150



@pytest.mark.spark
def test_a_repeated_key_is_refused_within_the_rows_and_against_a_path_table_whose_stats_prune_the_rest(spark,
                                                                                                      tmp_path):
    from deltalake import DeltaTable

    from lakescore.errors import PublishError
    from lakescore.publish.spark_delta import SparkDeltaWriter, publish

    path, schema = str(tmp_path / "preds"), (("flight_id", "long"), ("prediction", "long"))
    request = replace(REQUEST, schema=schema, source_version_from=None, source_version_to=1, rows=4)

    def rows(*keys):
        return spark.createDataFrame([(k, k % 2) for k in keys], "flight_id long, prediction long")

    def window(run, last, count):
        return replace(request, run_id=run, source_version_from=last, source_version_to=last, rows=count)

    with pytest.raises(PublishError, match=r"1 record key\(s\) within this run \(e.g. \[\{'flight_id': 4\}\]\)"):
        publish(path, rows(2, 4, 4, 6), request, keys=["flight_id"])
    assert publish(path, rows(2, 4, 6, 8), request, keys=["flight_id"])[0].action == "append"  # v0, created by the commit
    with pytest.raises(PublishError, match=(r"2 record key\(s\) already in main.f.preds "
                                            r"\(e.g. \[\{'flight_id': 4\}, \{'flight_id': 8\}\]\)")):
        publish(path, rows(3, 4, 8, 9), window("run-2", 2, 4), keys=["flight_id"])
    assert DeltaTable(path).version() == 0  # refused: nothing written
    writer = SparkDeltaWriter(path, rows(5, 7), table="main.f.preds", app_id=request.app_id)
    writer.read()
    assert writer.target.may_hold([("flight_id", ">=", 9), ("flight_id", "<=", 12)]) is False  # stats: 2..8
    assert writer.target.may_hold([("flight_id", ">=", 5), ("flight_id", "<=", 7)]) is True
    assert writer.repeated_keys(["flight_id"], against_table=True) is None  # within the bounds, none held
    assert publish(path, rows(5, 7), window("run-3", 2, 2), keys=["flight_id"])[0].action == "append"
    assert publish(path, rows(9, 10), window("run-4", 3, 2), keys=["flight_id"])[0].action == "append"
    table = spark.read.format("delta").load(path)
    assert sorted(r["flight_id"] for r in table.collect()) == [2, 4, 5, 6, 7, 8, 9, 10]


@pytest.mark.spark
def test_a_table_it_creates_by_path_or_by_name_keeps_statistics_on_the_columns_reads_filter_by(spark, tmp_path):
    """By path the commit of the rows creates the table with the property; by name the CREATE
    TABLE before it. A table that exists without it keeps statistics on every column."""
    import uuid
    from datetime import datetime

    from lakescore.publish.layout import STATS_COLUMNS
    from lakescore.publish.spark_delta import TableRef, publish

    ddl = ("flight_id long, prediction long, probability double, scoring_status string, t timestamp, "
           "model_version long, run_id string")
    schema = tuple(tuple(field.split(" ")) for field in ddl.split(", "))
    request = replace(REQUEST, schema=schema, source_version_from=None, source_version_to=1, rows=2)
    hour = datetime(2026, 12, 1, 5, tzinfo=UTC)

    def rows(*keys):
        return spark.createDataFrame([(k, k % 2, 0.5, "predicted", hour, 3, "run-1") for k in keys], ddl)

    path = str(tmp_path / "preds")
    assert publish(path, rows(1, 2), request, keys=["flight_id"], period_column="t")[1] == 0  # created by the commit
    assert DeltaTable(path).metadata().configuration == {STATS_COLUMNS: "flight_id,t,run_id,model_version"}
    assert stats_columns_in(path) == {"flight_id", "t", "run_id", "model_version"}

    theirs = str(tmp_path / "theirs")
    rows(1).limit(0).write.format("delta").save(theirs)  # created before lakescore's first run
    publish(theirs, rows(1, 2), request, keys=["flight_id"])
    assert DeltaTable(theirs).metadata().configuration == {}
    assert stats_columns_in(theirs) == {name for name, _ in schema}

    database = f"stats_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA spark_catalog.{database} LOCATION '{tmp_path / database}'")
    name = f"spark_catalog.{database}.preds"
    assert publish(TableRef(name), rows(1, 2), request, keys=["flight_id"])[1] == 1  # CREATE TABLE, then the rows
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    assert properties[STATS_COLUMNS] == "flight_id,run_id,model_version"
    assert stats_columns_in(str(tmp_path / database / "preds")) == {"flight_id", "run_id", "model_version"}


@pytest.mark.spark
def test_the_key_check_reads_the_source_keys_before_the_rows_are_computed_once_for_every_attempt(spark, tmp_path):
    """On the one pass the keys are checked on the source read, never on the UDF's output: rows
    whose computation fails (as a UDF would, were it run) are refused for a repeated source key,
    within the run and against the table, without being computed."""
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    from lakescore.errors import PublishError
    from lakescore.publish.spark_delta import SparkDeltaWriter, check_keys_within, publish

    path, schema = str(tmp_path / "preds"), (("flight_id", "long"), ("prediction", "long"))
    request = replace(REQUEST, schema=schema, source_version_from=None, source_version_to=1, rows=4)
    never = F.udf(lambda k: 1 // 0, "long")  # computing a row fails: the check must not compute one

    def source(*keys):
        return spark.createDataFrame([(k,) for k in keys], "flight_id long")

    def scored(rows):
        return rows.select("flight_id", never("flight_id").alias("prediction")).where(F.col("prediction") >= 0)

    new = source(2, 4, 4, 6)
    with pytest.raises(PublishError, match=r"1 record key\(s\) within this run \(e.g. \[\{'flight_id': 4\}\]\)"):
        publish(path, scored(new), request, keys=["flight_id"], key_source=new)
    first = source(2, 4, 6, 8)
    assert publish(path, first.withColumn("prediction", F.col("flight_id") % 2), request, keys=["flight_id"],
                   key_source=first)[0].action == "append"  # v0, created by the commit
    again = source(3, 4, 8, 9)
    with pytest.raises(PublishError, match=r"2 record key\(s\) already in main.f.preds"):
        publish(path, scored(again), replace(request, run_id="run-2", source_version_from=2, source_version_to=2),
                keys=["flight_id"], key_source=again)
    assert DeltaTable(path).version() == 0  # refused: nothing written
    checked = check_keys_within(source(5, 7, 7), ["flight_id"])
    assert (checked.totals["rows"], checked.repeated.count) == (3, 1)
    writer = SparkDeltaWriter(path, scored(source(1)), table="main.f.preds", app_id=request.app_id, checked=checked)
    writer.read()
    assert writer.repeated_keys(["flight_id"], against_table=True).examples == ({"flight_id": 7},)  # as checked


@pytest.mark.spark
def test_repeated_keys_against_a_table_match_null_keys_and_filter_only_exact_bound_types(spark):
    from lakescore.publish.spark_delta import repeated_keys

    new = spark.createDataFrame([(None, "a"), (5, "b")], "k long, s string")
    held = repeated_keys(new, spark.createDataFrame([(None,), (1,)], "k long"), keys=["k"], table="t")
    assert (held.count, held.examples, held.where) == (1, ({"k": None},), "already in t")
    assert repeated_keys(new, spark.createDataFrame([(4,), (6,)], "k long"), keys=["k"], table="t") is None
    stamps = spark.createDataFrame([("2013-10-01 05:00:00",), ("2013-10-02 05:00:00",)], "t string") \
        .selectExpr("CAST(t AS timestamp) AS t")  # a timestamp key is not filtered on; the join decides
    found = repeated_keys(stamps, stamps.where("t > '2013-10-01 12:00:00'"), keys=["t"], table="x")
    assert (found.count, found.where) == (1, "already in x")
    mixed = spark.createDataFrame([(5,)], "k int")  # a table whose key type differs: cast, not filtered
    assert repeated_keys(mixed, spark.createDataFrame([(5,)], "k long"), keys=["k"], table="t").count == 1


@pytest.mark.spark
def test_a_path_tables_state_read_with_delta_rs_is_the_state_spark_sql_reads(spark_lake):
    from lakescore.publish.spark_delta import SparkDeltaTarget
    from lakescore.publish.state import receipts_path, stored_receipts

    lake = spark_lake
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score(), engine="spark")
    lake.add_source(lake.flights.iloc[100:130])
    lake.publish(lake.score(), engine="spark")
    by_rs, by_sql = (SparkDeltaTarget(lake.path, lake.runtime.spark(), table=TARGET_NAME, app_id=app_id_of(lake),
                                      state_engine=engine) for engine in ("auto", "spark"))
    fast, slow = by_rs.read(), by_sql.read()
    def timeless(receipts):  # committed_at: delta-rs reads commitInfo's timestamp, Spark the file's time
        return [{k: v for k, v in r.items() if k != "committed_at"} for r in receipts]

    assert replace(fast, receipts=()) == replace(slow, receipts=()) and timeless(fast.receipts) == timeless(slow.receipts)
    assert (fast.version, fast.app_txn, fast.has_rows, [r["table_version"] for r in fast.receipts]) == (1, 1, True, [1, 0])
    assert (by_rs.version, by_rs.has_rows) == (by_sql.version, by_sql.has_rows) == (1, True)
    assert timeless(by_rs.receipts()) == timeless(by_sql.receipts()) == timeless(fast.receipts)
    assert by_sql.may_hold is None and by_rs.may_hold is not None
    rebuilt = [{**r, "table_version": 7} for r in fast.receipts[:1]]  # a receipt the table lacks
    assert by_sql.keep_receipts(rebuilt) == 1  # appended by Spark, read back by delta-rs
    assert sorted(r["table_version"] for r in stored_receipts(lake.path)) == [0, 1, 7]
    assert by_rs.keep_receipts(rebuilt) == 0
    writers = {str(h.get("engineInfo")).replace(":", "/").split("/")[0]
               for h in DeltaTable(receipts_path(lake.path)).history() if h.get("operation") in ("WRITE", "MERGE")}
    assert writers == {"Apache-Spark", "delta-rs"}  # rows by Spark SQL's keep_receipts (a MERGE) and by delta-rs


@pytest.mark.spark
def test_spark_sql_reads_the_commits_after_the_newest_receipt_from_the_log_or_else_from_the_history(spark_lake,
                                                                                                    monkeypatch):
    from lakescore.errors import PredictionsRewrittenError
    from lakescore.publish.plan import LaterCommit, check_watermark_holds
    from lakescore.publish.spark_delta import SparkDeltaTarget
    from lakescore.publish.state import DeltaRsTarget

    lake = spark_lake
    lake.add_source(lake.flights.iloc[:30])
    lake.publish(lake.score(), engine="delta-rs")
    lake.add_source(lake.flights.iloc[30:40])
    lake.publish(lake.score(), engine="delta-rs")  # v2: the newest receipt, a second file
    DeltaTable(lake.path).optimize.compact()  # v3: both files rewritten as one, dataChange=false
    spark = lake.runtime.spark()
    spark.sql(f"DELETE FROM delta.`{lake.path}` WHERE flight_id = {lake.flights['flight_id'].iloc[35]}")  # v4
    by_sql = SparkDeltaTarget(lake.path, spark, table=TARGET_NAME, app_id=app_id_of(lake), state_engine="spark")
    expected = (LaterCommit(3, "OPTIMIZE", 0), LaterCommit(4, "DELETE", 1))
    assert by_sql.read().later_commits == expected
    assert DeltaRsTarget(lake.path, table=TARGET_NAME, app_id=app_id_of(lake)).read().later_commits == expected

    def refused(*args):  # a Unity Catalog managed table's storage, on a standard-access cluster
        raise RuntimeError("[INSUFFICIENT_PERMISSIONS] User does not have permission SELECT on any file.")

    monkeypatch.setattr("lakescore.runtime.delta_log.later_commit_facts", refused)
    state = by_sql.read()
    assert state.later_commits == (LaterCommit(3, "OPTIMIZE", None), LaterCommit(4, "DELETE", None))
    with pytest.raises(PredictionsRewrittenError, match=r"commit v4 \(DELETE\) can remove rows \(its log actions "
                                                        r"could not be read\) after lakescore's last receipt \(v2, run"):
        check_watermark_holds(state)


@pytest.mark.spark
def test_two_publishers_keeping_the_same_receipt_by_name_keep_it_once(spark):
    """The receipts table of a table addressed by name (Spark SQL, as on a workspace): two
    back-fills of the same receipts at once leave one row per receipt."""
    import threading
    import uuid

    from lakescore.publish.spark_delta import SparkDeltaTarget, TableRef

    schema = f"receipts_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA spark_catalog.{schema}")
    name = f"spark_catalog.{schema}.predictions"
    found = [{"target_table_id": "t-1", "table_version": v, "run_id": f"run-{v}",
              "committed_at": "2026-12-01T00:00:00+00:00", "lakescore_receipt": 1} for v in (1, 2)]
    for batch in (found[:1], found):
        gate, added = threading.Barrier(2, timeout=120), []

        def one(batch=batch, gate=gate, added=added):
            target = SparkDeltaTarget(TableRef(name), spark, table=name)
            target.stored()
            gate.wait()
            added.append(target.keep_receipts(batch))

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(added) == [0, 1]
    rows = spark.sql(f"SELECT table_version FROM {name}_lakescore_receipts").collect()
    assert sorted(r["table_version"] for r in rows) == [1, 2]


@pytest.mark.spark
def test_a_create_that_meets_another_creates_files_is_a_race_to_retry(spark, tmp_path):
    """Two publishers creating one table: the slower finds the other's data files written and its
    log not yet (by name: Delta says the location is not empty), or its log landed after it looked
    (by path: the path exists). That is a race, tried again until the other's table is there, not
    an error that fails the publication."""
    import uuid

    from lakescore.runtime.appends import spark_raced

    schema = f"create_race_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA spark_catalog.{schema} LOCATION '{tmp_path / schema}'")
    (tmp_path / schema / "t").mkdir(parents=True)
    (tmp_path / schema / "t" / "part-00000-theirs.parquet").write_bytes(b"written by the other publisher")
    rows = spark.createDataFrame([(1, "a")], "k long, v string")
    with pytest.raises(Exception, match="DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION") as by_name:
        rows.write.format("delta").mode("error").saveAsTable(f"spark_catalog.{schema}.t")
    path = str(tmp_path / "by_path")
    rows.write.format("delta").save(path)
    with pytest.raises(Exception, match="DELTA_PATH_EXISTS") as by_path:
        rows.write.format("delta").mode("error").save(path)
    assert spark_raced(by_name.value) and spark_raced(by_path.value)


@pytest.mark.spark
def test_the_key_check_is_built_on_the_calling_thread_and_runs_in_a_few_round_trips(spark, monkeypatch):
    """The one pass runs the key check on a thread beside the driver's model set-up: each round trip
    to the JVM there waits for Python's lock, so the query is built by the caller, as SQL text, and
    the returned function only runs it."""
    import threading
    from datetime import datetime

    import py4j.clientserver

    from lakescore.publish.spark_delta import key_check

    stamp = datetime(2013, 10, 1, 5, tzinfo=UTC)
    rows = spark.createDataFrame([(k, stamp) for k in range(200)], "k long, t timestamp")
    sent = []
    send = py4j.clientserver.ClientServerConnection.send_command
    this_thread = threading.get_ident()

    def counted(connection, command):
        if threading.get_ident() == this_thread:  # not py4j's own thread, which frees JVM objects
            sent.append(command)
        return send(connection, command)

    check = key_check(rows, ["k"], period_column="t")
    monkeypatch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counted)
    found = check()
    monkeypatch.undo()
    assert found.repeated is None and found.totals["rows"] == 200 and found.totals["twice"] == 0
    assert len(sent) <= 15, f"{len(sent)} round trips to the JVM to run a built key check"
