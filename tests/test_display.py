"""What the lakescore command prints: strict, clean JSON off a terminal or with --json, tables on one."""

import io
import json
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from lakescore.display import plain, print_summary


class Terminal(io.StringIO):
    """Captured output that says it is a terminal, as a user's shell is."""

    def isatty(self) -> bool:
        return True


# a quality row as `lakescore monitor` returns it: its mappings are JSON text, as the Delta table keeps them
MONITORED = {
    "quality_table": "main.flights.late_arrival_quality", "action": "appended 1 row(s)", "rows": np.int64(60),
    "exclusion_rate": 0.16666666666666666, "mean_probability": float("nan"), "source_version_from": pd.NA,
    "psi": json.dumps({"carrier": 0.25220915915991315, "hour": None}, sort_keys=True),
    "exclusions_by_reason": json.dumps({"ineligible:cancelled": 1}), "prediction_distribution": "{}",
    "output_distribution": json.dumps({"delay_model": {"classes": {"0": 0.76, "1": 0.24}}}),
    "alert": True, "alert_reasons": json.dumps(["psi[carrier] 0.2522 > max_psi 0.25"]),
    "monitored_at": pd.Timestamp(datetime(2026, 12, 1, 23, 16, 31, tzinfo=UTC)),
}


def test_summaries_print_as_strict_json():
    text = json.dumps(plain({"roc_auc": np.float64("nan"), "rates": [0.5, float("inf")], "n": 3,
                             "k": np.int64(7), "gone": pd.NA, "never": pd.NaT, "ok": np.bool_(True)}))
    assert json.loads(text) == {"roc_auc": None, "rates": [0.5, None], "n": 3, "k": 7, "gone": None,
                                "never": None, "ok": True}


def test_monitor_prints_nested_values_as_json_values_not_json_text():
    for stream, as_json in ((io.StringIO(), False), (Terminal(), True)):  # a pipe, or a terminal with --json
        print_summary("monitor", MONITORED, stream=stream, as_json=as_json)
        printed = json.loads(stream.getvalue())
        assert printed["psi"] == {"carrier": 0.25220915915991315, "hour": None}
        assert printed["exclusions_by_reason"] == {"ineligible:cancelled": 1}
        assert printed["prediction_distribution"] == {}
        assert printed["output_distribution"] == {"delay_model": {"classes": {"0": 0.76, "1": 0.24}}}
        assert printed["alert_reasons"] == ["psi[carrier] 0.2522 > max_psi 0.25"]
        assert (printed["rows"], printed["mean_probability"], printed["source_version_from"]) == (60, None, None)
        assert printed["monitored_at"] == "2026-12-01T23:16:31+00:00"
        assert '\\"' not in stream.getvalue()  # no JSON text escaped inside a string


def test_monitor_on_a_terminal_prints_a_table_with_one_line_per_entry():
    stream = Terminal()
    print_summary("monitor", MONITORED, stream=stream)
    text = stream.getvalue()
    assert "main.flights.late_arrival_quality: appended 1 row(s)" in text
    assert "carrier: 0.2522" in text and "hour: -" in text and "delay_model.classes.1: 0.24" in text
    assert "psi[carrier] 0.2522 > max_psi 0.25" in text and "exclusion_rate" in text and "0.1667" in text
    assert text.index("alert_reasons") < text.index("exclusion_rate")  # the alert comes first
    assert "{" not in text and "\\" not in text


def test_other_commands_print_json_even_on_a_terminal():
    stream = Terminal()
    print_summary("train", {"model": "m v1", "psi": '{"a": 1}'}, stream=stream)
    assert json.loads(stream.getvalue()) == {"model": "m v1", "psi": '{"a": 1}'}  # a train summary has no JSON text
