"""Array helpers of the compiled kernels: a column's values as Python objects, and value lookups.

Both work on the 1-D arrays a :class:`lakescore.columns.Columns` batch holds (numpy or pandas
extension arrays) and give what the pandas calls of the steps' reference ``apply`` give, without
building a Series: equal values are found as Python compares them (``1 == 1.0 == True``), as a dict
lookup or ``Series.isin`` finds them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

# up to this many rows a lookup is a dict probe per value (no pandas call overhead); above it, one
# hash pass over the batch (pd.factorize) and an index lookup of its distinct values
SMALL_ROWS = 256

ABSENT = -1  # Positions.of: the value is none of the keys
MISSING = -2  # Positions.of: the value is missing (pd.isna)


def object_values(values: Any) -> np.ndarray:
    """A column's array (numpy or pandas extension array) as an object array of shape (n_rows,).

    What ``Series.astype(object).to_numpy()`` gives: Python scalars (Timestamps for datetimes) and
    the dtype's own missing value (None, NaN, pd.NA, NaT). An object array is returned as it is:
    never write into the result.
    """
    if isinstance(values, np.ndarray):
        if values.dtype == object:
            return values
        if values.dtype.kind not in "mM":  # numpy gives ints or datetimes for these, pandas Timestamps
            return values.astype(object)
    return np.asarray(pd.array(values, copy=False).astype(object), dtype=object)


def as_objects(values: list[Any]) -> np.ndarray:
    """A list as an object array of shape (len(values),) (a tuple or list in it stays one element)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


class Positions:
    """Positions of values among fixed, present ``keys`` (read once, when a kernel is built).

    A value equal to several keys gets the last one's position, as a dict built from the keys in
    order (``{key: i}``) would give.

    Parameters
    ----------
    keys : iterable
        Values none of which is missing.
    """

    def __init__(self, keys: Iterable[Any]) -> None:
        listed = list(keys)
        self.size = len(listed)
        self.table = {key: i for i, key in enumerate(listed)}
        self.index = pd.Index(list(self.table), dtype=object)
        # each distinct key's (last) position; indexed by -1 (ABSENT) and -2 (MISSING) it gives them back
        self.last = np.append(np.fromiter(self.table.values(), dtype=np.intp, count=len(self.table)),
                              [MISSING, ABSENT])

    def __len__(self) -> int:
        return self.size

    def of(self, values: np.ndarray) -> np.ndarray:
        """Each value's position in ``keys``: int array (n_rows,), ``ABSENT`` (-1) for a value not
        among them, ``MISSING`` (-2) for a missing one (``pd.isna``).

        Parameters
        ----------
        values : array of shape (n_rows,), object or numeric
        """
        if len(values) <= SMALL_ROWS:
            found = np.fromiter((self.table.get(v, ABSENT) for v in values), dtype=np.intp, count=len(values))
            found[pd.isna(values)] = MISSING
            return found
        codes, distinct = pd.factorize(values)  # a missing value gets code -1
        return self.last[np.append(self.index.get_indexer(distinct), MISSING)][codes]
