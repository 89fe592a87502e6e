"""The Databricks writer's option building and metadata reading (it cannot run here: no Delta jars)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from lakescore.publish.plan import Decision, PublishRequest, build_receipt, decide
from lakescore.publish.spark_delta import target_state, write_options

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
    mode, options = write_options(request, decision, {}, period_column="time_hour")
    assert mode == "overwrite"
    assert options["replaceWhere"] == ("`time_hour` >= '2013-10-01T00:00:00Z' AND "
                                       "`time_hour` < '2013-10-03T00:00:00Z'")
    _, dated = write_options(request, decision, {}, period_column="day", period_type="date")
    assert dated["replaceWhere"] == "`day` >= '2013-10-01' AND `day` < '2013-10-03'"


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
def test_null_periods_are_counted_on_spark_and_refused_before_any_write(spark):
    from datetime import date, datetime, timezone

    from lakescore.errors import NullPeriodError
    from lakescore.publish.spark_delta import period_nulls, publish

    stamp = datetime(2013, 10, 1, 5, tzinfo=timezone.utc)
    frame = spark.createDataFrame([(1, stamp, date(2013, 10, 1)), (2, None, date(2013, 10, 2)), (3, stamp, None),
                                   (4, None, None)], "flight_id long, sched_ts timestamp, sched_day date")
    assert (period_nulls(frame, "sched_ts"), period_nulls(frame, "sched_day")) == (2, 2)
    snapshot = replace(REQUEST, mode="snapshot", action="replace_period", source_version_from=None,
                       prediction_table="preds_null_period")  # one-part: the local catalog has no UC names
    with pytest.raises(NullPeriodError, match=r"main.f.src v6 has 2 row\(s\) with a null publication.period_column 'sched_day'"):
        publish(spark, frame, snapshot, period_column="sched_day")
    assert not spark.catalog.tableExists("preds_null_period")  # refused before creating it
