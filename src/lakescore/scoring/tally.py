"""A run's tally: rows per ``(scoring_status, exclusion_reason)`` of its predictions, the one
source of a run's counts and summary on both routes (computed where the rows are: pandas here,
Spark in :func:`lakescore.scoring.spark.spark_tally`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Tally:
    """Rows per ``(scoring_status, exclusion_reason)`` of a run's predictions.

    ``groups`` holds ``(status, reason or None, rows)`` triples, sorted (None reasons first).
    """

    groups: tuple[tuple[str, str | None, int], ...] = ()

    @classmethod
    def of(cls, pairs: Any) -> Tally:
        """A tally from ``(status, reason, rows)`` triples in any order (nulls as None)."""
        clean = [(str(s), None if r is None or r is pd.NA else str(r), int(n)) for s, r, n in pairs]
        return cls(tuple(sorted(clean, key=lambda g: (g[0], g[1] is not None, g[1] or ""))))

    def rows(self, status: str | None = None) -> int:
        """Rows in all (``status`` None) or with that ``scoring_status``."""
        return sum(n for s, _, n in self.groups if status is None or s == status)

    @property
    def exclusions(self) -> dict[str, int]:
        """Rows per non-null ``exclusion_reason``, most frequent first."""
        out: dict[str, int] = {}
        for _, reason, n in self.groups:
            if reason is not None:
                out[reason] = out.get(reason, 0) + n
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def pandas_tally(predictions: pd.DataFrame) -> Tally:
    """The :class:`Tally` of a pandas frame of predictions (one ``groupby``)."""
    if not len(predictions):
        return Tally()
    grouped = predictions.groupby(["scoring_status", "exclusion_reason"], dropna=False, sort=False).size()
    return Tally.of((s, None if pd.isna(r) else r, n) for (s, r), n in grouped.items())
