"""scripts/bench_capacity.py: its correctness aggregate and its table, on a few hundred hand-made
rows (no Spark, no figures: the benchmark itself prints those)."""

from __future__ import annotations

import importlib
import math
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # the scripts import each other as run from scripts/
    return importlib.import_module("bench_capacity")


def native_rows(n: int = 300) -> pd.DataFrame:
    keys = np.arange(1, n + 1, dtype="int64")
    probability = (keys % 10) / 10 + 0.05  # 0.05 .. 0.95
    return pd.DataFrame({"flight_id": keys, "prediction": (probability > 0.5).astype("int64"),
                         "probability": probability})


def test_compare_counts_missing_extra_and_differing_labels_and_the_largest_probability_gap(bench):
    native = native_rows()
    other = native.sample(frac=1.0, random_state=0).reset_index(drop=True)  # order must not matter
    other = other[~other["flight_id"].isin([7, 8])]  # 2 rows missing
    other = other.astype({"prediction": "Int64", "probability": "Float64"})
    flip = other["flight_id"].isin([10, 20, 30])  # 3 labels flipped
    other.loc[flip, "prediction"] = 1 - other.loc[flip, "prediction"]
    other.loc[other["flight_id"] == 40, ["prediction", "probability"]] = pd.NA  # 1 row not predicted
    other.loc[other["flight_id"] == 50, "probability"] += 0.25  # keys % 10 == 0: 0.05 -> 0.30, label kept
    other = pd.concat([other, pd.DataFrame({"flight_id": [999], "prediction": [1], "probability": [0.9]})
                       .astype({"prediction": "Int64", "probability": "Float64"})])

    check = bench.compare(native, other)

    assert check["rows"] == 299  # 300 - 2 + 1
    assert check["missing"] == 2
    assert check["extra"] == 1
    assert check["labels_differ"] == 2 + 3 + 1
    assert check["max_abs_dp"] == pytest.approx(0.25)


def test_compare_of_identical_predictions_is_clean_and_with_no_probability_is_nan(bench):
    native = native_rows(200)
    assert bench.compare(native, native.copy()) == {"rows": 200, "missing": 0, "extra": 0, "labels_differ": 0,
                                                      "max_abs_dp": 0.0}
    empty = native.iloc[:0]
    check = bench.compare(native, empty)
    assert (check["missing"], check["labels_differ"]) == (200, 200)
    assert math.isnan(check["max_abs_dp"])


def test_table_divides_rows_by_the_warm_call_and_by_native_rows_per_second(bench):
    rss = {"python": 300.0, "jvm": 1000.4, "workers": 500.0, "total": 1800.4}
    clean = {"labels_differ": 0, "max_abs_dp": 0.0}
    entries = [
        {"name": "1 native", "scope": "scoring only", "rows": 1000, "first_s": 0.75, "warm_s": 0.5,
         "rss_mib": {"python": 300.0, "jvm": 0.0, "workers": 0.0, "total": 300.0}, "check": clean},
        {"name": "4 spark", "scope": "score+publish", "rows": 1000, "first_s": 9.0, "warm_s": 2.0,
         "rss_mib": rss, "check": {"labels_differ": 1234, "max_abs_dp": 3.5e-11}},
    ]
    lines = bench.table(entries).splitlines()
    assert len(lines) == 3
    native, spark = lines[1].split(), lines[2].split()
    assert native[-10:] == ["0.75", "0.50", "2,000", "1.000", "300", "0", "0", "300", "0", "0.0e+00"]
    assert spark[-10:] == ["9.00", "2.00", "500", "0.250", "300", "1000", "500", "1800", "1,234", "3.5e-11"]


def test_the_warm_figure_is_the_median_warm_call_and_the_table_lists_them_all(bench):
    assert bench.warm_call([9.0, 2.0]) == 1
    assert bench.warm_call([9.0, 3.0, 2.0, 2.5]) == 3  # 2.0, 2.5, 3.0: the middle one
    assert bench.warm_call([9.0, 4.0, 2.0, 3.0, 5.0]) == 3  # 2, 3, 4, 5: the faster of 3 and 4
    assert bench.warm_call([1.0, 5.0, 5.0, 5.0]) == 2  # equal calls: the middle one in call order
    rss = {"python": 300.0, "jvm": 0.0, "workers": 0.0, "total": 300.0}
    entry = {"name": "1 native", "scope": "scoring only", "rows": 1000, "first_s": 0.75, "warm_s": 0.5,
             "warm_all_s": [0.61, 0.5, 0.49], "rss_mib": rss, "check": {"labels_differ": 0, "max_abs_dp": 0.0}}
    assert bench.table([entry]).splitlines()[1].split()[-3:] == ["0.61", "0.50", "0.49"]


def test_the_phase_tables_show_the_warm_call_or_the_first(bench):
    entries = [{"name": "4 Spark route (local[2])", "rows": 1000, "session_s": 4.0, "first_s": 12.0, "warm_s": 3.0,
                "phases": {"key check": 0.5, "other": 2.5}, "first_phases": {"key check": 2.0, "other": 10.0}},
               {"name": "1 native", "rows": 1000}]
    warm, first = bench.phases_table(entries).splitlines(), bench.phases_table(entries, call="first").splitlines()
    assert warm[0].split()[:3] == ["phase", "(warm", "call,"] and first[0].split()[:3] == ["phase", "(first", "call,"]
    assert [line.split()[-1] for line in warm[1:]] == ["4.00", "0.50", "2.50", "3.00"]
    assert [line.split()[-1] for line in first[1:]] == ["4.00", "2.00", "10.00", "12.00"]


def test_phases_are_exclusive_and_with_other_add_up_to_the_wall_time(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    phase_clock = importlib.import_module("phase_clock")
    now = [0.0]
    monkeypatch.setattr(phase_clock.time, "perf_counter", lambda: now[0])

    class Work:
        def inner(self, seconds):
            now[0] += seconds

        def outer(self):
            now[0] += 1.0
            self.inner(2.5)  # counts for the inner phase only
            now[0] += 0.5

    clock = phase_clock.PhaseClock()
    clock.wrap(Work, "outer", "publish")
    clock.wrap(Work, "inner", "key check")
    Work().outer()
    Work().inner(0.25)
    assert clock.seconds(5.0) == {"key check": 2.75, "publish": 1.5, "other": 0.75}
    clock.reset()
    assert clock.seconds(1.0) == {"other": 1.0}
    beside = threading.Thread(target=Work().inner, args=(4.0,))  # work started on a thread of its own
    beside.start()
    beside.join()
    assert clock.seconds(4.0) == {"other": 4.0}  # counted only where the run's thread waits for it


def test_ratios_are_the_one_pass_over_the_peer_write_and_local2_over_local1(bench):
    def entry(name, scope, warm_s, first_s):
        return {"name": name, "scope": scope, "rows": 1000, "warm_s": warm_s, "first_s": first_s}

    entries = [entry("4 Spark route (local[2])", "score --publish (one pass, spark-delta)", 2.0, 20.0),
               entry("4 Spark route (local[1])", "score --publish (one pass, spark-delta)", 3.0, 40.0),
               entry("5 peer spark_udf (local[2])", "spark_udf+Delta write", 2.5, 16.0)]
    assert bench.ratios(entries) == pytest.approx({"one_pass_vs_peer": 1.25, "local2_vs_local1": 1.5,
                                                   "first_call_one_pass_vs_peer": 0.8})


def test_modes_keep_the_table_order_add_what_they_need_and_name_an_unknown_one(bench):
    assert bench.chosen_modes("peer_delta, one_pass") == ["native", "one_pass", "peer_delta"]
    assert bench.chosen_modes("peer_noop") == ["native", "peer_noop", "peer_delta"]  # its rows checked on peer_delta's
    assert bench.chosen_modes(",".join(bench.MODES)) == list(bench.MODES)
    with pytest.raises(ValueError, match="unknown one_pas; choose from native"):
        bench.chosen_modes("one_pas,peer_delta")


def test_ratios_are_only_those_the_modes_that_ran_allow(bench):
    entries = [{"name": "4 Spark route (local[2])", "scope": "score --publish (one pass, spark-delta)", "rows": 1000,
                "warm_s": 2.0},
               {"name": "5 peer spark_udf (local[2])", "scope": "spark_udf+Delta write", "rows": 1000, "warm_s": 2.5}]
    assert bench.ratios(entries) == pytest.approx({"one_pass_vs_peer": 1.25})
    assert bench.ratios(entries[:1]) == {}
