"""Buffered prediction records: one Delta append per flush, audit events with them."""

from __future__ import annotations

import time

import pytest

from lakescore.serving.state.recorder import Answered, PredictionRecorder, RecordBatch
from lakescore.serving.state.store import ServingState
from lakescore.workflows.serve import append_rows

TABLE = "main.serving.inference"


def answered(request_id: str, n: int, *, version: int = 1, served: str = "warm") -> Answered:
    inputs = [{"distance": 100 * (i + 1), "carrier": "UA"} for i in range(n)]
    rows = [{"prediction": i % 2, "probability": 0.5, "scoring_status": "predicted", "exclusion_reason": None,
             "model_version": version, "served": served} for i in range(n)]
    rows[-1].update(prediction=None, probability=None, scoring_status="excluded", exclusion_reason="ineligible:x")
    return Answered(request_id, time.time(), inputs, rows, 12.5)


@pytest.fixture
def recorder(runtime):
    state = ServingState(runtime.home)
    rec = PredictionRecorder(write=lambda records: append_rows(runtime, TABLE, records), state=state,
                             endpoint="ep", model_name="m", flush_rows=5,
                             drift=lambda rows: ["out_of_range:distance" if r["distance"] > 250 else "ok" for r in rows])
    yield rec, state
    state.close()


def test_rows_are_appended_in_one_commit_per_flush(recorder, runtime) -> None:
    rec, state = recorder
    assert rec.add(answered("r1", 2)) is False
    assert rec.add(answered("r2", 3, version=2, served="cold")) is True  # 5 rows: a flush is due
    assert rec.flush() == 5
    assert rec.flush() == 0
    table = runtime.read_table(TABLE).sort_values(["request_id", "row_index"], ignore_index=True)
    assert runtime.table_version(TABLE) == 0  # one commit for both requests
    assert table["request_id"].tolist() == ["r1", "r1", "r2", "r2", "r2"]
    assert table["row_index"].tolist() == [0, 1, 0, 1, 2]
    assert table["model_version"].tolist() == [1, 1, 2, 2, 2]
    assert table["served"].tolist() == ["warm", "warm", "cold", "cold", "cold"]
    assert table["prediction"].tolist() == ["0", None, "0", "1", None]
    assert table["drift_check"].tolist() == ["ok", "ok", "ok", "ok", "out_of_range:distance"]
    assert table["input"][2] == '{"carrier": "UA", "distance": 100}'
    assert str(table["received_at"].dtype) == "datetime64[us, UTC]"
    events = [e.detail for e in state.events("ml.predict_query")]
    assert [(e["request_id"], e["rows"], e["served"], e["drifted_rows"]) for e in events] == [
        ("r1", 2, "warm", 0), ("r2", 3, "cold", 1)]


def test_a_failed_write_keeps_the_rows_for_the_next_flush(runtime) -> None:
    state = ServingState(runtime.home)
    written: list[RecordBatch] = []
    fail = {"now": True}

    def write(batch: RecordBatch) -> None:
        if fail["now"]:
            raise OSError("disk full")
        written.append(batch)

    rec = PredictionRecorder(write=write, state=state, endpoint="ep", model_name="m", flush_rows=100)
    rec.add(answered("r1", 2))
    assert rec.flush() == 0 and rec.summary()["last_error"] == "OSError: disk full"
    assert rec.buffered == 2 and len(state.events("ml.predict_query")) == 1  # the audit is not lost
    fail["now"] = False
    rec.add(answered("r2", 1))
    assert rec.flush() == 3  # the failed batch as itself (its app transaction), then the new one
    assert [(b.version, [r["request_id"] for r in b.records]) for b in written] == [(0, ["r1", "r1"]), (1, ["r2"])]
    assert rec.summary()["last_error"] == ""
    state.close()


def test_a_model_set_answer_is_recorded_whole_in_outputs(recorder, runtime) -> None:
    rec, _ = recorder
    rows = [{"delay_model_prediction": 1, "delay_model_probability": 0.625, "minutes_model_prediction": 41.5,
             "late_risk": 12.8875, "late_flag": True, "scoring_status": "predicted", "exclusion_reason": None,
             "model_version": 4, "served": "warm"},
            {"delay_model_prediction": None, "delay_model_probability": None, "minutes_model_prediction": None,
             "late_risk": None, "late_flag": None, "scoring_status": "excluded",
             "exclusion_reason": "outlier:delay_model/distance_outlier", "model_version": 4, "served": "warm"}]
    rec.add(Answered("s1", time.time(), [{"distance": 100}, {"distance": 4983}], rows, 3.0))
    rec.add(answered("c1", 1))  # a chain's row: nothing beyond its own columns
    assert rec.flush() == 3
    table = runtime.read_table(TABLE).sort_values(["request_id", "row_index"], ignore_index=True)
    assert table["outputs"].tolist() == [
        None,
        '{"delay_model_prediction": 1, "delay_model_probability": 0.625, "late_flag": true, "late_risk": 12.8875, '
        '"minutes_model_prediction": 41.5}',
        '{"delay_model_prediction": null, "delay_model_probability": null, "late_flag": null, "late_risk": null, '
        '"minutes_model_prediction": null}']
    assert table["prediction"].isna().tolist() == [True, True, True]  # c1's one row is excluded; a set has none
    assert table["exclusion_reason"].tolist() == ["ineligible:x", None, "outlier:delay_model/distance_outlier"]


def test_a_drift_fault_keeps_every_request_and_its_audit_for_the_next_flush(runtime) -> None:
    state = ServingState(runtime.home)
    written: list[RecordBatch] = []
    faults = ["drift reference broken"]

    def drift(rows: list[dict]) -> list[str]:
        if faults:
            raise ValueError(faults.pop())
        return ["ok"] * len(rows)

    rec = PredictionRecorder(write=written.append, state=state, endpoint="ep", model_name="m", flush_rows=100,
                             drift=drift)
    rec.add(answered("r1", 2))
    assert rec.flush() == 0 and rec.summary()["last_error"] == "ValueError: drift reference broken"
    assert rec.buffered == 2 and written == [] and state.events("ml.predict_query") == []
    rec.add(answered("r2", 1))
    assert rec.flush() == 3
    assert [r["request_id"] for r in written[0].records] == ["r1", "r1", "r2"]
    assert [e.detail["request_id"] for e in state.events("ml.predict_query")] == ["r1", "r2"]
    state.close()


def test_a_batch_written_twice_at_once_lands_once(runtime) -> None:
    """A write the recorder gave up on (a child killed at its time-out) may commit after all, while
    the retry of the same batch writes too: the batch's app transaction lets one of them land."""
    import threading

    state = ServingState(runtime.home)
    batches: list[RecordBatch] = []
    rec = PredictionRecorder(write=batches.append, state=state, endpoint="ep", model_name="m", flush_rows=100)
    for i in range(4):
        rec.add(answered(f"r{i}", 2))
        rec.flush()
    state.close()
    for batch in batches:  # each batch written by two writers at the same moment
        gate = threading.Barrier(2, timeout=60)

        def one(batch=batch, gate=gate):
            gate.wait()
            append_rows(runtime, TABLE, batch)

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    append_rows(runtime, TABLE, batches[1])  # a late retry of an old batch: nothing more
    table = runtime.read_table(TABLE)
    assert sorted(zip(table["request_id"], table["row_index"])) == [(f"r{i}", j) for i in range(4) for j in (0, 1)]
