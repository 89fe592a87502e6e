"""``scripts/bench_replica.py`` on the serving tests' trained home: a replica's answer and its three
parts are timed (the figures themselves are not checked)."""

from __future__ import annotations

import importlib
import json

from serving_helpers import REPO


def test_bench_replica_times_a_replicas_answer_and_its_parts(module_home, trained, monkeypatch, capsys) -> None:
    home, _ = module_home
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # the script imports serving_bench beside it
    importlib.import_module("bench_replica").main(["--home", str(home), "--requests", "20"])
    out = capsys.readouterr().out
    figures = json.loads(out.rsplit("BENCH_REPLICA ", 1)[1])
    assert figures["version"] == 1 and figures["columns"] == len(trained.input_columns)
    for part in ("answer", "frame", "score", "reply"):
        assert 0 < figures[part]["p50"] <= figures[part]["p90"]
