"""Receipts as data: merging the log's with the receipts table's, and the rows to append."""

from __future__ import annotations

import json

from lakescore.publish.receipts import merge_receipts, receipt_rows


def receipt(run_id: str, *, version: int, target_id: str = "tid") -> dict:
    return {"lakescore_receipt": 1, "run_id": run_id, "request_digest": f"d-{run_id}", "table_version": version,
            "watermark_after": version + 3, "source_table_id": "sid", "target_table_id": target_id,
            "model_name": "m", "model_version": 1}


def test_merge_receipts_keeps_one_per_commit_current_table_first():
    logged = [receipt("r3", version=3), receipt("r2", version=2)]
    stored = [receipt("r1", version=1), receipt("r2", version=2),
              {**receipt("old", version=9, target_id="gone"), "committed_at": "2020-01-01T00:00:00+00:00"},
              {**receipt("older", version=12, target_id="gone"), "committed_at": "2019-01-01T00:00:00+00:00"}]
    merged = merge_receipts(logged, stored, "tid")
    assert [(r["run_id"], r["table_version"]) for r in merged] == [("r3", 3), ("r2", 2), ("r1", 1), ("old", 9),
                                                                    ("older", 12)]


def test_receipt_rows_add_only_missing_commits_as_exact_json():
    held = [receipt("r1", version=1)]
    rows = receipt_rows([receipt("r2", version=2), receipt("r1", version=1), receipt("r2", version=2)], held)
    assert [(r["target_table_id"], r["table_version"], r["run_id"]) for r in rows] == [("tid", 2, "r2")]
    assert json.loads(rows[0]["receipt"]) == receipt("r2", version=2)


def test_the_logged_receipt_wins_and_keeps_the_counts_only_the_stored_copy_has():
    """A one-pass commit's receipt: ``userMetadata`` was written before its tally was known; the
    receipts table's copy carries the counts the commit observed."""
    logged = [{**receipt("r2", version=2), "rows_in": 40, "model_version": 1}]
    stored = [{**receipt("r2", version=2), "rows_in": 40, "predicted": 36, "excluded": 4, "model_version": 7}]
    merged = merge_receipts(logged, stored, "tid")
    assert len(merged) == 1
    assert (merged[0]["predicted"], merged[0]["excluded"], merged[0]["model_version"]) == (36, 4, 1)


def test_a_logged_receipt_without_a_table_id_names_the_table_whose_log_holds_it():
    """The receipt of a commit that created the table (Spark Delta by path) was written before
    the table had an id; the stored copy, kept after the commit, has it: one receipt, of this table."""
    created = {**receipt("r0", version=0), "target_table_id": None, "target_read_version": None}
    merged = merge_receipts([receipt("r1", version=1), created], [receipt("r0", version=0)], "tid")
    assert [(r["run_id"], r["table_version"], r["target_table_id"]) for r in merged] == [("r1", 1, "tid"),
                                                                                       ("r0", 0, "tid")]
    earlier = {**receipt("gone", version=4, target_id="old"), "committed_at": "2020-01-01T00:00:00+00:00"}
    merged = merge_receipts([created], [earlier], "tid")  # a stored receipt of an earlier table keeps its id
    assert [(r["run_id"], r["target_table_id"]) for r in merged] == [("r0", "tid"), ("gone", "old")]
    later = {**receipt("r5", version=5), "target_table_id": None, "target_read_version": 4}  # no creating commit
    assert [r["target_table_id"] for r in merge_receipts([later], [], "tid")] == [None]
