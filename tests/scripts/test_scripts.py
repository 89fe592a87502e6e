"""The scripts under scripts/ run on the demo config with their smallest arguments, in this process
(``main(argv)``, sharing the test session's SparkSession) on a tiny slice of the demo data. The
figures they print are not checked: only that every step runs and its own checks pass."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # the scripts import each other as run from scripts/
    return importlib.import_module


def test_load_demo_data_writes_the_tables_once(scripts, tmp_path, capsys):
    load = scripts("load_demo_data")
    load.main(["--home", str(tmp_path / "home")])
    load.main(["--home", str(tmp_path / "home")])
    out = capsys.readouterr().out.splitlines()
    assert out == [f"main.flights.{t}: written" for t in ("flights", "weather", "planes", "flights_incoming")] + \
                  [f"main.flights.{t}: kept" for t in ("flights", "weather", "planes", "flights_incoming")]


def test_bench_predict_times_and_profiles_both_chains(scripts, capsys):
    bench = scripts("bench_predict")
    bench.main(["--calls", "20", "--clock", "cpu", "--profile", "5", "--profile-chain", "capacity",
                "--config-dir", str(SCRIPTS.parent / "config")])
    out = capsys.readouterr().out
    figures = json.loads(out.rsplit("BENCH_PREDICT ", 1)[1])
    assert set(figures) == {"demo", "capacity"} and "cProfile of the capacity chain's one-row calls" in out


@pytest.mark.spark
def test_bench_publish_runs_on_the_demo_config_with_its_feature_lookups(scripts, spark, tmp_path, capsys):
    scripts("bench_publish").main(["--rows", "2000", "--repeats", "1", "--history", "3",
                                   "--home", str(tmp_path / "bench")])
    out = capsys.readouterr().out
    assert "prediction frame: 2,000 rows" in out
    assert "replay no-op, 3 commits of history" in out  # the windows read from the change feed after v0


@pytest.mark.spark
def test_bench_spark_publish_runs_with_few_rows(scripts, spark, tmp_path, capsys):
    scripts("bench_spark_publish").main(["500", "--repeats", "1", "--home", str(tmp_path / "bench")])
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["rows"] == 500 and set(figures["median_s"]) == {"plain", "plain_stats", "plain_next", "plain_next_txn",
                                                                   "guarded_first", "guarded_next", "replay"}
    assert {"txn_vs_plain_next", "next_vs_txn", "stats_vs_plain"} <= set(figures)
    from deltalake import DeltaTable

    plain = DeltaTable(str(tmp_path / "bench" / "plain_0"))  # three plain appends, the last one with txnAppId
    assert plain.version() == 2 and plain.transaction_version("bench-0") == 1
    assert plain.metadata().configuration == {}
    assert DeltaTable(str(tmp_path / "bench" / "plain_stats_0")).metadata().configuration == {
        "delta.dataSkippingStatsColumns": "flight_id,run_id,model_version"}
    assert DeltaTable(str(tmp_path / "bench" / "guarded_0")).metadata().configuration == {
        "delta.dataSkippingStatsColumns": "flight_id,run_id,model_version"}


def test_bench_register_times_declared_and_inferred_requirements(scripts, capsys):
    scripts("bench_register").main(["--repeats", "1", "--fit-rows", "400", "--config-dir", str(SCRIPTS.parent / "config")])
    figures = json.loads(capsys.readouterr().out.rsplit("BENCH_REGISTER ", 1)[1])
    declared, inferred = figures["requirements"]["declared"], figures["requirements"]["inferred"]
    assert any(r.startswith("pyarrow==") for r in declared) and not any(r.startswith("cloudpickle") for r in declared)
    assert any(r.startswith("cloudpickle==") for r in inferred)  # what MLflow's child process saw imported
    assert set(figures["median_s"]) == {"declared", "inferred"}


@pytest.mark.spark
def test_bench_key_check_times_the_check_alone_and_beside_a_busy_thread(scripts, spark, tmp_path, capsys):
    bench = scripts("bench_key_check")
    bench.main(["--rows", "300", "--repeats", "1", "--home", str(tmp_path / "bench")])
    figures = json.loads(capsys.readouterr().out.rsplit("BENCH_KEY_CHECK ", 1)[1])
    assert figures["rows"] == 300 and set(figures["median_s"]) == {"alone", "beside_busy", "built_there_beside_busy"}
    assert figures["vs_alone"]["alone"] == 1.0
    assert bench.summary({"alone": [9.0, 2.0, 4.0], "x": [1.0, 3.0, 3.0]}) == {
        "median_s": {"alone": 3.0, "x": 3.0}, "vs_alone": {"alone": 1.0, "x": 1.0}}  # the first repeat left out
