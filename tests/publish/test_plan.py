"""The pure guard: scope and commit decisions over hand-written table metadata."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lakescore.config import PublicationConfig
from lakescore.errors import (
    CdfRecoveryRequiredError,
    ChangeFeedDisabledError,
    ModelChangeError,
    NullPeriodError,
    PublishConflictError,
    SchemaChangeError,
    SourceChangedError,
    StalePlanError,
)
from lakescore.publish.plan import (
    LaterCommit,
    PublishRequest,
    SourceState,
    TargetState,
    build_receipt,
    check_period_nulls,
    decide,
    first_commit,
    parse_receipt,
    period_bounds,
    plan_scope,
    settle_window,
)

SRC, TGT = "main.s.src", "main.s.preds"
SCHEMA = (("flight_id", "long"), ("prediction", "long"), ("probability", "double"))


def receipt(run_id: str = "r1", *, version: int = 1, watermark: int = 4, model_version: int = 1,
            digest: str = "d1", source_id: str = "sid", target_id: str = "tid") -> dict:
    return {"lakescore_receipt": 1, "run_id": run_id, "request_digest": digest, "table_version": version,
            "watermark_after": watermark, "source_table_id": source_id, "target_table_id": target_id,
            "model_name": "m", "model_version": model_version}


def target(*receipts: dict, version: int = 1, has_rows: bool = True, schema=SCHEMA) -> TargetState:
    return TargetState(TGT, True, version, "tid", schema, has_rows, receipts)


def source(version: int = 6, *, cdf: bool = True, oldest: int | None = None) -> SourceState:
    return SourceState(SRC, "sid", version, cdf, oldest)


def request(**changes) -> PublishRequest:
    base = PublishRequest("app", "run-2", TGT, SRC, "sid", "incremental", "append", 5, 6, None, None, "m", 1,
                          "sha", "cfg", SCHEMA, 10)
    return replace(base, **changes)


PUB = PublicationConfig()


def test_first_publication_reads_the_whole_snapshot():
    scope = plan_scope(PUB, source(), TargetState(TGT, False), model_name="m", model_version=1)
    assert (scope.action, scope.read, scope.source_version_from, scope.source_version_to) == ("append", "snapshot", None, 6)


def test_window_starts_after_the_watermark():
    scope = plan_scope(PUB, source(6), target(receipt(watermark=4)), model_name="m", model_version=1)
    assert (scope.action, scope.read, scope.source_version_from, scope.source_version_to) == ("append", "cdf", 5, 6)
    assert scope.watermark_before == 4


def test_no_new_versions_is_a_noop_that_says_so():
    scope = plan_scope(PUB, source(4), target(receipt(watermark=4)), model_name="m", model_version=1)
    assert scope.action == "noop"
    assert scope.reason == f"replay: no-op (no new versions of {SRC} since v4; watermark in {TGT} v1)"


def test_watermark_bound_to_another_source_requires_recovery():
    with pytest.raises(CdfRecoveryRequiredError, match="recreated or copied.*--recover-predictions"):
        plan_scope(PUB, replace(source(), table_id="other"), target(receipt()), model_name="m", model_version=1)


def test_rows_without_receipt_require_recovery():
    with pytest.raises(CdfRecoveryRequiredError, match="no lakescore receipt"):
        plan_scope(PUB, source(), target(), model_name="m", model_version=1)


def test_cleaned_log_requires_recovery_naming_versions():
    with pytest.raises(CdfRecoveryRequiredError) as err:
        plan_scope(PUB, source(9, oldest=7), target(receipt(watermark=4)), model_name="m", model_version=1)
    assert err.value.code == "cdf_recovery_required"
    assert "versions v5..v9 are needed but its log starts at v7" in str(err.value)


def test_disabled_change_feed_names_the_fix():
    with pytest.raises(ChangeFeedDisabledError) as err:
        plan_scope(PUB, source(cdf=False), target(receipt()), model_name="m", model_version=1)
    assert err.value.code == "cdf_not_enabled"
    assert str(err.value) == (
        "main.s.src does not have change data feed enabled, so versions v5..v6 cannot be read incrementally. "
        "Run: ALTER TABLE main.s.src SET TBLPROPERTIES (delta.enableChangeDataFeed = true), then lakescore "
        "publish --recover-predictions once; or set publication.mode: snapshot.")


def test_model_change_modes():
    held = target(receipt(model_version=1))
    with pytest.raises(ModelChangeError, match="holds predictions of m v1.*scored with m v2"):
        plan_scope(PUB.model_copy(update={"model_change_mode": "reject"}), source(), held, model_name="m",
                   model_version=2)
    rebuild = plan_scope(PUB.model_copy(update={"model_change_mode": "full_rebuild"}), source(), held,
                         model_name="m", model_version=2)
    assert (rebuild.action, rebuild.read) == ("replace_table", "snapshot")
    append = plan_scope(PUB, source(), held, model_name="m", model_version=2)
    assert (append.action, append.source_version_from) == ("append", 5)


def test_recovery_rebuilds_from_the_snapshot_whatever_the_watermark():
    scope = plan_scope(PUB, replace(source(), table_id="other"), target(receipt()), model_name="m",
                       model_version=1, recover=True)
    assert (scope.action, scope.read, scope.watermark_before) == ("replace_table", "snapshot", 4)
    assert scope.recovery == f"rebuilt from {SRC} v6; watermark before: 4"


def test_settle_window():
    scope = plan_scope(PUB, source(8), target(receipt(watermark=4)), model_name="m", model_version=1)
    with pytest.raises(SourceChangedError, match=r"window v5..v8 \(v6: delete, v7: update_postimage/update_preimage\)"):
        settle_window(scope, PUB, source_table=SRC, inserted=3,
                      changes={7: ["update_preimage", "update_postimage"], 6: ["delete"]})
    rebuilt = settle_window(scope, PUB.model_copy(update={"source_change_policy": "rebuild_on_change"}),
                            source_table=SRC, inserted=3, changes={6: ["delete"]})
    assert (rebuilt.action, rebuilt.read, rebuilt.source_version_from) == ("replace_table", "snapshot", None)
    empty = settle_window(scope, PUB, source_table=SRC, inserted=0, changes={})
    assert empty.reason == f"no-op: no inserted rows in {SRC} v5..v8"
    assert settle_window(scope, PUB.model_copy(update={"allow_empty": True}), source_table=SRC, inserted=0,
                         changes={}).action == "append"


def test_replay_is_found_through_the_receipt():
    req = request()
    decision = decide(req, target(receipt("run-1", digest=req.digest, version=3)))
    assert decision.action == "noop"
    assert decision.message == f"replay: no-op (run run-1 already published this request to {TGT} v3)"


def test_same_run_id_with_another_request_is_a_conflict():
    with pytest.raises(PublishConflictError, match="run run-2 was already published .* different request"):
        decide(request(), target(receipt("run-2", digest="other")))


def test_window_already_covered_is_a_noop_and_a_gap_is_stale():
    assert decide(request(source_version_from=3, source_version_to=4), target(receipt(watermark=4))).action == "noop"
    with pytest.raises(StalePlanError, match=r"published the source up to v5, and this run read v5..v6"):
        decide(request(), target(receipt(watermark=5)))


def test_write_decision_records_versions():
    decision = decide(request(), target(receipt(watermark=4), version=7))
    assert (decision.action, decision.read_version, decision.txn_version) == ("append", 7, 8)
    assert (decision.watermark_before, decision.watermark_after) == (4, 6)
    assert decision.message == f"append to {TGT} v7 -> v8"


def test_schema_change_refused_with_migrate_hint_or_migrated():
    wider = request(schema=SCHEMA + (("segment", "string"),))
    with pytest.raises(SchemaChangeError, match=r"new: \['segment'\].*lakescore publish --migrate"):
        decide(wider, target(receipt()))
    assert decide(wider, target(receipt()), migrate=True).schema_mode == "merge"
    retyped = request(schema=(("flight_id", "long"), ("prediction", "string"), ("probability", "double")))
    with pytest.raises(SchemaChangeError, match=r"other type: \['prediction'\]"):
        decide(retyped, target(receipt()))


def test_empty_request_is_a_noop_unless_allowed():
    assert decide(request(rows=0), target(receipt())).action == "noop"
    assert decide(request(rows=0), target(receipt()), allow_empty=True).action == "append"
    assert decide(request(rows=0, action="replace_period"), target(receipt()), allow_empty=True).action == "append"


def test_full_rebuild_needs_a_rescore():
    with pytest.raises(StalePlanError, match="model_change_mode: full_rebuild needs a full rescore"):
        decide(request(model_version=2), target(receipt()), model_change_mode="full_rebuild")
    ok = decide(request(model_version=2, action="replace_table", source_version_from=None),
                target(receipt()), model_change_mode="full_rebuild")
    assert ok.action == "replace_table"


def test_receipt_round_trips_through_user_metadata():
    import json

    req = request()
    decision = decide(req, target(receipt(), version=2))
    body = build_receipt(req, decision, target(receipt(), version=2), rows_in=10)
    parsed = parse_receipt(json.dumps(body))
    assert parsed["request_digest"] == req.digest
    assert (parsed["watermark_before"], parsed["watermark_after"], parsed["txn_version"]) == (4, 6, 3)
    assert parse_receipt('{"something": "else"}') is None and parse_receipt(None) is None


def test_digest_ignores_the_run_id_only():
    assert request(run_id="a").digest == request(run_id="b").digest
    assert request(model_version=2).digest != request().digest


def test_period_bounds_are_utc_days():
    import pandas as pd

    low = pd.Timestamp("2013-10-01 05:00", tz="US/Eastern")  # 09:00 UTC
    high = pd.Timestamp("2013-10-02 23:30", tz="US/Eastern")  # 03:30 UTC on the 3rd
    assert period_bounds(low, high) == ("2013-10-01T00:00:00Z", "2013-10-04T00:00:00Z")


def test_an_app_transaction_newer_than_every_receipt_requires_recovery():
    mine = {**receipt("r1", version=1), "app_id": "app"}
    fine = replace(target(mine, version=3), app_id="app", app_txn=1)
    assert plan_scope(PUB, source(), fine, model_name="m", model_version=1).source_version_from == 5
    lost = replace(fine, app_txn=3)
    with pytest.raises(CdfRecoveryRequiredError, match=(
            r"main.s.preds: its app transaction app records a lakescore commit at v3, but the receipt of that "
            r"commit is neither in the table's log nor in main.s.preds_lakescore_receipts")):
        plan_scope(PUB, source(), lost, model_name="m", model_version=1)
    with pytest.raises(CdfRecoveryRequiredError, match="at v3"):
        decide(request(), lost)
    unknown = replace(target(version=3, has_rows=False), app_id="app", app_txn=0)  # no receipt at all
    with pytest.raises(CdfRecoveryRequiredError, match="at v0"):
        decide(request(action="replace_period", source_version_from=None), unknown)
    assert plan_scope(PUB, source(), lost, model_name="m", model_version=1, recover=True).action == "replace_table"


def test_check_period_nulls_names_column_count_and_fix():
    check_period_nulls(SRC, 6, "sched_ts", 0)
    with pytest.raises(NullPeriodError) as err:
        check_period_nulls(SRC, 6, "sched_ts", 3)
    assert err.value.code == "period_null" and err.value.fields == {"table": SRC, "column": "sched_ts", "rows": 3}
    assert str(err.value).startswith("main.s.src v6 has 3 row(s) with a null publication.period_column 'sched_ts'.")
    assert str(err.value).endswith("Fill sched_ts at the source (or score a view without those rows), or set "
                                   "publication.mode: incremental.")


# --- a watermark whose rows the table no longer holds -------------------------------------------

def rewritten(*later, version: int = 3, **receipt_args) -> TargetState:
    """The table after lakescore's receipt at v1 (source up to v4), then ``later`` commits."""
    return replace(target(receipt(**receipt_args), version=version), later_commits=tuple(later))


def test_a_restore_after_the_receipt_refuses_the_replay_naming_the_commit_and_the_fix():
    from lakescore.errors import PredictionsRewrittenError

    table = rewritten(LaterCommit(2, "WRITE", 0, "Append"), LaterCommit(3, "RESTORE", 1))
    with pytest.raises(PredictionsRewrittenError) as err:
        plan_scope(PUB, source(4), table, model_name="m", model_version=1)  # would be "replay: no-op"
    assert err.value.code == "predictions_rewritten"
    assert str(err.value) == (
        f"{TGT}: commit v3 (RESTORE) removed 1 data file(s) after lakescore's last receipt (v1, run r1, source up "
        "to v4), so the table no longer holds every prediction that receipt describes and publishing on from it "
        "would never write the removed rows again. Nothing was written. Rebuild the table from a pinned snapshot "
        "in one commit: lakescore publish --recover-predictions")
    assert err.value.fields == {"table": TGT, "version": 3, "operation": "RESTORE", "watermark_version": 1}
    with pytest.raises(PredictionsRewrittenError, match="commit v3 .RESTORE."):
        plan_scope(PUB, source(6), table, model_name="m", model_version=1)  # a window after the watermark
    with pytest.raises(PredictionsRewrittenError, match="commit v3 .RESTORE."):
        plan_scope(PublicationConfig(mode="snapshot", period_column="time_hour"), source(6), table,
                   model_name="m", model_version=1)
    replayed = request(source_version_from=3, source_version_to=4)
    for at_commit in (replace(table, receipts=(receipt(digest=replayed.digest),)), table):
        with pytest.raises(PredictionsRewrittenError, match="commit v3 .RESTORE."):  # not "already published"
            decide(replayed, at_commit)
    with pytest.raises(PredictionsRewrittenError):
        decide(request(), table)  # the next window


@pytest.mark.parametrize("commit", [LaterCommit(2, "DELETE", 1), LaterCommit(2, "WRITE", 3, "Overwrite"),
                                    LaterCommit(2, "MERGE", 2), LaterCommit(2, "UPDATE", 1),
                                    LaterCommit(2, "DELETE", None), LaterCommit(2, "WRITE", None, "Overwrite"),
                                    LaterCommit(2, "RESTORE", None)])
def test_any_commit_that_removes_data_after_the_receipt_voids_it(commit):
    from lakescore.errors import PredictionsRewrittenError

    with pytest.raises(PredictionsRewrittenError, match=f"commit v2 \\({commit.operation}\\)"):
        plan_scope(PUB, source(4), rewritten(commit), model_name="m", model_version=1)


def test_maintenance_that_keeps_every_row_keeps_the_watermark():
    kept = rewritten(LaterCommit(2, "OPTIMIZE", 0), LaterCommit(3, "VACUUM START", 0), LaterCommit(4, "VACUUM END", 0),
                     LaterCommit(5, "SET TBLPROPERTIES", 0), LaterCommit(6, "WRITE", 0, "Append"),
                     LaterCommit(7, "MERGE", 0), LaterCommit(8, "OPTIMIZE", None), version=8)
    scope = plan_scope(PUB, source(4), kept, model_name="m", model_version=1)
    assert (scope.action, scope.reason) == ("noop", f"replay: no-op (no new versions of {SRC} since v4; "
                                                    f"watermark in {TGT} v1)")
    assert plan_scope(PUB, source(6), kept, model_name="m", model_version=1).source_version_from == 5
    assert decide(request(), kept).action == "append"
    # a removal at or before the receipt's own commit (lakescore's replacement, an older DELETE) is history
    older = rewritten(LaterCommit(1, "WRITE", 4, "Overwrite"), LaterCommit(0, "DELETE", 1), version=1)
    assert plan_scope(PUB, source(4), older, model_name="m", model_version=1).action == "noop"


def test_recovery_and_a_full_rebuild_replace_a_rewritten_table_and_are_never_a_replay():
    table = rewritten(LaterCommit(3, "RESTORE", 1))
    scope = plan_scope(PUB, source(6), table, model_name="m", model_version=1, recover=True)
    assert (scope.action, scope.read, scope.watermark_before) == ("replace_table", "snapshot", 4)
    rebuild = request(action="replace_table", source_version_from=None, recovery=scope.recovery)
    same_request_done_before = replace(table, receipts=(receipt(digest=rebuild.digest),))
    for state in (table, same_request_done_before):
        decision = decide(rebuild, state)
        assert (decision.action, decision.read_version, decision.watermark_after) == ("replace_table", 3, 6)
    full = PublicationConfig(model_change_mode="full_rebuild")
    assert plan_scope(full, source(6), table, model_name="m", model_version=2).action == "replace_table"


@pytest.mark.parametrize(("batch_compute", "engine", "publishing", "action", "expected"), [
    ("spark", "spark-delta", True, "append", "one_pass"),
    ("spark", "spark-delta", True, "replace_period", "one_pass"),
    ("spark", "spark-delta", False, "append", "staged"),  # lakescore score: publish --run-id later
    ("spark", "spark-delta", True, "noop", "staged"),  # nothing to score
    ("single_node", "delta-rs", True, "append", "staged"),
    ("single_node", "spark-delta", True, "append", "staged"),  # a single-node run on Databricks
])
def test_only_a_spark_run_published_as_it_is_scored_goes_in_one_pass(batch_compute, engine, publishing, action,
                                                                     expected):
    from lakescore.publish.plan import Scope, publication_pass
    from lakescore.runtime.base import DeltaEngine

    scope = Scope(action, "cdf", "sid", 3, 4, 2, "r")
    assert publication_pass(batch_compute=batch_compute, engine=DeltaEngine(engine), publishing=publishing,
                            scope=scope) == expected


def test_a_commit_that_creates_the_table_is_the_requests_own_action_against_no_version():
    missing = TargetState(TGT, False, app_id="app")
    assert decide(request(), missing).action == "create"
    first = first_commit(request())
    assert (first.action, first.read_version, first.txn_version, first.watermark_after) == ("append", None, 0, 6)
    assert first.message == f"append to {TGT}: created by this commit (v0)"
    receipt_of_it = build_receipt(request(), first, missing)
    assert (receipt_of_it["target_table_id"], receipt_of_it["target_read_version"], receipt_of_it["txn_version"]) == \
        (None, None, 0)
    # what decide gives against the empty table a separate create leaves, but that table's version
    empty = TargetState(TGT, True, 0, "tid", SCHEMA, False, (), "app")
    for changes in ({}, {"action": "replace_table", "source_version_from": None}, {"action": "replace_period"},
                    {"action": "replace_period", "rows": 0}):
        against_empty = decide(request(**changes), empty, allow_empty=True)
        created = first_commit(request(**changes))
        assert (created.action, created.watermark_after) == (against_empty.action, against_empty.watermark_after)
        assert (against_empty.read_version, created.read_version) == (0, None)
