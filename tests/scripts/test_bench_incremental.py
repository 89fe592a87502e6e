"""scripts/bench_incremental.py: its figures from the children's results (no Spark, no figures:
the benchmark itself prints those)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # the scripts import each other as run from scripts/
    return importlib.import_module("bench_incremental")


def rounds(seconds: list[float]) -> list[dict]:
    return [{"seconds": s, "rows": 100 + i, "action": "append", "phases": {"scope": s / 10, "other": i}}
            for i, s in enumerate(seconds)]


def test_the_median_round_is_the_faster_of_the_middle_two_and_its_phases_are_shown(bench):
    assert bench.median_round(rounds([3.0, 1.0, 2.0])) == 2
    assert bench.median_round(rounds([4.0, 1.0, 3.0, 2.0])) == 3  # 2.0 and 3.0 in the middle: 2.0
    ours = {"first_rows": 1000, "rounds": rounds([1.2, 1.0, 1.4, 1.1]), "table": "main.bench.t"}
    peer = {"rounds": [{"seconds": s} for s in (0.5, 0.4, 0.6, 0.5)]}

    found = bench.report(ours, peer, {"labels_differ": 0})

    assert found["lakescore_median_s"] == pytest.approx(1.15) and found["peer_median_s"] == pytest.approx(0.5)
    assert found["ratio"] == pytest.approx(0.5 / 1.15)  # below 1: lakescore slower than the peer
    assert found["median_round_s"] == 1.1 and found["phases"] == {"scope": pytest.approx(0.11), "other": 3}
    assert found["published_rows"] == 1000 + 100 + 101 + 102 + 103
    assert found["rows_per_window"] == [100, 101, 102, 103] and found["actions"] == ["append"]
    assert found["check"] == {"labels_differ": 0}
