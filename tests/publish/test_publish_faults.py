"""Faults that must not lose or duplicate a row, on real processes and real Delta tables, with
each writer (delta-rs and Spark Delta).

The killed publishers are real processes: ``lakescore publish`` (delta-rs) and
``spark_route.py`` (Spark Delta, with a SparkSession of its own). The commit loop's fault hook
(``LAKESCORE_FAULT_PAUSE=<point>:<marker>``) makes the kill point deterministic: the child writes
the marker at the point and waits for ``<marker>.go``. A Spark publisher is a real process killed
where the kill can leave something a stop cannot: inside the one pass, with the commit's write job
running. Before its commit (nothing written yet: Spark writes in the commit) and right after it, a
Spark publisher is stopped at that point inside the test process, which leaves the same table and
receipts table as a kill and costs no extra JVM; two racing Spark publishers are two threads on
the test session's SparkSession.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakescore.errors import CdfRecoveryRequiredError
from lakescore.publish.state import receipts
from lakescore.scoring.run import ScoredRun
from lakescore.workflows.score import stage_run

SOURCE = "main.flights.flights_incoming"  # config/inference.yml
SPARK_ROUTE = Path(__file__).with_name("spark_route.py")


@pytest.fixture
def lake(lake, engine, request):
    """The publication lake, publishing with each writer in turn."""
    return lake.on(engine, request)


class _Stopped(BaseException):
    """The publishing process stops here (nothing after this point of the loop runs)."""


def _publisher(lake, run: ScoredRun, *, pause: str | None = None, marker: Path | None = None) -> subprocess.Popen:
    if not (lake.runtime.runs_dir() / run.run_id).exists():
        stage_run(lake.runtime, run)  # what `lakescore score` leaves for `lakescore publish`
    env = {k: v for k, v in os.environ.items() if k != "LAKESCORE_FAULT_PAUSE"}
    if pause:
        env["LAKESCORE_FAULT_PAUSE"] = f"{pause}:{marker}"
    home, config = str(lake.runtime.home), str(lake.config_dir)
    command = ([sys.executable, str(SPARK_ROUTE), home, config, run.run_id, *(["one-pass"] if lake.one_pass else [])]
               if lake.engine == "spark" else
               [sys.executable, "-m", "lakescore.cli", "publish", "--home", home, "--config-dir", config,
                "--run-id", run.run_id])
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _dies_at(point: str, lake, run: ScoredRun, tmp_path: Path) -> None:
    """Publish ``run`` and stop its publisher at the commit loop's ``point`` (``before_commit``:
    nothing committed, delta-rs's file staged, nothing written by Spark, which writes in the commit;
    ``after_commit``: committed, before the receipts table row): SIGKILL of a ``lakescore publish``
    process (delta-rs); the loop stopped at that point in this process (Spark)."""
    if lake.engine == "spark":
        def stop(reached: str) -> None:
            if reached == point:
                raise _Stopped(reached)

        with pytest.raises(_Stopped):
            lake.publish(run, pause=stop)
        return
    marker = tmp_path / point
    child = _publisher(lake, run, pause=point, marker=marker)
    _wait_for(marker)
    os.kill(child.pid, signal.SIGKILL)  # the caller never hears back
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def _wait_for(*paths: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no marker {[str(p) for p in paths if not p.exists()]}")
        time.sleep(0.02)


def _published_window(lake) -> ScoredRun:
    lake.add_source(lake.flights.iloc[:500])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[500:800])
    return lake.score()  # window v1..v1: 300 inserted rows


def _parquet_files(path: str) -> set[str]:
    return {p.name for p in Path(path).glob("*.parquet")}


def test_a_publisher_dead_between_files_and_commit_leaves_the_table_and_a_rerun_publishes_each_row_once(lake, tmp_path):
    run = _published_window(lake)
    earlier = _parquet_files(lake.path)
    _dies_at("before_commit", lake, run, tmp_path)
    orphans = _parquet_files(lake.path) - earlier - {Path(u).name for u in DeltaTable(lake.path).file_uris()}
    assert len(orphans) == (1 if lake.engine == "delta-rs" else 0)  # delta-rs stages its file; Spark writes in the commit
    assert DeltaTable(lake.path).version() == lake.v(1) and len(lake.table()) == 500
    rerun = lake.publish(run)
    assert (rerun.action, rerun.table_version) == ("append", lake.v(2))
    lake.assert_whole()
    assert len(lake.table()) == 800 and DeltaTable(lake.path).version() == lake.v(2)


# only score --publish on Spark publishes in one pass; the other writers commit staged rows
@pytest.mark.parametrize("engine", [pytest.param("spark-one-pass", marks=pytest.mark.spark)])
def test_sigkill_during_the_one_pass_leaves_the_table_and_a_rerun_publishes_each_row_once(lake, tmp_path):
    run = _published_window(lake)
    marker = tmp_path / "in-the-pass"
    child = _publisher(lake, run, pause="one_pass", marker=marker)
    _wait_for(marker, timeout=180)  # a Python worker holds rows of the pass: the commit's write job is running
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    marker.with_name(marker.name + ".go").touch()  # lets a worker the kill left behind finish at once
    assert child.returncode == -signal.SIGKILL
    assert DeltaTable(lake.path).version() == lake.v(1) and len(lake.table()) == 500  # as it was
    assert [r["table_version"] for r in receipts(lake.path)] == [lake.v(1)]
    rerun = lake.publish(run)
    assert (rerun.action, rerun.table_version) == ("append", lake.v(2))
    lake.assert_whole()
    assert len(lake.table()) == 800 and DeltaTable(lake.path).version() == lake.v(2)


def test_two_publishers_of_one_window_commit_once(lake, tmp_path):
    if lake.engine == "spark":
        return _two_spark_publishers(lake)
    run = _published_window(lake)
    twin = lake.score()  # the same window scored again: another run id, the same request
    assert twin.run_id != run.run_id
    markers = [tmp_path / "a", tmp_path / "b"]
    children = [_publisher(lake, r, pause="before_commit", marker=m) for r, m in zip((run, twin), markers)]
    _wait_for(*markers)  # both planned against the first commit and wrote their files
    for m in markers:
        m.with_name(m.name + ".go").touch()
    results = []
    for child in children:
        out, err = child.communicate(timeout=120)
        results.append(json.loads(out) if child.returncode == 0 else {"action": "error", "message": err})
    actions = sorted(r["action"] for r in results)
    assert actions == ["append", "noop"], results
    assert next(r for r in results if r["action"] == "noop")["message"].startswith("replay: no-op")
    lake.assert_whole()
    assert DeltaTable(lake.path).version() == lake.v(2)
    assert _parquet_files(lake.path) == {Path(u).name for u in DeltaTable(lake.path).file_uris()}  # loser cleaned up


def test_retry_after_a_commit_whose_caller_timed_out_is_a_noop(lake, tmp_path):
    run = _published_window(lake)
    _dies_at("after_commit", lake, run, tmp_path)
    retry = lake.publish(run)
    assert retry.action == "noop" and retry.message.startswith("replay: no-op")
    assert retry.table_version == lake.v(2) and retry.receipt["run_id"] == run.run_id
    rescored = lake.score()  # a retried job that scores again finds nothing new
    assert rescored.scope["action"] == "noop"
    lake.assert_whole()
    assert DeltaTable(lake.path).version() == lake.v(2)


def test_vacuumed_source_history_requires_recovery_which_makes_the_table_whole(lake):
    lake.add_source(lake.flights.iloc[:300])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[300:400])
    lake.publish(lake.score())  # watermark v1
    lake.add_source(lake.flights.iloc[400:450])  # v2, never published
    lake.add_source(lake.flights.iloc[450:500])  # v3, never published
    source = DeltaTable(str(lake.runtime.table_path(SOURCE)))
    source.optimize.compact()
    source = DeltaTable(str(lake.runtime.table_path(SOURCE)))
    source.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(CdfRecoveryRequiredError) as err:
        lake.score()
    assert err.value.code == "cdf_recovery_required"
    assert "versions v2..v" in str(err.value) and "lakescore publish --recover-predictions" in str(err.value)
    assert len(lake.table()) == 400
    recovered = lake.publish(lake.score(recover=True))
    assert recovered.action == "replace_table"
    assert recovered.receipt["recovery"].startswith(f"rebuilt from {SOURCE} v")
    assert recovered.receipt["watermark_before"] == 1
    lake.assert_whole()
    assert len(lake.table()) == 500
    lake.add_source(lake.flights.iloc[500:520])  # incremental again from the new watermark
    lake.publish(lake.score())
    lake.assert_whole()
    assert [r["action"] for r in receipts(lake.path)][:2] == ["append", "replace_table"]


def _versions(lake) -> dict[str, int | None]:
    """Version of every table of the lake (None: no such table)."""
    folders = {"source": str(lake.runtime.table_path(SOURCE)), "predictions": lake.path,
               "receipts": lake.path + "_lakescore_receipts"}
    return {k: DeltaTable(v).version() if DeltaTable.is_deltatable(v) else None for k, v in folders.items()}


def test_an_incremental_source_without_change_data_feed_names_the_alter_table_fix_and_writes_nothing(lake):
    from deltalake import write_deltalake

    from lakescore.errors import ChangeFeedDisabledError

    source = lake.runtime.table_path(SOURCE)
    source.parent.mkdir(parents=True, exist_ok=True)
    write_deltalake(str(source), lake.flights.iloc[:80])  # no delta.enableChangeDataFeed
    lake.publish(lake.score())  # the first publication reads the snapshot: no feed needed
    write_deltalake(str(source), lake.flights.iloc[80:100], mode="append")
    before = _versions(lake)
    assert before == {"source": 1, "predictions": lake.v(1), "receipts": 0}
    with pytest.raises(ChangeFeedDisabledError) as err:
        lake.score()
    assert err.value.code == "cdf_not_enabled"
    assert (f"Run: ALTER TABLE {SOURCE} SET TBLPROPERTIES (delta.enableChangeDataFeed = true), then lakescore "
            "publish --recover-predictions once") in str(err.value)
    assert _versions(lake) == before and len(lake.table()) == 80
    DeltaTable(str(source)).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})  # the fix
    assert lake.publish(lake.score(recover=True)).action == "replace_table"
    lake.assert_whole()
    write_deltalake(str(source), lake.flights.iloc[100:110], mode="append")
    assert lake.publish(lake.score()).receipt["read"] == "cdf"  # incremental from here on
    lake.assert_whole()
    assert len(lake.table()) == 110


def test_cleaned_source_log_requires_recovery(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[100:150])
    source = DeltaTable(str(lake.runtime.table_path(SOURCE)))
    source.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    source = DeltaTable(str(lake.runtime.table_path(SOURCE)))
    source.create_checkpoint()
    source.cleanup_metadata()
    with pytest.raises(CdfRecoveryRequiredError, match=r"versions v1..v2 are needed but its log starts at v"):
        lake.score()
    lake.publish(lake.score(recover=True))
    lake.assert_whole()


def test_receipt_lost_between_commit_and_receipts_table_then_log_cleaned_requires_recovery(lake, tmp_path):
    run = _published_window(lake)
    _dies_at("after_commit", lake, run, tmp_path)  # committed its second version, its receipt never reached the receipts table
    lake.maintain()  # ... and the log that held it is cleaned before anyone publishes again
    assert [r["table_version"] for r in receipts(lake.path)] == [lake.v(1)]
    lake.add_source(lake.flights.iloc[800:820])
    with pytest.raises(CdfRecoveryRequiredError, match=(
            rf"records a lakescore commit at v{lake.v(2)}, but the receipt of that commit is neither in the table's log nor "
            r"in main.flights.late_arrival_predictions_lakescore_receipts")) as err:
        lake.score()
    assert "lakescore publish --recover-predictions" in str(err.value)
    assert len(lake.table()) == 800  # nothing guessed, nothing appended twice
    recovered = lake.publish(lake.score(recover=True))
    assert recovered.action == "replace_table"
    lake.assert_whole()
    assert len(lake.table()) == 820


@pytest.mark.parametrize("engine", [pytest.param("spark", marks=pytest.mark.spark)])
def test_two_first_publications_on_spark_create_the_table_once_and_commit_once(lake):
    """Two Spark publishers of the first window of a table that does not exist yet (two threads,
    released together just before each commit creates it with the rows): one commit wins, the
    other's loses a race (Delta: protocol changed, files already there, or the app transaction
    already recorded) and its next plan finds the replay."""
    lake.add_source(lake.flights.iloc[:500])
    results = _published_together(lake, (lake.score(), lake.score()), at="before_commit")
    actions = sorted(getattr(r, "action", repr(r)) for r in results.values())
    assert actions == ["append", "noop"], results
    lake.assert_whole()
    assert [r["table_version"] for r in receipts(lake.path)] == [0]


def _published_together(lake, runs, *, at: str) -> dict[str, object]:
    """``lake.publish(run)`` of each of ``runs`` in a thread of its own, all released together at
    the commit loop's pause point ``at``: the result or the exception, by run id."""
    both = threading.Barrier(len(runs))

    def together(point: str) -> None:
        if point == at:
            both.wait(timeout=120)

    results: dict[str, object] = {}

    def one(r: ScoredRun) -> None:
        try:
            results[r.run_id] = lake.publish(r, pause=together)
        except Exception as err:  # reported by the caller's assertion
            results[r.run_id] = err

    threads = [threading.Thread(target=one, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def _two_spark_publishers(lake) -> None:
    """Two Spark publishers of one window (two threads on one SparkSession), released together
    once both planned against the first commit: one commits, the other's write conflicts or is skipped by Delta
    (same txnAppId and txnVersion) and its next plan finds the replay."""
    run = _published_window(lake)
    results = _published_together(lake, (run, lake.score()), at="before_commit")
    actions = sorted(getattr(r, "action", repr(r)) for r in results.values())
    assert actions == ["append", "noop"], results
    assert next(r for r in results.values() if r.action == "noop").message.startswith("replay: no-op")
    lake.assert_whole()
    assert DeltaTable(lake.path).version() == lake.v(2)
    assert [r["table_version"] for r in receipts(lake.path)] == [lake.v(2), lake.v(1)]
