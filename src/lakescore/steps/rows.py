"""Training-only row steps: Deduplicate and DropMissingRows.

They drop rows at training (``flags`` names the dropped rows; ``rows_in``/``rows_out`` record how
many) and are skipped by the prediction chain, so a request of 10 rows returns 10 rows. Their
``apply`` changes nothing. DropMissingRows reads only the row itself, so in the ``pre_split:``
recipe it can be re-applied at scoring as eligibility (scoring.yml ``mode: pre_split | combined``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd

from lakescore.columns import Columns, Kernel
from lakescore.steps.base import StepKind, StepParams, register


class DeduplicateParams(StepParams):
    keep: Literal["first", "last"] = "first"


@register
class Deduplicate(StepKind):
    """Drop training rows that repeat the values of ``columns`` of an earlier (``keep: first``) or
    later (``keep: last``) row. Reads other rows, so it is never used at scoring."""

    kind = "Deduplicate"
    Params = DeduplicateParams
    training_only = True
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        return {"keep": params.keep}

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        return frame[state["columns"]].duplicated(keep=state["keep"]).to_numpy()


class DropMissingParams(StepParams):
    how: Literal["any", "all"] = "any"


@register
class DropMissingRows(StepKind):
    """Drop training rows with a missing value in any (``how: any``) or all (``how: all``) of
    ``columns``."""

    kind = "DropMissingRows"
    Params = DropMissingParams
    training_only = True
    fixed = True
    row_filter = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        return {"how": params.how}

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        missing = frame[state["columns"]].isna().to_numpy()
        return missing.any(axis=1) if state["how"] == "any" else missing.all(axis=1)

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``flags``: rows missing a value in any (``how: any``) or all (``how: all``) of ``columns``
        (each dtype's own missing value, as ``DataFrame.isna``); ``apply`` changes nothing."""
        columns = list(state["columns"])
        combine = np.logical_or if state["how"] == "any" else np.logical_and

        def flags(batch: Columns) -> np.ndarray:
            return combine.reduce([np.asarray(pd.isna(batch.array(c)), dtype=bool) for c in columns])

        return Kernel(apply=lambda batch: None, flags=flags)
