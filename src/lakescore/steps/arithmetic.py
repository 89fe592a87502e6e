"""Declared arithmetic between columns and constants: FeatureMath (one new column) and
FeatureGeneration (several).

The grammar is Python's, restricted to: column names (each listed in ``columns``), number
constants, ``+ - * /``, unary ``-``/``+`` and parentheses. Anything else (``**``, calls, attribute
access, comparisons, text) is refused at config time, naming the piece and the fix. Each row's
result is computed from its own values in float64, left to right as Python groups the expression.

Division by zero has a declared meaning, ``on_zero_division``:

- ``null`` (default): the result is NaN (missing);
- ``zero``: the division gives 0.0 (e.g. a ratio of counts where 0/0 means "none").

A missing input gives NaN; a result that overflows to an infinity gives NaN too, so a new column
never holds an infinity. Nothing is learned, so both may run in the ``pre_split:`` recipe.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from lakescore.columns import Columns, Kernel
from lakescore.steps.base import StepKind, StepParams, float_matrix, register
from lakescore.steps.derived import NAME, _no_clash

OnZero = Literal["null", "zero"]
OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


@lru_cache(maxsize=256)
def parse(expression: str) -> ast.expr:
    """The checked syntax tree of ``expression``.

    Raises
    ------
    ValueError
        Naming the first piece outside the grammar (``**``, a call, a comparison, text...) and the fix.
    """
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError as err:
        raise ValueError(f"expression {expression!r} is not valid arithmetic ({err.msg}); write e.g. "
                         "'distance / air_time * 60'") from err
    for node in ast.walk(tree):
        allowed = isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Load)) or type(node) in OPS \
            or isinstance(node, (ast.USub, ast.UAdd)) \
            or isinstance(node, ast.Constant) and type(node.value) in (int, float)
        if not allowed:
            piece = ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__
            raise ValueError(f"expression {expression!r} uses {piece!r}, which FeatureMath does not allow; use "
                             "only column names, numbers, + - * / and parentheses")
    return tree


def names_in(expression: str) -> list[str]:
    """The column names ``expression`` reads, in order of first use."""
    return list(dict.fromkeys(n.id for n in ast.walk(parse(expression)) if isinstance(n, ast.Name)))


def evaluate(expression: str, values: dict[str, np.ndarray], on_zero_division: str, rows: int) -> np.ndarray:
    """Float64 (rows,): ``expression`` on float64 columns ``values``; NaN where an input is missing
    or the result is infinite; division by zero as ``on_zero_division`` says."""
    with np.errstate(all="ignore"):
        out = _eval(parse(expression), values, on_zero_division, rows)
    return np.where(np.isfinite(out), out, np.nan).astype("float64")


def _eval(node: ast.expr, values: dict[str, np.ndarray], on_zero: str, rows: int) -> np.ndarray:
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.Constant):
        return np.full(rows, float(node.value))  # type: ignore[arg-type]  # the expression parser admits numeric constants only
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values, on_zero, rows)
        return -operand if isinstance(node.op, ast.USub) else operand
    if not isinstance(node, ast.BinOp):  # parse() admits nothing else
        raise TypeError(f"unexpected expression node {type(node).__name__}")
    left, right = _eval(node.left, values, on_zero, rows), _eval(node.right, values, on_zero, rows)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    quotient = left / right
    if on_zero == "null":
        return np.where(right == 0, np.nan, quotient)
    return np.where((right == 0) & ~np.isnan(left), 0.0, quotient)  # a missing numerator stays missing


class MathParams(StepParams):
    expression: str
    output: str = Field(pattern=NAME)
    on_zero_division: OnZero = "null"

    @model_validator(mode="after")
    def _reads_its_columns(self) -> MathParams:
        _check_names({self.output: self.expression}, self.columns)
        return self


class GenerationParams(StepParams):
    features: dict[str, str] = Field(min_length=1)
    on_zero_division: OnZero = "null"

    @model_validator(mode="after")
    def _reads_its_columns(self) -> GenerationParams:
        bad = [name for name in self.features if re.fullmatch(NAME, name) is None]
        if bad:
            raise ValueError(f"feature names {bad} are not column names (letters, digits and _, not first a "
                             "digit); rename them")
        _check_names(self.features, self.columns)
        return self


def _features(params: Any) -> dict[str, str]:
    """New column -> expression, for either kind's params."""
    return dict(params.features) if isinstance(params, GenerationParams) else {params.output: params.expression}


def _check_names(features: dict[str, str], columns: list[str]) -> None:
    read: list[str] = []
    for expression in features.values():
        read += names_in(expression)
    unlisted = [n for n in dict.fromkeys(read) if n not in columns]
    if unlisted:
        raise ValueError(f"the expression reads {unlisted}, which columns {columns} does not list; add them to "
                         "columns")
    unused = [c for c in columns if c not in read]
    if unused:
        raise ValueError(f"columns lists {unused}, which no expression reads; drop them from columns")


class _Arithmetic(StepKind):
    fixed = True

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """The new columns: ``output`` (FeatureMath) or the keys of ``features``."""
        return list(_features(params))

    @classmethod
    def learn(cls, frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        features = _features(params)
        _no_clash(params.name, list(features), frame)
        return {"features": [[name, expression] for name, expression in features.items()],
                "on_zero_division": params.on_zero_division}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="FeatureMath")
        values = {c: data[:, i] for i, c in enumerate(state["columns"])}
        for name, expression in state["features"]:
            frame[name] = evaluate(expression, values, state["on_zero_division"], len(frame))
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each feature's expression on the batch's float64 columns."""
        columns, features, on_zero = list(state["columns"]), list(state["features"]), state["on_zero_division"]

        def apply(batch: Columns) -> None:
            values = {c: batch.floats(c, step="FeatureMath") for c in columns}
            for name, expression in features:
                batch.set(name, evaluate(expression, values, on_zero, len(batch)))

        return Kernel(apply)


@register
class FeatureMath(_Arithmetic):
    """Add one column ``output``: the arithmetic ``expression`` of ``columns`` and constants (see
    the module doc for the grammar and ``on_zero_division``). Output: float64.
    E.g. ``{step: FeatureMath, name: speed, columns: [distance, air_time], expression:
    "distance / (air_time / 60)", output: miles_per_hour}``.
    """

    kind = "FeatureMath"
    Params = MathParams


@register
class FeatureGeneration(_Arithmetic):
    """Add several columns at once: ``features: {name: expression, ...}`` with FeatureMath's
    grammar and one ``on_zero_division``. Output: float64 columns, in the order given.
    """

    kind = "FeatureGeneration"
    Params = GenerationParams

