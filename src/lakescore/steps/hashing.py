"""HashEncoder: categories hashed into a fixed number of float64 columns, with nothing learned.

The hash is scikit-learn's ``FeatureHasher`` rule, with the feature name ``<column>=<text>``
(the value's text as :func:`lakescore.columns.text_values` gives it): signed 32-bit MurmurHash3
(seed 0) of its UTF-8 bytes; the bucket is ``|h| mod n_components`` and, with
``alternate_sign``, the sign of ``h`` is the sign of the 1 added there. It is stable across
processes and machines (never Python's salted ``hash()``), so any value, seen at training or
not, lands in the same bucket in every batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lakescore.columns import Columns, Kernel, text_values
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, register


class HashParams(StepParams):
    n_components: int = Field(default=8, ge=1, le=4096)
    alternate_sign: bool = True
    prefix: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


def _names(params: Any) -> list[str]:
    return [f"{params.prefix or params.name}_{i}" for i in range(params.n_components)]


@register
class HashEncoder(StepKind):
    """Replace ``columns`` by ``n_components`` float64 columns ``<prefix>_0`` ... (``prefix``
    defaults to the step's name): each non-missing value adds +1 (or -1, see the module docstring)
    to its bucket; values of several columns that share a bucket add up. A missing value adds
    nothing; an unseen value is hashed like any other. Learns nothing (a ``fixed`` step).
    """

    kind = "HashEncoder"
    Params = HashParams
    fixed = True

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """``<prefix>_0`` ... ``<prefix>_<n_components - 1>``."""
        return _names(params)

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        names = _names(params)
        clash = sorted(n for n in names if n in frame.columns and n not in params.columns)
        if clash:
            raise StepError(f"step '{params.name}': new column(s) {clash[:5]} already exist in the frame; set "
                            "prefix: to another name", step=params.name)
        return {"names": names, "alternate_sign": params.alternate_sign}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        matrix = hashed([text_values(frame, c) for c in state["columns"]], state)
        new = pd.DataFrame(matrix, index=frame.index, columns=state["names"])
        return pd.concat([frame.drop(columns=state["columns"]), new], axis=1, copy=False)

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """The bucket matrix :func:`hashed` gives for the batch's texts, set column by column."""

        def apply(batch: Columns) -> None:
            matrix = hashed([batch.texts(c) for c in state["columns"]], state)
            batch.drop(state["columns"])
            for j, name in enumerate(state["names"]):
                batch.set(name, np.ascontiguousarray(matrix[:, j]))

        return Kernel(apply)


def hashed(texts: list[np.ndarray], state: dict[str, Any]) -> np.ndarray:
    """The hashed counts: float64 array of shape (n_rows, len(state["names"])).

    Parameters
    ----------
    texts : list of object arrays of shape (n_rows,)
        Each of ``state["columns"]``'s values as text, None where missing.
    state : dict
        ``columns``, ``names`` and ``alternate_sign``.
    """
    from sklearn.utils import murmurhash3_32  # sklearn's hash, as FeatureHasher uses it

    n_rows, width = (len(texts[0]) if texts else 0), len(state["names"])
    out = np.zeros((n_rows, width), dtype="float64")
    for column, values in zip(state["columns"], texts):
        codes, uniques = pd.factorize(values)  # each distinct text is hashed once; None -> -1
        h = np.array([murmurhash3_32(f"{column}={u}", seed=0) for u in uniques], dtype="int64")
        bucket = np.abs(h) % width
        sign = np.where(h >= 0, 1.0, -1.0) if state["alternate_sign"] else np.ones(len(h))
        rows = np.flatnonzero(codes >= 0)
        np.add.at(out, (rows, bucket[codes[rows]]), sign[codes[rows]])
    return out
