"""The drift check recorded with each answered row: is the row inside what training saw?

The reference holds, per input column, the training range of numbers and the set of text values
(when there are at most 1,000 distinct ones). A row's check is ``ok``, or the reasons joined by
``;`` — ``out_of_range:<column>``, ``unseen:<column>`` — or ``no_reference`` when the training
table could not be read. Nulls are not drift (the recipe decides what a null means).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported by the functions that use it, not by the endpoint's import
    import pandas as pd

MAX_CATEGORIES = 1000
NO_REFERENCE = "no_reference"


@dataclass(frozen=True)
class DriftReference:
    """Training ranges (numeric columns) and value sets (text columns)."""

    numeric: dict[str, tuple[float, float]]
    categories: dict[str, frozenset[str]]


def reference_from(frame: pd.DataFrame, columns: list[str]) -> DriftReference:
    """Build the reference from training rows of shape (n_rows, >= len(columns))."""
    import pandas as pd  # training rows: built in a child of the fork server
    numeric, categories = {}, {}
    for name in columns:
        values = frame[name].dropna()
        if values.empty or pd.api.types.is_datetime64_any_dtype(values.dtype):
            continue  # a time (a point-in-time lookup's) is new by nature: never "unseen"
        if pd.api.types.is_numeric_dtype(values.dtype) and not pd.api.types.is_bool_dtype(values.dtype):
            numeric[name] = (float(values.min()), float(values.max()))
        elif values.nunique() <= MAX_CATEGORIES:
            categories[name] = frozenset(values.astype(str))
    return DriftReference(numeric, categories)


def check_rows(reference: DriftReference | None, frame: pd.DataFrame) -> list[str]:
    """One drift check per row of ``frame`` (see the module docstring)."""
    import numpy as np
    import pandas as pd  # the recorder's flush only
    if reference is None:
        return [NO_REFERENCE] * len(frame)
    reasons: list[list[str]] = [[] for _ in range(len(frame))]
    for name, (lo, hi) in reference.numeric.items():
        if name in frame:
            values = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype="float64")
            with np.errstate(invalid="ignore"):
                outside = (values < lo) | (values > hi)
            for i in np.flatnonzero(outside):
                reasons[i].append(f"out_of_range:{name}")
    for name, seen in reference.categories.items():
        if name in frame:
            for i, value in enumerate(frame[name].tolist()):
                if value is not None and value == value and str(value) not in seen:
                    reasons[i].append(f"unseen:{name}")
    return [";".join(r) if r else "ok" for r in reasons]


def reference_columns(columns: list[str], row_filter: str | None) -> list[str]:
    """The training columns the reference reads: ``columns`` and those ``row_filter`` names."""
    names = list(columns)
    if row_filter:
        parsed = ast.parse(row_filter, mode="eval")
        names += [n.id for n in ast.walk(parsed) if isinstance(n, ast.Name) and n.id not in names]
    return names


def training_reference(frame: pd.DataFrame, *, row_filter: str | None, columns: list[str]) -> DriftReference:
    """The reference of the training rows ``frame`` (the :func:`reference_columns` the table has),
    after the training ``row_filter``."""
    if row_filter:
        frame = frame.query(row_filter, engine="python")
    return reference_from(frame, [c for c in columns if c in frame])
