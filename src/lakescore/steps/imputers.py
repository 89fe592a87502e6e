"""Simple imputation steps: one learned fill value per column (or per group), and missing flags.

scikit-learn learns the fill values where it has the logic (``SimpleImputer``, ``MissingIndicator``);
``apply`` only reads them from state, so a row is filled the same way in any batch.

Output dtypes never depend on the batch: a numeric column comes out float64 (missing as NaN until
filled), a text column comes out object (missing as None until filled).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from lakescore.columns import Columns, Kernel, float_values
from lakescore.errors import StepError
from lakescore.frames import replace_columns
from lakescore.steps.arrays import Positions, as_objects, object_values
from lakescore.steps.base import StepKind, StepParams, is_numeric, register

Strategy = Literal["mean", "median", "most_frequent", "constant"]


class SimpleImputerParams(StepParams):
    strategy: Strategy = "mean"
    fill_value: float | str | None = None

    @model_validator(mode="after")
    def _fill_value_only_for_constant(self) -> SimpleImputerParams:
        if self.strategy == "constant" and self.fill_value is None:
            raise ValueError("strategy 'constant' needs fill_value (e.g. fill_value: 0)")
        if self.strategy != "constant" and self.fill_value is not None:
            raise ValueError(f"fill_value is only used with strategy 'constant', not {self.strategy!r}")
        return self


def _scalar(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _check_fill(step: str, column: str, numeric: bool, value: Any) -> Any:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        raise StepError(f"step '{step}': column '{column}' has no value in any training row, so "
                        "there is nothing to learn a fill value from; drop the column or use "
                        "strategy: constant", step=step, column=column)
    if numeric and isinstance(value, str):
        raise StepError(f"step '{step}': fill value {value!r} is text but column '{column}' is "
                        "numeric; use a number as fill_value", step=step, column=column)
    return value


def learn_fill(frame: pd.DataFrame, column: str, strategy: Strategy, *, step: str) -> Any:
    """The fill value of one column, learned by sklearn ``SimpleImputer``.

    Parameters
    ----------
    frame : DataFrame of shape (n_rows, n_columns)
    strategy : {"mean", "median", "most_frequent"}
        Ties of most_frequent go to the smallest value (sklearn's rule).

    Raises
    ------
    StepError
        When every training value is missing, or mean/median is asked of a text column.
    """
    from sklearn.impute import SimpleImputer as Sk

    numeric = is_numeric(frame[column])
    if strategy in ("mean", "median") or numeric:
        data = float_values(frame, column, step=step).reshape(-1, 1)
    else:
        series = frame[column]
        data = series.astype(object).where(series.notna(), np.nan).to_numpy().reshape(-1, 1)
    if not pd.notna(data).any():
        return _check_fill(step, column, numeric, None)
    imputer = Sk(strategy=strategy, missing_values=np.nan, keep_empty_features=True).fit(data)
    return _check_fill(step, column, numeric, _scalar(imputer.statistics_[0]))


def fill_column(frame: pd.DataFrame, column: str, value: Any, numeric: bool, *, step: str) -> pd.Series | np.ndarray:
    """Element-wise fill of ``frame[column]``: numeric -> float64 array (text that is not a number
    raises StepError naming ``step``, as the kernel does), text -> object Series (same index)."""
    if numeric:
        values = float_values(frame, column, step=step)
        return np.where(np.isnan(values), float(value), values)
    as_object = frame[column].astype(object)
    return as_object.where(as_object.notna(), value)


@register
class SimpleImputer(StepKind):
    """Fill missing values with one learned value per column (sklearn ``SimpleImputer``).

    ``mean`` and ``median`` need numeric columns; ``most_frequent`` takes the smallest of tied
    values; ``constant`` fills ``fill_value``. Numeric columns come out float64, text object.
    """

    kind = "SimpleImputer"
    Params = SimpleImputerParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        numeric = [is_numeric(frame[c]) for c in params.columns]
        if params.strategy == "constant":
            fill = [_check_fill(params.name, c, n, params.fill_value) for c, n in zip(params.columns, numeric)]
        else:
            fill = [learn_fill(frame, c, params.strategy, step=params.name) for c in params.columns]
        if params.strategy in ("mean", "median"):
            numeric = [True] * len(params.columns)
        return {"fill": fill, "numeric": numeric}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return replace_columns(frame, list(zip(state["columns"], state["fill"], state["numeric"])),
                               lambda f, t: fill_column(f, *t, step="SimpleImputer"))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Missing values set to the column's ``state["fill"]``: float64 for a numeric column,
        object (the values as Python objects) for a text one."""
        fills = list(zip(state["columns"], state["fill"], state["numeric"]))

        def apply(batch: Columns) -> None:
            for column, value, numeric in fills:
                if numeric:
                    values = batch.floats(column, step="SimpleImputer")
                    batch.set(column, np.where(np.isnan(values), float(value), values))
                else:
                    values = object_values(batch.array(column))
                    batch.set(column, _filled(values, pd.isna(values), value))

        return Kernel(apply)


def _filled(values: np.ndarray, missing: np.ndarray, fills: Any) -> np.ndarray:
    """A copy of the object array ``values`` (n_rows,) with ``fills`` (one value, or one per missing
    row) where ``missing``; ``values`` itself when nothing is missing."""
    if not missing.any():
        return values
    out = values.copy()
    out[missing] = fills
    return out


class GroupImputerParams(StepParams):
    by: list[str] = Field(min_length=1)
    strategy: Literal["mean", "median", "most_frequent"] = "mean"

    def input_columns(self) -> list[str]:
        return list(self.columns) + [c for c in self.by if c not in self.columns]

    @model_validator(mode="after")
    def _by_not_imputed(self) -> GroupImputerParams:
        both = sorted(set(self.by) & set(self.columns))
        if both:
            raise ValueError(f"column(s) {both} are both imputed and group keys; list them in one place")
        return self


def _keys(frame: pd.DataFrame, by: list[str]) -> list[tuple[Any, ...]]:
    """Group key of each row as a tuple of plain Python values (int, float, str, None)."""
    columns = [frame[b].astype(object).where(frame[b].notna(), None).tolist() for b in by]
    return list(zip(*columns)) if columns else []


def _group_table(frame: pd.DataFrame, column: str, by: list[str], strategy: str, step: str) -> list[list[Any]]:
    rows = []
    keys = _keys(frame, by)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for position, key in enumerate(keys):
        if None not in key:
            groups.setdefault(key, []).append(position)
    for key in sorted(groups, key=repr):
        part = frame.iloc[groups[key]]
        if part[column].notna().any():
            rows.append([*key, learn_fill(part, column, strategy, step=step)])  # type: ignore[arg-type]
    return rows


@register
class GroupImputer(StepKind):
    """Fill a missing value with the statistic of the row's group (``by`` columns).

    A row whose group was not seen at training, has a missing key, or whose group had no value of
    the column gets the overall statistic of the training rows. Group tables are saved as rows
    ``[key_1, ..., key_k, value]`` (JSON has no tuple keys).
    """

    kind = "GroupImputer"
    Params = GroupImputerParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        numeric = [params.strategy != "most_frequent" or is_numeric(frame[c]) for c in params.columns]
        overall = [learn_fill(frame, c, params.strategy, step=params.name) for c in params.columns]
        tables = [_group_table(frame, c, params.by, params.strategy, params.name) for c in params.columns]
        return {"by": list(params.by), "overall": overall, "tables": tables, "numeric": numeric}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        keys = _keys(frame, state["by"])
        for column, overall, table, numeric in zip(state["columns"], state["overall"], state["tables"],
                                                   state["numeric"]):
            lookup = {tuple(row[:-1]): row[-1] for row in table}
            missing = frame[column].isna().to_numpy()
            fills = [lookup.get(key, overall) if gap else None for key, gap in zip(keys, missing)]
            if numeric:
                values = float_values(frame, column, step="GroupImputer")
                filled = np.array([np.nan if f is None else f for f in fills], dtype="float64")
                frame[column] = np.where(missing, filled, values)
            else:
                column_values = frame[column].astype(object)
                frame[column] = column_values.where(~missing, pd.Series(fills, index=frame.index, dtype=object))
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each row's group key coded once per batch (:class:`GroupCodes` over the saved tables'
        keys); a missing value takes its group's entry in a fill array per column, whose last entry,
        for unseen, partly missing or valueless groups, is the overall statistic."""
        by = list(state["by"])
        codes = GroupCodes([tuple(row[:-1]) for table in state["tables"] for row in table], len(by))
        columns = []
        for column, overall, table, numeric in zip(state["columns"], state["overall"], state["tables"],
                                                   state["numeric"]):
            # codes -1 and -2 (unlisted or partly missing key) pick the overall value at the end
            fills = np.full(codes.size + 2, float(overall)) if numeric else as_objects([overall] * (codes.size + 2))
            keys = codes.of([as_objects([row[j] for row in table]) for j in range(len(by))])
            for code, row in zip(keys.tolist(), table):  # in order: a repeated key keeps its last value
                fills[code] = row[-1]
            columns.append((column, fills, numeric))

        def apply(batch: Columns) -> None:
            group = codes.of([object_values(batch.array(b)) for b in by])
            for column, fills, numeric in columns:
                if numeric:
                    values = batch.floats(column, step="GroupImputer")
                    missing = pd.isna(batch.array(column))
                    batch.set(column, np.where(missing, fills[group], values))
                else:
                    values = object_values(batch.array(column))
                    missing = pd.isna(values)
                    batch.set(column, _filled(values, missing, fills[group[missing]]))

        return Kernel(apply)


class GroupCodes:
    """Positions of group keys (tuples of ``width`` values) among a fixed list of keys.

    A row's code is its key's position among the distinct listed keys, or negative when its key is
    not listed or has a missing part. Values match as Python compares them (``1 == 1.0``), as a dict
    lookup of the key would. Key columns are coded one at a time: each column's value is found among
    that column's listed values, then the pair (code so far, this position) among the pairs the
    listed keys make, so codes never outgrow the number of keys.
    """

    def __init__(self, keys: list[tuple[Any, ...]], width: int) -> None:
        self.levels: list[tuple[Positions, Positions]] = []
        codes = np.zeros(len(keys), dtype=np.intp)
        for j in range(width):
            values = Positions(key[j] for key in keys)
            pairs = codes * len(values) + values.of(as_objects([key[j] for key in keys]))
            prefixes = Positions(dict.fromkeys(pairs.tolist()))
            codes = prefixes.of(pairs)
            self.levels.append((values, prefixes))
        self.size = len(self.levels[-1][1]) if self.levels else 0

    def of(self, columns: list[np.ndarray]) -> np.ndarray:
        """Codes, int array (n_rows,), of the keys whose ``j``-th values are ``columns[j]``
        (object arrays of shape (n_rows,)); negative for an unlisted or partly missing key."""
        codes = np.zeros(len(columns[0]) if columns else 0, dtype=np.intp)
        for column, (values, prefixes) in zip(columns, self.levels):
            part = values.of(column)
            pairs = np.where((codes < 0) | (part < 0), -1, codes * len(values) + part)
            codes = prefixes.of(pairs)
        return codes


class MissingIndicatorParams(StepParams):
    features: Literal["all", "missing-only"] = "all"
    suffix: str = Field(default="_missing", pattern=r"^[A-Za-z0-9_]+$")


@register
class MissingIndicator(StepKind):
    """Add ``<column><suffix>`` = 1.0 where the value is missing, else 0.0 (float64).

    With ``features: missing-only`` only the columns with a missing value in the training rows get
    an indicator (sklearn ``MissingIndicator``); that list is fixed in state.
    """

    kind = "MissingIndicator"
    Params = MissingIndicatorParams

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """``<column><suffix>`` for every column (with ``missing-only``, those that may be added)."""
        return [f"{c}{params.suffix}" for c in params.columns]

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.impute import MissingIndicator as Sk

        marks = np.where(frame[params.columns].isna().to_numpy(), np.nan, 0.0)
        if len(frame):
            chosen = Sk(features=params.features, missing_values=np.nan).fit(marks).features_
        else:
            chosen = np.arange(len(params.columns)) if params.features == "all" else np.array([], int)
        indicated = [params.columns[i] for i in chosen]
        names = [f"{c}{params.suffix}" for c in indicated]
        clash = [n for n in names if n in frame.columns]
        if clash:
            raise StepError(f"step '{params.name}': indicator column(s) {clash} already exist; choose "
                            "another suffix", step=params.name)
        return {"indicated": indicated, "names": names}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column, name in zip(state["indicated"], state["names"]):
            frame[name] = frame[column].isna().to_numpy().astype("float64")
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``<column><suffix>`` = ``pd.isna`` of each indicated column's array, as float64."""
        marks = list(zip(state["indicated"], state["names"]))

        def apply(batch: Columns) -> None:
            for column, name in marks:
                batch.set(name, pd.isna(batch.array(column)).astype("float64"))

        return Kernel(apply)
