"""``lakescore receipts TABLE`` and the publish flags of the command line."""

from __future__ import annotations

import json

import pytest

from lakescore.cli import build_parser, main

TARGET = "main.flights.late_arrival_predictions"  # config/inference.yml


def test_receipts_lists_every_commit_newest_first(lake, capsys):
    lake.add_source(lake.flights.iloc[:100])
    first = lake.score()
    lake.publish(first)
    lake.add_source(lake.flights.iloc[100:140])
    second = lake.score()
    lake.publish(second)
    assert main(["receipts", TARGET, "--home", str(lake.runtime.home)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["table"] == TARGET
    assert [(r["run_id"], r["table_version"], r["rows_in"], r["source_version_from"], r["source_version_to"])
            for r in listed["receipts"]] == [(second.run_id, 2, 40, 1, 1), (first.run_id, 1, 100, None, 0)]


def test_receipts_of_a_table_that_does_not_exist_is_an_error(runtime, capsys):
    assert main(["receipts", "main.flights.nothing", "--home", str(runtime.home)]) == 2
    assert "table_not_found: table main.flights.nothing does not exist" in capsys.readouterr().err


def test_publish_flags_parse():
    args = build_parser().parse_args(["publish", "--migrate", "--recover-predictions"])
    assert (args.migrate, args.recover_predictions, args.run_id) == (True, True, None)
    assert build_parser().parse_args(["monitor", "--report", "r.html"]).report == "r.html"


def test_receipts_on_a_terminal_is_a_table_and_json_with_the_json_flag(lake, capsys, monkeypatch):
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    lake.add_source(lake.flights.iloc[:100])
    first = lake.score()
    lake.publish(first)
    shown = Terminal()
    monkeypatch.setattr("sys.stdout", shown)
    monkeypatch.setenv("COLUMNS", "200")  # rich's width: one line per receipt
    assert main(["receipts", TARGET, "--home", str(lake.runtime.home)]) == 0
    text = shown.getvalue()
    assert f"1 receipt(s) of {TARGET}, newest first" in text and first.run_id in text
    row = next(line for line in text.splitlines() if first.run_id in line)
    cells = [cell.strip() for cell in row.strip().strip("│").split("│")]
    counts = first.counts
    assert cells[0] == "1" and cells[2:4] == ["append", first.run_id]
    assert cells[-3:] == ["100", str(counts["predicted"]), str(counts["excluded"])]
    assert cells[5] == "main.flights.flights_incoming v0"
    with pytest.raises(ValueError):
        json.loads(text)
    shown.seek(0), shown.truncate()
    assert main(["receipts", TARGET, "--json", "--home", str(lake.runtime.home)]) == 0
    listed = json.loads(shown.getvalue())
    assert [r["run_id"] for r in listed["receipts"]] == [first.run_id]
