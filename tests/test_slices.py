"""Slices by a stable hash of the record keys, and the split plan (refusal below the floor)."""

import hashlib
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from lakescore.slices import CODE_COLUMNS, in_holdout, key_codes, plan_split, slice_of


def _by_hand(salt, *texts):
    """The three codes worked out from the module docstring's rule, independently of key_codes."""
    digest = hashlib.sha256(f"{salt}\x1e".encode() + "\x1f".join(texts).encode()).digest()
    return [int.from_bytes(digest[i:i + 8], "big") >> 1 for i in (0, 8, 16)]


def test_codes_are_the_sha256_of_the_key_text():
    frame = pd.DataFrame({"flight_id": pd.array([7, 123456789012, None], dtype="Int64"),
                          "carrier": ["UA", "AA", "B6"]})
    codes = key_codes(frame, ["flight_id", "carrier"], salt=42)
    assert list(codes.columns) == list(CODE_COLUMNS)
    assert codes.iloc[0].tolist() == _by_hand(42, "7", "UA")
    assert codes.iloc[1].tolist() == _by_hand(42, "123456789012", "AA")
    assert codes.iloc[2].tolist() == _by_hand(42, "\x00", "B6")


def test_a_key_gets_the_same_codes_whatever_dtype_a_reader_gave_it():
    ints = key_codes(pd.DataFrame({"k": np.array([1, 2, 30], dtype="int64")}), ["k"], salt=1)
    nullable = key_codes(pd.DataFrame({"k": pd.array([1, 2, 30], dtype="Int64")}), ["k"], salt=1)
    floats = key_codes(pd.DataFrame({"k": [1.0, 2.0, 30.0]}), ["k"], salt=1)  # Arrow's ints with nulls
    text = key_codes(pd.DataFrame({"k": ["1", "2", "30"]}), ["k"], salt=1)
    assert ints.equals(nullable) and ints.equals(floats) and ints.equals(text)
    assert not ints.equals(key_codes(pd.DataFrame({"k": [1, 2, 30]}), ["k"], salt=2))  # another salt, other slices


def test_slices_are_stable_across_reruns_in_a_fresh_process():
    frame = pd.DataFrame({"flight_id": np.arange(2000)})
    here = slice_of(key_codes(frame, ["flight_id"], salt=42)["_slice_code"].to_numpy(), 5)
    script = ("import numpy as np, pandas as pd; from lakescore.slices import key_codes, slice_of; "
              "f = pd.DataFrame({'flight_id': np.arange(2000)}); "
              "print(','.join(map(str, slice_of(key_codes(f, ['flight_id'], salt=42)['_slice_code'].to_numpy(), 5))))")
    there = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", **__import__("os").environ}).stdout.strip()
    assert ",".join(map(str, here)) == there
    counts = np.bincount(here, minlength=5)
    assert counts.min() > 340 and counts.max() < 460  # about 400 each: the hash spreads the keys


def test_holdout_share_follows_the_fraction():
    codes = key_codes(pd.DataFrame({"k": np.arange(20000)}), ["k"], salt=42)
    share = in_holdout(codes["_holdout_code"].to_numpy(), 0.2).mean()
    assert 0.19 < share < 0.21


def test_below_the_floor_it_refuses_to_split_and_says_why():
    plan = plan_split(60_000, max_rows=20_000, enabled=True, min_rows_per_worker=25_000, workers=8)
    assert not plan.splits and plan.slices == 0
    assert plan.refused.startswith("split refused: 60,000 training rows over 3 workers is 20,000 rows per worker, "
                                   "below split_training.min_rows_per_worker 25,000")
    assert "one process fits a sample of 20,000 of the 60,000 training rows" in plan.refused


@pytest.mark.parametrize("rows, max_rows, workers, expected", [
    (1_600_000, 200_000, 64, (8, 200_000, 0)),        # ceil(1.6M / 200k) = 8 slices of 200k
    (1_600_000, 200_000, 2, (2, 200_000, 1_200_000)),  # 2 workers hold 2 x 200k; 1.2M left out
    (250_000, 200_000, 8, (2, 125_000, 0)),
])
def test_slices_are_as_many_as_max_rows_asks_up_to_the_workers(rows, max_rows, workers, expected):
    plan = plan_split(rows, max_rows=max_rows, enabled=True, min_rows_per_worker=25_000, workers=workers)
    assert (plan.slices, plan.rows_per_slice, plan.left_out) == expected and plan.refused == ""


def test_without_split_training_or_a_second_worker_it_samples_and_says_why():
    off = plan_split(300_000, max_rows=200_000, enabled=False, min_rows_per_worker=25_000, workers=8)
    assert off.refused == ("split_training is not enabled: one process fits a sample of 200,000 of the 300,000 "
                           "training rows")
    alone = plan_split(300_000, max_rows=200_000, enabled=True, min_rows_per_worker=25_000, workers=1)
    assert alone.refused.startswith("only 1 worker is available")
    fits = plan_split(150_000, max_rows=200_000, enabled=True, min_rows_per_worker=25_000, workers=8)
    assert not fits.splits and "fit one process" in fits.refused
