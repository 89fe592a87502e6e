"""Table metadata on real Delta tables: receipts outlive the log they were committed in, and a
receipt is no watermark once a later commit removed rows (RESTORE, DELETE, an overwrite), with
each writer; OPTIMIZE and VACUUM keep it one."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from engines import ENGINES  # tests/publish/engines.py

from lakescore.cli import main
from lakescore.errors import PredictionsRewrittenError
from lakescore.publish.plan import LaterCommit
from lakescore.publish.state import (
    history_receipts,
    keep_receipts,
    later_commits,
    receipts,
    receipts_path,
    stored_receipts,
)

TARGET = "main.flights.late_arrival_predictions"  # config/inference.yml


def test_watermark_and_receipts_survive_optimize_checkpoint_log_cleanup_and_vacuum(lake, capsys):
    lake.add_source(lake.flights.iloc[:100])
    first = lake.score()
    lake.publish(first)
    lake.add_source(lake.flights.iloc[100:150])
    second = lake.score()
    assert lake.publish(second).table_version == 2
    lake.maintain()
    table = DeltaTable(lake.path)
    assert history_receipts(table.history()) == []  # the log no longer holds a single publication
    app_id = receipts(lake.path)[0]["app_id"]
    assert table.transaction_version(app_id) == 2  # the checkpoint kept the app transaction
    lake.add_source(lake.flights.iloc[150:180])
    third = lake.score()
    assert (third.scope["source_version_from"], third.scope["source_version_to"]) == (2, 2)
    assert len(third.predictions) == 30
    done = lake.publish(third)
    assert done.action == "append" and done.receipt["watermark_before"] == 1
    stored = lake.assert_whole()
    assert len(stored) == 180
    again = lake.publish(third)
    assert again.action == "noop" and again.message.startswith(f"replay: no-op (run {third.run_id} already")
    assert lake.score().scope["action"] == "noop"
    assert DeltaTable(lake.path).version() == done.table_version
    assert main(["receipts", TARGET, "--home", str(lake.runtime.home)]) == 0
    listed = json.loads(capsys.readouterr().out)["receipts"]
    assert [(r["run_id"], r["rows_in"], r["source_version_from"], r["source_version_to"]) for r in listed] == [
        (third.run_id, 30, 2, 2), (second.run_id, 50, 1, 1), (first.run_id, 100, None, 0)]
    assert [r["table_version"] for r in listed][1:] == [2, 1]


def test_keep_receipts_appends_only_the_missing_ones_and_round_trips_them(lake):
    lake.add_source(lake.flights.iloc[:40])
    lake.publish(lake.score())
    (kept,) = stored_receipts(lake.path)
    logged = history_receipts(DeltaTable(lake.path).history())
    assert logged == [kept]  # the row holds the receipt exactly, committed_at included
    assert keep_receipts(lake.path, logged) == 0
    earlier = {**kept, "target_table_id": "an-earlier-table", "table_version": 7, "committed_at": "2020-01-01T00:00:00+00:00"}
    assert keep_receipts(lake.path, [earlier, kept, earlier]) == 1
    assert DeltaTable(receipts_path(lake.path)).version() == 1  # one commit per receipt batch
    assert [(r["target_table_id"], r["table_version"]) for r in receipts(lake.path)] == [
        (kept["target_table_id"], 1), ("an-earlier-table", 7)]


def test_a_change_feed_window_reads_integers_exactly_beside_a_null(tmp_path):
    import pandas as pd

    from lakescore.publish.state import split_changes
    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(tmp_path)
    name = "main.s.source"
    runtime.write_table(name, pd.DataFrame({"k": pd.array([1], dtype="Int64"), "v": pd.array([1], dtype="Int64")}),
                        configuration={"delta.enableChangeDataFeed": "true"})
    runtime.write_table(name, pd.DataFrame({"k": pd.array([2, 3], dtype="Int64"),
                                            "v": pd.array([2**53 + 1, None], dtype="Int64")}), mode="append")
    rows, changes = split_changes(runtime.read_changes(name, first=1, last=1, columns=["k", "v"]), ["k", "v"])
    assert changes == {}
    assert str(rows["v"].dtype) == "Int64"
    assert rows.sort_values("k")["v"].tolist() == [9007199254740993, pd.NA]


# --- a receipt whose rows the table no longer holds is no watermark ------------------------------

def _outside(engine: str, lake, operation: str, dropped: list[int]) -> None:
    """What someone else does to the prediction table, with ``engine``'s own API: RESTORE to v1,
    DELETE the ``dropped`` flights, or overwrite it with every other row."""
    where = f"flight_id IN ({', '.join(map(str, dropped))})"
    if engine == "delta-rs":
        from deltalake import write_deltalake

        table = DeltaTable(lake.path)
        if operation == "RESTORE":
            table.restore(1)
        elif operation == "DELETE":
            table.delete(where)
        else:
            rows = table.to_pyarrow_table()
            write_deltalake(lake.path, rows.filter(pc.invert(pc.is_in(rows["flight_id"], pa.array(dropped)))),
                            mode="overwrite")
        return
    spark = lake.runtime.spark()
    if operation == "RESTORE":
        spark.sql(f"RESTORE TABLE delta.`{lake.path}` TO VERSION AS OF {lake.v(1)}")
    elif operation == "DELETE":
        spark.sql(f"DELETE FROM delta.`{lake.path}` WHERE {where}")
    else:
        kept = spark.read.format("delta").load(lake.path).where(f"NOT ({where})").localCheckpoint()
        kept.write.format("delta").mode("overwrite").save(lake.path)


def _removals() -> list:
    """(engine, operation) pairs: each writer meets each outside operation made with its own API
    (WRITE: an overwrite), since what tells a removal is the table's history as that API records
    it; the one pass, whose own part is the recovery in one pass and the incremental append after
    it, meets one of them."""
    pairs = []
    for engine in ENGINES:
        name, marks = (engine, ()) if isinstance(engine, str) else (engine.values[0], engine.marks)
        for operation in ("DELETE",) if name == "spark-one-pass" else ("RESTORE", "DELETE", "WRITE"):
            pairs.append(pytest.param(name, operation, marks=marks, id=f"{name}-{operation}"))
    return pairs


@pytest.mark.parametrize(("engine", "operation"), _removals())
def test_rows_removed_after_the_last_receipt_are_refused_then_recovered_exactly_once(lake, engine, request,
                                                                                      operation):
    lake.on(engine, request)
    lake.add_source(lake.flights.iloc[:30])
    lake.publish(lake.score())  # table v1 (Spark: v0): 30 rows
    lake.add_source(lake.flights.iloc[30:50])
    second = lake.score()
    assert lake.publish(second).table_version == lake.v(2)  # +20 rows, app transaction as the version
    _outside(engine, lake, operation, dropped=lake.flights["flight_id"].iloc[30:50].tolist())  # v3
    assert len(lake.table()) == 30
    assert DeltaTable(lake.path).transaction_version(receipts(lake.path)[0]["app_id"]) == lake.v(2)  # kept by all three
    assert [r["table_version"] for r in receipts(lake.path)] == [lake.v(2), lake.v(1)]  # the second's receipt in log and receipts table

    fix = "Rebuild the table from a pinned snapshot in one commit: lakescore publish --recover-predictions"
    with pytest.raises(PredictionsRewrittenError) as err:
        lake.score()  # was: "replay: no-op (... watermark in ... v2)"
    assert err.value.code == "predictions_rewritten" and fix in str(err.value)
    assert str(err.value).startswith(f"{TARGET}: commit v{lake.v(3)} ({operation}) removed ")
    assert f"after lakescore's last receipt (v{lake.v(2)}, run " in str(err.value)
    with pytest.raises(PredictionsRewrittenError, match=rf"commit v{lake.v(3)}"):
        lake.publish(second)  # a retried publish of v2's request is no replay either
    lake.add_source(lake.flights.iloc[50:60])  # the source grows: still refused, never a partial append
    with pytest.raises(PredictionsRewrittenError, match=rf"commit v{lake.v(3)}"):
        lake.score()
    assert DeltaTable(lake.path).version() == lake.v(3) and len(lake.table()) == 30  # nothing written

    recovery = lake.score(recover=True)
    recovered = lake.publish(recovery)  # the fix the error names
    assert (recovered.action, recovered.table_version) == ("replace_table", lake.v(4))
    assert len(lake.assert_whole()) == 60  # every source row once: the 20 removed and the 10 new included
    assert lake.publish(recovery).action == "noop"  # the recovery itself replays as a no-op
    assert lake.score().scope["action"] == "noop"
    lake.add_source(lake.flights.iloc[60:70])
    assert lake.publish(lake.score()).receipt["watermark_before"] == 2  # incremental again
    assert len(lake.assert_whole()) == 70


def test_optimize_and_vacuum_after_the_last_receipt_keep_it_a_watermark(lake, engine, request):
    lake.on(engine, request)
    lake.add_source(lake.flights.iloc[:30])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[30:50])
    second = lake.score()
    lake.publish(second)  # v2, two data files
    if engine == "delta-rs":
        DeltaTable(lake.path).optimize.compact()
        DeltaTable(lake.path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    else:
        spark = lake.runtime.spark()
        spark.sql(f"OPTIMIZE delta.`{lake.path}`")
        spark.sql(f"ALTER TABLE delta.`{lake.path}` SET TBLPROPERTIES "
                  "('delta.deletedFileRetentionDuration' = 'interval 0 seconds')")
        spark.sql(f"VACUUM delta.`{lake.path}` RETAIN 0 HOURS")
    operations = [h["operation"] for h in sorted(DeltaTable(lake.path).history(), key=lambda h: h["version"])][lake.v(2) + 1:]
    assert "OPTIMIZE" in operations and "VACUUM END" in operations
    assert len(DeltaTable(lake.path).file_uris()) == 1  # the two files rewritten as one (dataChange=false)

    replay = lake.score()
    assert replay.scope["action"] == "noop" and replay.scope["reason"].startswith("replay: no-op")
    assert lake.publish(second).action == "noop"
    lake.add_source(lake.flights.iloc[50:60])
    done = lake.publish(lake.score())
    assert (done.action, done.receipt["watermark_before"]) == ("append", 1)
    assert len(lake.assert_whole()) == 60


def test_later_commits_are_read_from_the_log_after_the_newest_receipt_only(lake):
    lake.add_source(lake.flights.iloc[:30])
    lake.publish(lake.score())  # v1
    DeltaTable(lake.path).optimize.compact()  # one file: nothing to compact, no commit
    DeltaTable(lake.path).alter.set_table_properties({"delta.checkpointInterval": "100"})  # v2: removes nothing
    DeltaTable(lake.path).delete(f"flight_id = {lake.flights['flight_id'].iloc[0]}")  # v3
    DeltaTable(lake.path).create_checkpoint()
    assert later_commits(lake.path, 1, 3) == (LaterCommit(2, "SET TBLPROPERTIES", 0), LaterCommit(3, "DELETE", 1))
    assert later_commits(lake.path, 3, 3) == () and later_commits(lake.path, None, 3) == ()
    (Path(lake.path) / "_delta_log" / f"{2:020d}.json").unlink()  # as log cleanup leaves it
    assert later_commits(lake.path, 1, 3) == (LaterCommit(3, "DELETE", 1),)


def race(n_rounds: int, call) -> list[list]:
    """``call(round)`` in two threads at the same moment, ``n_rounds`` times; their answers."""
    import threading

    answers = []
    for r in range(n_rounds):
        gate, out = threading.Barrier(2, timeout=60), [None, None]

        def one(i, r=r, gate=gate, out=out):
            gate.wait()
            out[i] = call(r)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        answers.append(out)
    return answers


def test_two_writers_keeping_the_same_receipt_at_once_keep_it_once(tmp_path):
    path = str(tmp_path / "predictions")

    def receipt(r: int) -> dict:
        return {"target_table_id": "t-1", "table_version": r, "run_id": f"run-{r}",
                "committed_at": f"2026-12-01T00:00:0{r}+00:00", "lakescore_receipt": 1}

    answers = race(6, lambda r: keep_receipts(path, [receipt(r)]))
    assert [sorted(a) for a in answers] == [[0, 1]] * 6  # one writer appended each, the other found it
    rows = DeltaTable(receipts_path(path)).to_pyarrow_table(columns=["table_version"])["table_version"].to_pylist()
    assert sorted(rows) == list(range(6))
