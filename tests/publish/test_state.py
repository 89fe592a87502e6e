"""Table metadata on real Delta tables: receipts outlive the log they were committed in."""

from __future__ import annotations

import json

from deltalake import DeltaTable

from lakescore.cli import main
from lakescore.publish.state import history_receipts, keep_receipts, receipts, receipts_path, stored_receipts

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
