"""Encoding steps: categories are learned at training and fixed in state."""

from __future__ import annotations

import re
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import field_validator

from lakescore.steps.base import StepKind, StepParams, register


class OneHotParams(StepParams):
    max_categories: None = None
    include_missing: Literal[False] = False
    column_names: Literal["slug", "raw"] = "slug"
    min_frequency: int = 1

    @field_validator("max_categories", mode="before")
    @classmethod
    def _no_cap(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("must be null: a capped category list depends on the training batch")
        return value


def _slug(value: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]+", "_", value).strip("_") or "blank"


@register
class OneHotEncoder(StepKind):
    """One 0/1 float column per learned category; an unseen or missing value gives all zeros.

    Categories are the training values as strings, learned by sklearn ``OneHotEncoder``; the
    source column is dropped. ``column_names: slug`` turns ``dest=LAX`` into ``dest_LAX``.
    """

    kind = "OneHotEncoder"
    Params = OneHotParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import OneHotEncoder as Sk

        data = frame[params.columns].astype("string").dropna()
        encoder = Sk(handle_unknown="ignore", min_frequency=params.min_frequency)
        encoder.fit(data.astype(object))
        categories = [[str(c) for c in cats] for cats in encoder.categories_]
        names = []
        for column, cats in zip(params.columns, categories):
            named = [f"{column}_{_slug(c) if params.column_names == 'slug' else c}" for c in cats]
            names.append(named)
        return {"categories": categories, "names": names}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        encoded = {}
        for column, cats, names in zip(state["columns"], state["categories"], state["names"]):
            values = frame[column].astype("string").to_numpy(dtype=object, na_value=None)
            for category, name in zip(cats, names):
                encoded[name] = (values == category).astype("float64")
        out = frame.drop(columns=state["columns"])
        return pd.concat([out, pd.DataFrame(encoded, index=frame.index, dtype="float64")], axis=1)
