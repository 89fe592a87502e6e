"""Cleaning steps: AliasReplacement, InvalidValueReplacement, TextCleaning and DropMissingColumns.

Each reads only the row and the saved state. The first three learn nothing from the rows (they
check the config against the training frame and save it), so they may run in the ``pre_split:``
recipe; DropMissingColumns decides at training which columns to drop and saves the kept list.

Output dtypes are fixed: text steps give object columns (str, None for missing) whatever a batch
holds; InvalidValueReplacement gives float64.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field, field_validator, model_validator

from lakescore.columns import Columns, Kernel, float_values, text_values
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, is_numeric, register
from lakescore.steps.selection import ColumnSelection


def _map_texts(texts: np.ndarray, fn: Any) -> np.ndarray:
    """``fn`` on each present text of an object array (n_rows,), once per distinct value; None kept."""
    out = np.empty(len(texts), dtype=object)
    cache: dict[str, Any] = {}
    for i, text in enumerate(texts):
        if text is None:
            out[i] = None
        else:
            if text not in cache:
                cache[text] = fn(text)
            out[i] = cache[text]
    return out


class AliasParams(StepParams):
    aliases: dict[str, dict[str, str]] = Field(min_length=1)

    @model_validator(mode="after")
    def _every_column_mapped(self) -> AliasParams:
        if set(self.aliases) != set(self.columns):
            raise ValueError(f"aliases must map each of columns {self.columns} (alias -> canonical); got maps for "
                             f"{sorted(self.aliases)}. Give one map per column, e.g. aliases: "
                             f"{{{self.columns[0]}: {{'NYC': 'New York'}}}}")
        return self


@register
class AliasReplacement(StepKind):
    """Replace each alias by its canonical text, one map per column:
    ``aliases: {carrier: {"United": "UA", "United Airlines": "UA"}}``.

    Values are read as text (:func:`~lakescore.columns.text_values`: ``1`` for integers); a value
    that is no alias is kept as it is, missing stays missing (None). Matching is exact (run
    TextCleaning first to match case- or space-insensitively). Output: object column.
    """

    kind = "AliasReplacement"
    Params = AliasParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        return {"aliases": {c: dict(params.aliases[c]) for c in params.columns}}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column in state["columns"]:
            frame[column] = _aliased(text_values(frame, column), state["aliases"][column])
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column's texts looked up in its alias map."""
        columns, aliases = list(state["columns"]), state["aliases"]

        def apply(batch: Columns) -> None:
            for column in columns:
                batch.set(column, _aliased(batch.texts(column), aliases[column]))

        return Kernel(apply)


def _aliased(texts: np.ndarray, aliases: dict[str, str]) -> np.ndarray:
    return _map_texts(texts, lambda text: aliases.get(text, text))


class InvalidParams(StepParams):
    invalid: list[float] = Field(default_factory=list)
    lower: float | None = None
    upper: float | None = None
    replacement: float | None = None

    @model_validator(mode="after")
    def _something_invalid(self) -> InvalidParams:
        if not self.invalid and self.lower is None and self.upper is None:
            raise ValueError("nothing is declared invalid; give invalid: [-999, ...] and/or a valid range "
                             "lower:/upper:")
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise ValueError(f"lower ({self.lower}) is above upper ({self.upper}); swap them")
        if self.replacement is not None and not np.isfinite(self.replacement):
            raise ValueError(f"replacement must be a finite number or null (missing); got {self.replacement}")
        return self


@register
class InvalidValueReplacement(StepKind):
    """Replace declared invalid numbers by ``replacement`` (default: missing, NaN).

    Invalid: a value listed in ``invalid`` (sentinels like -999), a value below ``lower`` or above
    ``upper`` (the valid range, bounds included), and an infinity. Each value is judged on its own.
    Numeric columns only (text sentinels: ValueReplacement). Output: float64.
    E.g. ``{step: InvalidValueReplacement, name: no_sentinel, columns: [dep_delay], invalid: [-999],
    lower: -120, upper: 1500}``.
    """

    kind = "InvalidValueReplacement"
    Params = InvalidParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        for column in params.columns:
            if not is_numeric(frame[column]):
                raise StepError(f"step '{params.name}': column '{column}' is {frame[column].dtype}, not numeric; "
                                "InvalidValueReplacement judges numbers (replace text values with "
                                "ValueReplacement, or cast first: Casting to: Float64)", step=params.name,
                                column=column)
        return {"invalid": [float(v) for v in params.invalid], "lower": params.lower, "upper": params.upper,
                "replacement": params.replacement}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column in state["columns"]:
            frame[column] = _replace_invalid(float_values(frame, column, step="InvalidValueReplacement"), state)
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column as float64 with its invalid values replaced."""
        columns = list(state["columns"])

        def apply(batch: Columns) -> None:
            for column in columns:
                batch.set(column, _replace_invalid(batch.floats(column, step="InvalidValueReplacement"), state))

        return Kernel(apply)


def _replace_invalid(x: np.ndarray, state: dict[str, Any]) -> np.ndarray:
    """Float64 (n_rows,): ``x`` with listed values, values outside [lower, upper] and infinities
    replaced by ``state["replacement"]`` (None: NaN)."""
    bad = np.isinf(x) | np.isin(x, np.asarray(state["invalid"], dtype="float64"))
    with np.errstate(invalid="ignore"):
        if state["lower"] is not None:
            bad |= x < state["lower"]
        if state["upper"] is not None:
            bad |= x > state["upper"]
    fill = np.nan if state["replacement"] is None else float(state["replacement"])
    return np.where(bad, fill, x).astype("float64")


class TextCleaningParams(StepParams):
    lower: bool = True
    strip: bool = True
    collapse_spaces: bool = True
    strip_accents: bool = False
    remove: list[str] = Field(default_factory=list)

    @field_validator("remove")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"remove pattern {pattern!r} is not a regular expression ({err}); escape "
                                 "special characters, e.g. '\\\\.' for a dot") from err
        return patterns


@register
class TextCleaning(StepKind):
    """Clean text value by value, in this order: strip accents (``unicodedata`` NFKD, combining
    marks dropped: ``"Zürich"`` -> ``"Zurich"``), remove each ``remove`` regular expression (in
    order), lower-case, collapse runs of whitespace to one space, strip the ends.

    Each step is on by default except ``strip_accents``. Values are read as text (``1`` for
    integers); missing stays missing (None). Output: object column.
    """

    kind = "TextCleaning"
    Params = TextCleaningParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        return {"lower": params.lower, "strip": params.strip, "collapse_spaces": params.collapse_spaces,
                "strip_accents": params.strip_accents, "remove": list(params.remove)}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column in state["columns"]:
            frame[column] = _map_texts(text_values(frame, column), _cleaner(_settings(state)))
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column's texts cleaned, once per distinct value."""
        columns, clean = list(state["columns"]), _cleaner(_settings(state))

        def apply(batch: Columns) -> None:
            for column in columns:
                batch.set(column, _map_texts(batch.texts(column), clean))

        return Kernel(apply)


def _settings(state: dict[str, Any]) -> tuple[Any, ...]:
    return (state["strip_accents"], tuple(state["remove"]), state["lower"], state["collapse_spaces"], state["strip"])


@lru_cache(maxsize=64)
def _cleaner(settings: tuple[Any, ...]) -> Any:
    """The cleaning function of one setting (patterns compiled once per process)."""
    strip_accents, remove, lower, collapse, strip = settings
    patterns = [re.compile(p) for p in remove]
    spaces = re.compile(r"\s+")

    def clean(text: str) -> str:
        if strip_accents:
            text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
        for pattern in patterns:
            text = pattern.sub("", text)
        if lower:
            text = text.lower()
        if collapse:
            text = spaces.sub(" ", text)
        return text.strip() if strip else text

    return clean


class DropMissingColumnsParams(StepParams):
    threshold: float = Field(default=0.5, ge=0.0, lt=1.0)


@register
class DropMissingColumns(ColumnSelection):
    """Drop each of ``columns`` whose share of missing values in the TRAINING rows is above
    ``threshold`` (default 0.5; 0.0 drops any column with a gap). The kept list is saved; at
    scoring the same columns are dropped whatever the batch holds.
    """

    kind = "DropMissingColumns"
    Params = DropMissingColumnsParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        if len(frame) == 0:
            raise StepError(f"step '{params.name}': no training rows to measure missing values on; give "
                            "training rows", step=params.name)
        shares = {c: float(frame[c].isna().mean()) for c in params.columns}
        dropped = [c for c in params.columns if shares[c] > params.threshold]
        return {"threshold": params.threshold, "missing_share": shares, "dropped": dropped,
                "kept": [c for c in params.columns if c not in dropped]}
