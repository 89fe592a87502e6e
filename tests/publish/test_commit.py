"""The one commit loop, on both writers (delta-rs and Spark Delta) and real Delta tables: modes,
replay, conflicts, stale plans, model and schema changes, key checks. Every test that takes
``lake`` runs once per writer, and again on the one pass of ``score --publish`` unless it tests a
decision the one pass does not change (``engines.WRITERS``)."""

from __future__ import annotations

import pandas as pd
import pytest
from deltalake import DeltaTable, write_deltalake
from engines import WRITERS  # tests/publish/engines.py

from lakescore.errors import (
    ModelChangeError,
    PublishConflictError,
    PublishError,
    ReceiptUnreadableError,
    SchemaChangeError,
    SourceChangedError,
    StalePlanError,
)
from lakescore.publish.commit import Period, RepeatedKeys, check_keys, landed
from lakescore.publish.plan import Decision, PublishRequest, TargetState

SOURCE, TARGET = "main.flights.flights_incoming", "main.flights.late_arrival_predictions"  # config/inference.yml
REQUEST = PublishRequest("app", "run-2", "main.f.preds", "main.f.src", "sid", "incremental", "append", 5, 6, None,
                         None, "m", 2, "sha", "cfg", (("flight_id", "long"),), 10)


@pytest.fixture
def lake(lake, engine, request):
    """The publication lake, publishing with each writer in turn."""
    return lake.on(engine, request)


def test_check_keys_names_the_count_examples_and_the_fix():
    check_keys(None, table="t")
    with pytest.raises(PublishError, match=(r"^1 record key\(s\) already in t \(e.g. \[\{'flight_id': 2\}\]\); "
                                            r"publishing would store a row twice.*--recover-predictions")):
        check_keys(RepeatedKeys(1, ({"flight_id": 2},), "already in t"), table="t")
    with pytest.raises(PublishError, match=r"^3 record key\(s\) within this run \(e.g. \[\{'k': 1\}, \{'k': 4\}\]\)"):
        check_keys(RepeatedKeys(3, ({"k": 1}, {"k": 4}), "within this run"), table="t")


def test_period_predicate_compares_dates_on_their_day():
    period = Period("time_hour", "2013-10-01T00:00:00Z", "2013-10-03T00:00:00Z")
    assert period.predicate() == "\"time_hour\" >= '2013-10-01T00:00:00Z' AND \"time_hour\" < '2013-10-03T00:00:00Z'"
    assert Period("day", period.start, period.end, "date").predicate("`") == (
        "`day` >= '2013-10-01' AND `day` < '2013-10-03'")


def _after(*receipts: dict, app_txn: int | None) -> TargetState:
    return TargetState("main.f.preds", True, 8, "tid", (), True, receipts, "app", app_txn)


def test_landed_tells_our_commit_from_anothers_and_refuses_a_missing_receipt():
    decision = Decision("append", "", read_version=7)  # txn_version 8
    ours = {"app_id": "app", "target_table_id": "tid", "txn_version": 8, "run_id": "run-2",
            "request_digest": REQUEST.digest, "table_version": 8}
    theirs = {**ours, "run_id": "run-1", "request_digest": "other"}
    assert landed(_after(ours, app_txn=8), REQUEST, decision) == ours
    assert landed(_after(theirs, app_txn=9), REQUEST, decision) is None  # plan again
    with pytest.raises(ReceiptUnreadableError, match=(
            r"main.f.preds: the write of run run-2 \(app transaction app v8\) returned, the table records app "
            r"transaction v8, and no receipt of v8 can be read back.*It is not written again")) as err:
        landed(_after({**theirs, "txn_version": 5}, app_txn=8), REQUEST, decision)
    assert err.value.code == "receipt_unreadable"
    with pytest.raises(ReceiptUnreadableError, match="the table records no app transaction"):
        landed(_after(app_txn=None), REQUEST, decision)
    later = {**ours, "table_version": 9}  # a maintenance commit landed between the read and the write
    assert landed(_after(later, app_txn=8), REQUEST, decision) == later


def test_incremental_appends_inserted_rows_once_and_replays_are_noops(lake):
    lake.add_source(lake.flights.iloc[:300])
    first = lake.score()
    assert lake.publish(first).table_version == lake.v(1)
    lake.add_source(lake.flights.iloc[300:400])
    lake.add_source(lake.flights.iloc[400:450])
    window = lake.score()
    assert len(window.predictions) == 150  # v1 and v2 inserted rows only
    done = lake.publish(window)
    assert (done.action, done.table_version) == ("append", lake.v(2))
    assert (done.receipt["source_version_from"], done.receipt["source_version_to"]) == (1, 2)
    again = lake.publish(window)
    assert again.action == "noop" and again.message.startswith("replay: no-op (run ")
    assert again.table_version == lake.v(2) and again.receipt["run_id"] == window.run_id
    idle = lake.score()
    assert idle.scope["action"] == "noop" and "no new versions" in lake.publish(idle).message
    lake.assert_whole()
    assert DeltaTable(lake.path).version() == lake.v(2)


@pytest.mark.parametrize("engine", WRITERS)
def test_same_run_id_with_a_different_request_is_a_conflict(lake):
    lake.add_source(lake.flights.iloc[:100])
    run = lake.score()
    lake.publish(run)
    lake.add_source(lake.flights.iloc[100:150])
    later = lake.score()
    reused = type(later)(run.run_id, later.plan, later.batch_compute, later.env_manager, later.batch_rows,
                         later.predictions, later.scope)
    with pytest.raises(PublishConflictError, match=f"run {run.run_id} was already published"):
        lake.publish(reused)
    assert len(lake.table()) == 100


def test_stale_window_fails_and_covered_window_is_a_noop(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[100:150])
    early = lake.score()  # window v1..v1
    lake.add_source(lake.flights.iloc[150:200])
    late = lake.score()  # window v1..v2, published first
    lake.publish(late)
    covered = lake.publish(early)
    assert covered.action == "noop" and "already holds" in covered.message
    lake.add_source(lake.flights.iloc[200:230])
    partial = lake.score()  # window v3..v3
    lake.add_source(lake.flights.iloc[230:260])
    stale = lake.score()  # window v3..v4, planned while the watermark was v2
    lake.publish(partial)
    with pytest.raises(StalePlanError, match=r"up to v3, and this run read v3..v4"):
        lake.publish(stale)
    assert len(lake.table()) == 230
    lake.publish(lake.score())  # re-planned: window v4..v4
    lake.assert_whole()


@pytest.mark.parametrize("engine", WRITERS)
def test_model_change_incremental_append_keeps_old_versions(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score(model_version=1))
    lake.add_source(lake.flights.iloc[100:160])
    lake.publish(lake.score(model_version=2))
    table = lake.assert_whole()
    counts = table.groupby("model_version").size().to_dict()
    assert counts == {1: 100, 2: 60}
    assert set(table.loc[table["flight_id"].isin(lake.flights["flight_id"].iloc[:100]), "model_version"]) == {1}


@pytest.mark.parametrize("engine", WRITERS)
def test_model_change_reject_and_full_rebuild(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score(model_version=1))
    lake.add_source(lake.flights.iloc[100:160])
    lake.configure(model_change_mode="reject")
    with pytest.raises(ModelChangeError, match="model_change_mode is 'reject'"):
        lake.score(model_version=2)
    lake.configure(model_change_mode="full_rebuild")
    rebuilt = lake.publish(lake.score(model_version=2))
    assert rebuilt.action == "replace_table"
    table = lake.assert_whole()
    assert set(table["model_version"]) == {2}
    assert DeltaTable(lake.path).version() == lake.v(2)  # one commit replaced the table


@pytest.mark.parametrize("engine", WRITERS)
def test_schema_change_is_refused_until_migrate(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[100:130])
    wider = lake.score(model_version=2, extra="segment")
    with pytest.raises(SchemaChangeError, match=r"new: \['segment'\].*lakescore publish --migrate"):
        lake.publish(wider)
    assert len(lake.table()) == 100
    assert lake.publish(wider, migrate=True).receipt["schema_mode"] == "merge"
    table = lake.assert_whole()
    assert table["segment"].isna().sum() == 100 and (table["segment"] == "x").sum() == 30


@pytest.mark.parametrize("engine", WRITERS)
def test_update_in_window_is_rejected_naming_versions_or_rebuilt(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[100:120])
    DeltaTable(str(lake.runtime.table_path(SOURCE))).delete("flight_id = " + str(int(lake.flights["flight_id"][0])))
    with pytest.raises(SourceChangedError, match=r"window v1..v2 \(v2: delete\)"):
        lake.score()
    lake.configure(source_change_policy="rebuild_on_change")
    run = lake.score()
    assert lake.publish(run).action == "replace_table"
    lake.assert_whole()
    assert len(lake.table()) == 119


@pytest.mark.parametrize("engine", WRITERS)
def test_empty_window_publishes_nothing_unless_allowed(lake):
    lake.add_source(lake.flights.iloc[:50])
    lake.publish(lake.score())
    source = DeltaTable(str(lake.runtime.table_path(SOURCE)))
    source.alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days"})  # no inserted rows
    run = lake.score()
    assert run.scope["reason"].startswith("no-op: no inserted rows in")
    assert lake.publish(run).action == "noop" and DeltaTable(lake.path).version() == lake.v(1)
    lake.configure(allow_empty=True)
    empty = lake.publish(lake.score())
    assert (empty.action, empty.table_version, empty.receipt["watermark_after"]) == ("append", lake.v(2), 1)
    lake.assert_whole()


def test_snapshot_replaces_the_period_in_one_commit(lake):
    lake.configure(mode="snapshot", period_column="time_hour")
    flights = lake.flights.sort_values("time_hour").reset_index(drop=True)
    quarter = flights[flights["time_hour"] >= pd.Timestamp("2013-10-01", tz="UTC")].reset_index(drop=True)
    lake.add_source(quarter)
    lake.publish(lake.score())
    assert len(lake.table()) == len(quarter)
    # the next snapshot holds the first half of October, less every fifth flight
    half = quarter[quarter["time_hour"] < pd.Timestamp("2013-10-16", tz="UTC")]
    half = half[half.index % 5 != 0].reset_index(drop=True)
    write_deltalake(str(lake.runtime.table_path(SOURCE)), half, mode="overwrite")
    run = lake.score(model_version=2)
    done = lake.publish(run)
    assert (done.action, done.table_version) == ("replace_period", lake.v(2))
    end = half["time_hour"].max().floor("D") + pd.Timedelta(days=1)
    assert (done.receipt["period_start"], done.receipt["period_end"]) == (
        "2013-10-01T00:00:00Z", end.strftime("%Y-%m-%dT%H:%M:%SZ"))
    kept = quarter[quarter["time_hour"] >= end]
    table = lake.assert_whole(pd.concat([half["flight_id"], kept["flight_id"]]))
    versions = table.set_index("flight_id")["model_version"]
    assert set(versions[half["flight_id"]]) == {2} and set(versions[kept["flight_id"]]) == {1}
    assert lake.publish(run).action == "noop"


@pytest.mark.parametrize("engine", WRITERS)
def test_empty_snapshot_never_wipes_a_period(lake):
    lake.configure(mode="snapshot", period_column="time_hour")
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    write_deltalake(str(lake.runtime.table_path(SOURCE)), lake.flights.iloc[:0], mode="overwrite")
    result = lake.publish(lake.score())
    assert result.action == "noop" and "gave no rows" in result.message
    assert len(lake.table()) == 100


def test_a_first_publication_whose_rows_repeat_a_key_is_refused_before_the_table_is_created(lake):
    """The rows' own keys are checked before a missing table is created: a refused first
    publication leaves no table behind."""
    from pathlib import Path

    lake.add_source(pd.concat([lake.flights.iloc[:40], lake.flights.iloc[10:12]]))  # two keys twice
    with pytest.raises(PublishError, match=r"^2 record key\(s\) within this run"):
        lake.publish(lake.score())
    assert not Path(lake.path).exists()


def test_a_source_that_reinserts_published_rows_is_refused_and_the_table_is_unchanged(lake):
    from lakescore.errors import PublishError

    lake.add_source(lake.flights.iloc[:200])
    assert lake.publish(lake.score()).table_version == lake.v(1)
    lake.add_source(lake.flights.iloc[150:210])  # 50 keys published already, 10 new
    with pytest.raises(PublishError, match=r"50 record key\(s\) already in main.flights.late_arrival_predictions"):
        lake.publish(lake.score())
    assert DeltaTable(lake.path).version() == lake.v(1)
    stored = lake.table()
    assert len(stored) == 200 and stored["flight_id"].is_unique
