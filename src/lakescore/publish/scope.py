"""What a run scores, as decided before scoring (:func:`lakescore.publish.plan.plan_scope`), and the
predictions' shape around it.

The score workflow reads the target's receipts and the source's state, decides the
:class:`~lakescore.publish.plan.Scope`, and for a CDF window reads its inserted rows once: it hands
those rows (or the pinned snapshot) to the scoring routes, so both routes score exactly those rows
through ``FittedChain.predict``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from lakescore.publish.plan import Scope


@dataclass(frozen=True)
class PreparedScope:
    """A :class:`~lakescore.publish.plan.Scope` and, for a CDF window, its inserted rows: a pandas
    frame (single-node route) or a lazy Spark DataFrame (Spark route), with their count
    (``inserted``, from the change-kind aggregate; None: ``len(rows)``)."""

    scope: Scope
    rows: Any = None
    inserted: int | None = None

    @property
    def empty(self) -> bool:
        """True when there is nothing to score (a no-op, or a window without inserted rows)."""
        if self.scope.action == "noop":
            return True
        if self.rows is None:
            return False
        return (len(self.rows) if self.inserted is None else self.inserted) == 0


def empty_predictions(record_keys: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """A scored frame with no rows (a no-op run): the keys and ``FittedChain.predict``'s columns."""
    frame = pd.DataFrame({k: pd.array([], dtype="Int64") for k in record_keys})
    frame["prediction"] = pd.array([], dtype="Int64")
    frame["probability"] = pd.array([], dtype="Float64")
    frame["scoring_status"] = pd.array([], dtype="string")
    frame["exclusion_reason"] = pd.array([], dtype="string")
    return frame


def attach_period(scored: pd.DataFrame, source: pd.DataFrame, *, keys: list[str], column: str) -> pd.DataFrame:
    """Add ``publication.period_column`` to the predictions, from the rows scored.

    Parameters
    ----------
    scored : DataFrame of shape (n_rows, n_keys + n_outputs)
        The predictions, with the record keys.
    source : DataFrame
        The rows scored (the window's rows, or the pinned snapshot), with ``keys`` and ``column``.
    keys : list of str
        The record keys (one source row per key).
    column : str
        ``publication.period_column``.

    Returns
    -------
    DataFrame
        ``scored`` with ``column`` joined on the keys, row order kept.
    """
    source = source[[*keys, column]].astype({k: scored[k].dtype for k in keys})
    return scored.merge(source, on=keys, how="left", validate="one_to_one")
