"""Which rows go where in split training: a stable hash of each row's record keys, and the plan.

Every row gets one SHA-256 of its record keys (training.yml ``data.record_keys``) as text, salted
with the split's ``random_state``. Three independent 63-bit numbers come from its first 24 bytes:

- ``holdout``: the row is held out when ``holdout / 2**63 < split.holdout_fraction``; decided for
  the whole table before anything is sliced or sampled;
- ``slice``: a training row's slice is ``slice mod n_slices``;
- ``order``: the search's sample (and a slice's, when the slice holds more than ``max_rows``) is the
  rows with the ``k`` smallest ``order``: a uniform sample without replacement, like a reservoir
  sample, that is the same rows on every rerun of the same table.

A key's text is the same whatever library read it: whole numbers as digits (``7``, also when a
reader gave them as floats ``7.0`` because of nulls), other floats by ``repr``, booleans
``true``/``false``, dates and timestamps in ISO 8601, text as it is, null as ``\\x00``. So the pandas
route and the Spark route (:func:`key_codes` in ``mapInPandas``) give every row the same slice.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

CODE_COLUMNS = ("_holdout_code", "_slice_code", "_order_code")
"""The columns :func:`key_codes` returns (int64, each in [0, 2**63))."""
_SCALE = float(2**63)


def _key_text(values: pd.Series) -> list[str]:
    """Each value of one key column as the text the hash reads (see the module docstring)."""
    if pd.api.types.is_bool_dtype(values.dtype):
        return ["\x00" if pd.isna(v) else ("true" if v else "false") for v in values]
    if pd.api.types.is_integer_dtype(values.dtype):
        return ["\x00" if pd.isna(v) else str(int(v)) for v in values]
    if pd.api.types.is_float_dtype(values.dtype):
        return ["\x00" if pd.isna(v) else (str(int(v)) if float(v).is_integer() else repr(float(v)))
                for v in values]
    if pd.api.types.is_datetime64_any_dtype(values.dtype):
        return ["\x00" if pd.isna(v) else v.isoformat() for v in values]
    return ["\x00" if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA
            else (v.isoformat() if hasattr(v, "isoformat") else str(v)) for v in values]


def key_codes(frame: pd.DataFrame, keys: list[str] | tuple[str, ...], *, salt: int | str) -> pd.DataFrame:
    """The three hash codes of each row of ``frame`` (see the module docstring).

    Parameters
    ----------
    frame : DataFrame of shape (n_rows, >= len(keys))
        Rows holding the record key columns.
    keys : list of str
        training.yml ``data.record_keys``, in order.
    salt : int or str
        training.yml ``split.random_state``: another salt gives other (equally stable) slices.

    Returns
    -------
    DataFrame of shape (n_rows, 3), columns :data:`CODE_COLUMNS`, int64 in [0, 2**63), ``frame``'s index.
    """
    texts = [_key_text(frame[k]) for k in keys]
    prefix = f"{salt}\x1e".encode()
    codes = np.empty((len(frame), 3), dtype=np.int64)
    for i, parts in enumerate(zip(*texts, strict=True)) if texts else ():
        digest = hashlib.sha256(prefix + "\x1f".join(parts).encode()).digest()
        codes[i] = np.frombuffer(digest[:24], dtype=">u8") >> 1
    return pd.DataFrame(codes, columns=list(CODE_COLUMNS), index=frame.index)


def in_holdout(holdout_code: Any, fraction: float) -> Any:
    """True where a row is held out: ``holdout_code / 2**63 < fraction`` (array or Spark column alike)."""
    return holdout_code < fraction * _SCALE


def slice_of(slice_code: Any, n_slices: int) -> Any:
    """A training row's slice in ``0 .. n_slices - 1``: ``slice_code mod n_slices`` (array or Spark column)."""
    return slice_code % n_slices


@dataclass(frozen=True)
class SplitPlan:
    """How the training rows are fitted (:func:`plan_split`).

    Attributes
    ----------
    training_rows : int
        Rows left for training after the holdout.
    slices : int
        Slice chains to fit; 0 when training does not split.
    rows_per_slice : int
        Rows each slice chain is fitted on (at most ``max_rows``); 0 when it does not split.
    left_out : int
        Training rows no slice holds (slices bigger than ``max_rows`` are sampled down to it).
    refused : str
        Why it does not split (empty when it does): the sentence the note and the summary carry.
    """

    training_rows: int
    slices: int
    rows_per_slice: int
    left_out: int
    refused: str = ""

    @property
    def splits(self) -> bool:
        return self.slices >= 2


def plan_split(training_rows: int, *, max_rows: int, enabled: bool, min_rows_per_worker: int,
               workers: int) -> SplitPlan:
    """Decide whether and how the training rows above ``max_rows`` are split over the workers.

    Slices: ``min(ceil(training_rows / max_rows), workers)``, each of ``training_rows // slices``
    rows, at most ``max_rows`` of them fitted (the rest left out and counted). It refuses, and the
    sampled fit stands, when split training is off, when fewer than 2 slices are possible, or when
    a slice would fit fewer than ``min_rows_per_worker`` rows: a fast answer worse than the slow one
    is not a feature.

    Parameters
    ----------
    training_rows : int
        Training rows of the whole table (after the holdout).
    max_rows : int
        training.yml ``max_rows``: the rows one process fits.
    enabled : bool
        training.yml ``split_training.enabled``.
    min_rows_per_worker : int
        training.yml ``split_training.min_rows_per_worker`` (default 25,000).
    workers : int
        ``split_training.max_workers``, or the Spark session's default parallelism.

    Returns
    -------
    SplitPlan
    """
    if training_rows <= max_rows:
        return SplitPlan(training_rows, 0, 0, 0, f"the {training_rows:,} training rows fit one process "
                                                  f"(max_rows {max_rows:,})")
    sampled = f"one process fits a sample of {max_rows:,} of the {training_rows:,} training rows"
    if not enabled:
        return SplitPlan(training_rows, 0, 0, 0, f"split_training is not enabled: {sampled}")
    slices = min(math.ceil(training_rows / max_rows), workers)
    if slices < 2:
        return SplitPlan(training_rows, 0, 0, 0, f"only {workers} worker is available, so nothing is split: "
                                                 f"{sampled} (give the job more workers)")
    per_slice = training_rows // slices
    fitted = min(per_slice, max_rows)
    if fitted < min_rows_per_worker:
        return SplitPlan(training_rows, 0, 0, 0,
                         f"split refused: {training_rows:,} training rows over {slices} workers is {fitted:,} rows "
                         f"per worker, below split_training.min_rows_per_worker {min_rows_per_worker:,}, and a split "
                         f"fit on so few rows can be worse than the sampled one; instead {sampled} (raise max_rows, "
                         "or lower min_rows_per_worker if you know slices that small are good enough)")
    return SplitPlan(training_rows, slices, fitted, max(training_rows - slices * fitted, 0))
