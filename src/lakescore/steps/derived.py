"""Derived-feature steps: new columns computed from each row's own values.

FeatureInteraction (a product or ratio of named columns), PolynomialFeatures (powers and products
up to a degree, terms chosen by scikit-learn) and DateFeatures (calendar parts of a timestamp).
Every new column is float64 with NaN where an input is missing.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, register

NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _no_clash(step: str, names: list[str], frame: pd.DataFrame) -> None:
    clash = [n for n in names if n in frame.columns]
    if clash:
        raise StepError(f"step '{step}': output column(s) {clash} already exist; set another output "
                        "name or drop the existing column first", step=step)


class InteractionParams(StepParams):
    operation: Literal["product", "ratio"] = "product"
    output: str | None = Field(default=None, pattern=NAME)

    @model_validator(mode="after")
    def _arity(self) -> InteractionParams:
        if self.operation == "ratio" and len(self.columns) != 2:
            raise ValueError(f"a ratio takes exactly 2 columns [numerator, denominator]; got {self.columns}")
        if self.operation == "product" and len(self.columns) < 2:
            raise ValueError(f"a product takes at least 2 columns; got {self.columns}")
        return self


@register
class FeatureInteraction(StepKind):
    """Add one column: the product of ``columns``, or the ratio ``columns[0] / columns[1]``.

    The default name is ``a_x_b`` (product) or ``a_per_b`` (ratio). A ratio with a zero or missing
    denominator is NaN (never infinite). Nothing is learned, so the step may run pre-split.
    """

    kind = "FeatureInteraction"
    Params = InteractionParams
    fixed = True

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """The one new column: ``output``, or ``a_x_b`` / ``a_per_b``."""
        return [params.output or ("_x_" if params.operation == "product" else "_per_").join(params.columns)]

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        output = FeatureInteraction.outputs(params)[0]
        _no_clash(params.name, [output], frame)
        return {"operation": params.operation, "output": output}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="FeatureInteraction")
        frame[state["output"]] = _interaction(data, state["operation"])
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """The ``operation`` (product or ratio) of the batch's ``columns``, set as ``output``."""
        columns, operation, output = list(state["columns"]), state["operation"], state["output"]

        def apply(batch: Columns) -> None:
            batch.set(output, _interaction(batch.float_matrix(columns, step="FeatureInteraction"), operation))

        return Kernel(apply)


def _interaction(data: np.ndarray, operation: str) -> np.ndarray:
    """Float64 array (n_rows,): the product of each row of ``data`` (n_rows, n_columns), or the ratio
    of its two columns (NaN where not finite)."""
    if operation == "product":
        result = np.prod(data, axis=1) if data.size else np.empty(len(data))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            result = data[:, 0] / data[:, 1]
        result = np.where(np.isfinite(result), result, np.nan)
    return result.astype("float64")


class PolynomialParams(StepParams):
    degree: int = Field(default=2, ge=2, le=3)
    interaction_only: bool = False


def _term_name(columns: list[str], powers: list[int]) -> str:
    parts = [c if p == 1 else f"{c}_pow{p}" for c, p in zip(columns, powers) if p]
    return "_x_".join(parts)


@register
class PolynomialFeatures(StepKind):
    """Add every product of the columns up to ``degree`` (terms and order from sklearn
    ``PolynomialFeatures``, no bias column): ``a_pow2``, ``a_x_b``, ``b_pow2`` for degree 2.

    The degree-1 terms are the columns themselves, made float64. Each term is a product of the
    row's own values.
    """

    kind = "PolynomialFeatures"
    Params = PolynomialParams

    @staticmethod
    def _powers(params: Any) -> list[list[int]]:
        from sklearn.preprocessing import PolynomialFeatures as Sk

        model = Sk(degree=params.degree, interaction_only=params.interaction_only, include_bias=False)
        model.fit(np.zeros((1, len(params.columns))))
        return [[int(p) for p in row] for row in model.powers_ if sum(row) > 1]

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """One column per term of degree 2 and up: ``a_pow2``, ``a_x_b``, ..."""
        return [_term_name(params.columns, row) for row in cls._powers(params)]

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        powers = PolynomialFeatures._powers(params)
        names = [_term_name(params.columns, row) for row in powers]
        _no_clash(params.name, names, frame)
        return {"powers": powers, "names": names}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="PolynomialFeatures")
        for i, column in enumerate(state["columns"]):
            frame[column] = data[:, i]
        for powers, name in zip(state["powers"], state["names"]):
            frame[name] = _term([data[:, i] for i in range(data.shape[1])], powers)
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """The ``columns`` made float64, and each term ``names[k]``: the product of the columns
        raised to ``powers[k]`` (from ``state``)."""
        columns = list(state["columns"])
        terms = list(zip(state["powers"], state["names"]))

        def apply(batch: Columns) -> None:
            values = [batch.floats(column, step="PolynomialFeatures") for column in columns]
            for column, x in zip(columns, values):
                batch.set(column, x)
            for powers, name in terms:
                batch.set(name, _term(values, powers))

        return Kernel(apply)


def _term(values: list[np.ndarray], powers: list[int]) -> np.ndarray:
    """``prod(values[i] ** powers[i])`` as repeated float64 products, starting from ones."""
    term = np.ones(len(values[0]))
    for x, power in zip(values, powers):
        for _ in range(power):
            term = term * x
    return term


DatePart = Literal["year", "month", "day", "dayofweek", "dayofyear", "hour", "minute", "quarter", "is_weekend"]


class DateParams(StepParams):
    parts: list[DatePart] = Field(default_factory=lambda: ["year", "month", "day", "dayofweek", "hour"],  # type: ignore[arg-type]  # the defaults are DatePart values
                                  min_length=1)
    timezone: str | None = None
    format: str = "ISO8601"
    drop: bool = True

    @model_validator(mode="after")
    def _known_zone(self) -> DateParams:
        if self.timezone is not None:
            try:
                pd.Timestamp("2000-01-01", tz=self.timezone)
            except Exception as err:
                raise ValueError(f"unknown timezone {self.timezone!r} (use an IANA name like 'UTC')") from err
        return self


def _timestamps(series: pd.Series, state: dict[str, Any]) -> pd.Series:
    """Element-wise parse: text with the fixed ``format`` (unparseable -> NaT), datetimes as given;
    naive values are taken as UTC when a timezone is set."""
    if not pd.api.types.is_datetime64_any_dtype(series.dtype):
        series = pd.to_datetime(series.astype(object), format=state["format"], errors="coerce",
                                utc=state["timezone"] is not None)
    zone = state["timezone"]
    if zone is not None:
        if series.dt.tz is None:
            series = series.dt.tz_localize("UTC")
        series = series.dt.tz_convert(zone)
    return series


@register
class DateFeatures(StepKind):
    """Add ``<column>_<part>`` (float64) for each calendar part of a timestamp column.

    Parts: year, month, day, dayofweek (Monday = 0), dayofyear, hour, minute, quarter, is_weekend.
    Text is parsed with the fixed ``format`` (default ISO 8601), never inferred from the batch.
    ``timezone`` converts before taking parts. The source column is dropped unless ``drop: false``.
    """

    kind = "DateFeatures"
    Params = DateParams
    fixed = True

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """``<column>_<part>`` for each column and part."""
        return [f"{c}_{p}" for c in params.columns for p in params.parts]

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        state = {"parts": list(params.parts), "timezone": params.timezone, "format": params.format,
                 "drop": params.drop}
        for column in params.columns:
            stamps = _timestamps(frame[column], state)
            if frame[column].notna().any() and stamps.isna().all():
                raise StepError(f"step '{params.name}': no value of column '{column}' parses as a "
                                f"timestamp with format {params.format!r} (e.g. {frame[column].dropna().iloc[0]!r});"
                                " set format to match the text", step=params.name, column=column)
        _no_clash(params.name, [f"{c}_{p}" for c in params.columns for p in params.parts], frame)
        return state

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column in state["columns"]:
            stamps = _timestamps(frame[column], state)
            for part in state["parts"]:
                if part == "is_weekend":
                    values = (stamps.dt.dayofweek >= 5).where(stamps.notna())
                else:
                    values = getattr(stamps.dt, part)
                frame[f"{column}_{part}"] = values.to_numpy(dtype="float64", na_value=np.nan)
        if state["drop"]:
            frame = frame.drop(columns=state["columns"])
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``<column>_<part>`` (float64) for each column and part of ``state``, from the column's
        datetime array (parsed with ``format``, converted to ``timezone``); sources dropped if ``drop``."""
        columns, parts, drop = list(state["columns"]), list(state["parts"]), state["drop"]

        def apply(batch: Columns) -> None:
            for column in columns:
                stamps = _stamp_array(batch.array(column), state)
                missing = stamps.isna()
                for part in parts:
                    if part == "is_weekend":
                        values = np.where(missing, np.nan, (stamps.dayofweek >= 5).astype("float64"))
                    else:
                        values = getattr(stamps, part).astype("float64")
                    batch.set(f"{column}_{part}", values)
            if drop:
                batch.drop(columns)

        return Kernel(apply)


def _stamp_array(values: Any, state: dict[str, Any]) -> Any:
    """:func:`_timestamps` on a column's array, without a Series: a naive ``DatetimeArray`` of the
    wall-clock times in ``state["timezone"]`` (or as given when no timezone is set)."""
    if pd.api.types.is_datetime64_any_dtype(values.dtype):
        stamps = pd.array(values) if isinstance(values, np.ndarray) else values
    else:
        parsed = pd.to_datetime(np.asarray(values, dtype=object), format=state["format"], errors="coerce",
                                utc=state["timezone"] is not None)
        if not pd.api.types.is_datetime64_any_dtype(parsed.dtype):  # e.g. mixed offsets: the reference's path
            return _timestamps(pd.Series(values), state).array
        stamps = parsed.array
    zone = state["timezone"]
    if zone is not None:
        stamps = (stamps.tz_localize("UTC") if stamps.tz is None else stamps).tz_convert(zone)
    return stamps.tz_localize(None) if stamps.tz is not None else stamps
