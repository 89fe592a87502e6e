"""The drift check recorded with each answered row: is the row inside what training saw?

The reference holds, per input column, the training range of numbers and the set of text values
(when there are at most 1,000 distinct ones). A row's check is ``ok``, or the reasons joined by
``;`` — ``out_of_range:<column>``, ``unseen:<column>`` — or ``no_reference`` when the training
table could not be read. Nulls are not drift (the recipe decides what a null means).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


def check_rows(reference: DriftReference | None, rows: list[dict[str, Any]]) -> list[str]:
    """One drift check per row (see the module docstring).

    Parameters
    ----------
    reference : DriftReference or None
        None: the training table could not be read (every row ``no_reference``).
    rows : list of dict
        Request rows as answered (column -> JSON value: number, text, bool or None). Plain Python,
        so the endpoint process that records them never imports pandas.

    Returns
    -------
    list of str
        ``ok`` or the row's reasons joined by ``;``, numeric columns first, each in reference order.
    """
    if reference is None:
        return [NO_REFERENCE] * len(rows)
    checks = []
    for row in rows:
        reasons = [f"out_of_range:{name}" for name, (lo, hi) in reference.numeric.items()
                   if _is_number(row.get(name)) and not lo <= row[name] <= hi]
        reasons += [f"unseen:{name}" for name, seen in reference.categories.items()
                    if row.get(name) is not None and row[name] == row[name] and str(row[name]) not in seen]
        checks.append(";".join(reasons) if reasons else "ok")
    return checks


def _is_number(value: Any) -> bool:
    """A real number that is not NaN (bool is not a number here; text never is)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


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
