"""Scoring rules. An eligibility rule looks at the raw request row and says whether it may be
scored; a row it refuses is excluded with ``ineligible:<rule>`` and gets no prediction.

A rule function has the signature ``fn(frame: DataFrame, params: dict) -> boolean Series``
(True = eligible); it receives a copy of the rule's declared ``columns`` only, is row-local, and is
saved by name, version, source, columns and parameters.

An output rule runs after the model on the rows that got a prediction and adds declared, typed
columns (e.g. a risk band); see :class:`OutputRule`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from lakescore.errors import InputError
from lakescore.frames import column_arrays, frame_of
from lakescore.usercode import FunctionRef


@dataclass(frozen=True)
class EligibilityRule:
    """A saved eligibility rule."""

    name: str
    version: int
    function: FunctionRef
    columns: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)

    def eligible(self, frame: pd.DataFrame) -> np.ndarray:
        """Boolean array of shape (n_rows,): True where the row may be scored (the rule gets a copy
        of its declared columns of ``frame``).

        Raises
        ------
        InputError
            When the rule does not return one boolean per row.
        """
        return self.eligible_on(fresh_columns(frame, self.columns))

    def eligible_on(self, frame: pd.DataFrame) -> np.ndarray:
        """:meth:`eligible` of a frame that holds exactly the rule's columns and that the rule may keep
        or change (a fresh copy: the compiled plan builds one from its arrays)."""
        result = self.function.load()(frame, dict(self.params))
        if isinstance(result, pd.Series) and result.dtype == bool and len(result) == len(frame):
            return result.to_numpy()  # the common answer, taken as it is
        series = pd.Series(result) if result is not None else None
        is_bool = series is not None and (pd.api.types.is_bool_dtype(series.dtype) or len(series) == 0)
        values = np.asarray(series.fillna(False), dtype=bool) if is_bool else None  # type: ignore[union-attr, type-var]  # series is set when is_bool; numpy's stub refuses dtype=bool; missing = not eligible
        if values is None or values.shape != (len(frame),):
            raise InputError(
                f"eligibility rule '{self.name}' returned {type(result).__name__} of dtype "
                f"{getattr(series, 'dtype', None)} and shape {getattr(series, 'shape', None)}; it must return one "
                "boolean per row "
                f"({len(frame)} rows). Return a boolean Series aligned with the frame."
            )
        return values

    @property
    def reason(self) -> str:
        return f"ineligible:{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "function": self.function.to_json(),
                "columns": list(self.columns), "params": self.params}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EligibilityRule:
        return cls(data["name"], data["version"], FunctionRef.from_json(data["function"]),
                   tuple(data["columns"]), data["params"])


def load_rules(scoring: Any) -> list[EligibilityRule]:
    """Build the eligibility rules named in config/scoring.yml (a :class:`ScoringConfig`)."""
    rules = []
    for rule in scoring.eligibility:
        dotted = rule.function if ":" in rule.function else f"{scoring.module}:{rule.function}"
        ref = FunctionRef.resolve_name(dotted, what=f"eligibility rule '{rule.name}'")
        rules.append(EligibilityRule(rule.name, rule.version, ref, tuple(rule.columns), dict(rule.params)))
    return rules


# --- output rules -----------------------------------------------------------------------------
# An output rule runs on the rows that got a prediction: ``fn(frame, params) -> DataFrame | Series``
# where ``frame`` is a copy of the rule's declared raw ``columns`` plus ``prediction`` (and
# ``probability`` for a classifier). It returns the declared output columns, one value per row;
# lakescore casts them to the declared types and leaves them null on excluded rows.

OUTPUT_TYPES: dict[str, str] = {"string": "string", "double": "Float64", "long": "Int64", "boolean": "boolean"}
"""Declared output type (the model signature's name) -> pandas dtype of the column."""
_KEPT_AS_RETURNED = frozenset({"string", "long", "boolean"})


@cache
def _output_dtype(kind: str) -> Any:
    """The pandas dtype object of a declared output type (``pandas_dtype`` of its name, made once)."""
    return pd.api.types.pandas_dtype(OUTPUT_TYPES[kind])


@dataclass(frozen=True)
class OutputRule:
    """A saved output rule: name, version, function, the raw columns it reads, typed outputs."""

    name: str
    version: int
    function: FunctionRef
    columns: tuple[str, ...]
    outputs: tuple[tuple[str, str], ...]
    params: dict[str, Any] = field(default_factory=dict)

    def compute(self, raw: pd.DataFrame, scored: pd.DataFrame) -> pd.DataFrame:
        """The rule's outputs for predicted rows.

        Parameters
        ----------
        raw : DataFrame of shape (n_rows, >= len(columns))
            The raw request rows that got a prediction.
        scored : DataFrame of shape (n_rows, 2 or 4)
            Their ``prediction`` (and ``probability``), same index.

        Returns
        -------
        DataFrame of shape (n_rows, len(outputs)), each column of its declared pandas dtype.

        Raises
        ------
        InputError
            When the function does not return the declared columns, one value per row, or a
            value that its declared type cannot hold.
        """
        return frame_of(self.arrays(raw, scored), raw.index)  # as pd.DataFrame(out, index=raw.index)

    def arrays(self, raw: pd.DataFrame, scored: pd.DataFrame) -> dict[str, Any]:
        """:meth:`compute`'s columns as ``name -> array`` (each of length ``len(raw)``, in its
        declared pandas dtype, in the declared order), without the frame around them; same
        parameters and errors."""
        names = [n for n, _ in self.outputs]
        if len(raw) == 0:
            return {n: pd.array([], dtype=OUTPUT_TYPES[t]) for n, t in self.outputs}
        given = [c for c in ("prediction", "probability") if c in scored.columns and c not in self.columns]
        frame = _rule_frame(raw, scored, self.columns, given)
        result = self.function.load()(frame, dict(self.params))
        if isinstance(result, pd.Series) and len(names) == 1 and len(result) == len(raw):
            columns = {names[0]: result}  # a single output's Series, taken as its column
        elif isinstance(result, pd.DataFrame) and len(result) == len(raw) and list(result.columns) == names:
            columns = {name: result[name] for name in names}
        else:
            raise InputError(
                f"output rule '{self.name}' returned {type(result).__name__} with columns "
                f"{list(getattr(result, 'columns', []))} for {len(raw)} rows; it must return a DataFrame "
                f"with columns {names}, one row per input row (a Series for a single output)."
            )
        return {name: self._typed(name, kind, columns[name]) for name, kind in self.outputs}

    def _typed(self, name: str, kind: str, column: pd.Series) -> Any:
        """The values of one returned column as an array of the declared ``kind``'s pandas dtype: the
        column's own array when it already has that dtype (a string, Int64 or boolean array holds
        only values of its type and NA), else each value converted (a Float64 column too: the
        conversion reads NaN as missing, as from any other dtype).

        Raises
        ------
        InputError
            A value the declared type cannot hold (naming the rule, the column and the value).
        """
        if kind in _KEPT_AS_RETURNED and column.dtype == _output_dtype(kind):
            return column.array
        try:
            return pd.array(column.to_numpy(dtype=object), dtype=OUTPUT_TYPES[kind])
        except (TypeError, ValueError) as err:
            raise InputError(f"output rule '{self.name}': column '{name}' is declared {kind} but holds "
                             f"{column.iloc[0]!r}; return {kind} values or fix outputs in "
                             "config/scoring.yml") from err

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "function": self.function.to_json(),
                "columns": list(self.columns), "outputs": [list(o) for o in self.outputs],
                "params": self.params}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OutputRule:
        return cls(data["name"], data["version"], FunctionRef.from_json(data["function"]),
                   tuple(data["columns"]), tuple((n, t) for n, t in data["outputs"]), data["params"])


def fresh_columns(frame: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """``frame[list(columns)].copy()``: a new frame of those columns (fresh arrays, each in its own
    dtype, the same index) that a rule may change, built from copies of the arrays when the labels
    are unique and all there (a frame's take and copy cost more than a one-row rule)."""
    labels = frame.columns
    if not (labels.is_unique and len(set(columns)) == len(columns) and all(c in labels for c in columns)):
        return frame[list(columns)].copy()
    return frame_of({c: values.copy() for c, values in column_arrays(frame, columns)}, frame.index)


def _rule_frame(raw: pd.DataFrame, scored: pd.DataFrame, columns: tuple[str, ...], given: list[str]) -> pd.DataFrame:
    """A fresh frame of ``raw``'s ``columns`` then ``scored``'s ``given`` columns, on ``raw``'s index,
    that the rule may write into: ``pd.DataFrame({c: raw[c] ...}, index=raw.index, copy=True)``,
    built from copies of the arrays (the constructor's per-column checks cost more than a one-row
    rule). When the two frames' indexes differ, or a label repeats, the constructor aligns them."""
    if not (raw.index.is_unique and scored.index.equals(raw.index) and raw.columns.is_unique
            and scored.columns.is_unique):
        return pd.DataFrame({**{c: raw[c] for c in columns}, **{c: scored[c] for c in given}},
                            index=raw.index, copy=True)
    arrays = {**dict(column_arrays(raw, columns)), **dict(column_arrays(scored, given))}
    return frame_of({c: values.copy() for c, values in arrays.items()}, raw.index)


def load_output_rules(scoring: Any, *, key: str = "output") -> list[OutputRule]:
    """Build the output rules named in config/scoring.yml ``output:`` (a :class:`ScoringConfig`), or
    with ``key="combined_rules"`` a model set's combined rules (output rules whose columns name the
    set's component columns: :mod:`lakescore.model_set`)."""
    what = "combined rule" if key == "combined_rules" else "output rule"
    rules = []
    for rule in getattr(scoring, key, []):
        dotted = rule.function if ":" in rule.function else f"{scoring.module}:{rule.function}"
        ref = FunctionRef.resolve_name(dotted, what=f"{what} '{rule.name}'")
        rules.append(OutputRule(rule.name, rule.version, ref, tuple(rule.columns),
                                tuple(rule.outputs.items()), dict(rule.params)))
    return rules


def add_outputs(rules: tuple[OutputRule, ...] | list[OutputRule], raw: pd.DataFrame, scored: pd.DataFrame,
                rows: np.ndarray) -> pd.DataFrame:
    """``scored`` (n_rows, ...) with each output rule's columns added after its own: values on the
    predicted positions ``rows``, null elsewhere. ``raw`` is the request frame, same index as
    ``scored``. Returns a new frame (``scored`` is not changed)."""
    every = len(rows) == len(scored)  # rows are ascending positions: all of them, in order
    added: dict[str, Any] = {}
    for rule in rules:
        values = rule.arrays(raw, scored) if every else rule.arrays(raw.iloc[rows], scored.iloc[rows])
        for name, kind in rule.outputs:
            if every:
                added[name] = values[name]
                continue
            column = pd.array([pd.NA] * len(scored), dtype=OUTPUT_TYPES[kind])
            if len(rows):
                column[rows] = values[name]
            added[name] = column
    if not added:
        return scored
    # as ``scored[name] = column`` for each in turn: a name scored has keeps its place, a new one comes last
    return frame_of({**dict(column_arrays(scored, scored.columns)), **added}, scored.index)
