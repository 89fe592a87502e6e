"""What travels over HTTP: request bodies in, scored rows out.

Requests take MLflow's scoring-server shapes, so the same body works for ``mlflow models serve``::

    {"dataframe_records": [{"month": 10, "carrier": "UA", ...}, ...]}
    {"dataframe_split": {"columns": ["month", ...], "data": [[10, ...], ...]}}

plus an optional ``"model_version": N`` (a version other than the endpoint's is scored on the
cold path). Every value is checked against the model signature's column types before a row is
scored, and each problem names the row, the column and what is allowed. Replies carry JSON
``null`` for a missing prediction, probability or reason, never NaN or ``"<NA>"``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from lakescore.errors import RequestError

INTEGER_TYPES = {"long", "integer"}
FLOAT_TYPES = {"double", "float"}
MAX_PROBLEMS_SHOWN = 5
# nullable integer and boolean dtypes, as the batch routes read a Delta table (Int64, never float64)
DTYPES = {"long": "Int64", "integer": "Int64", "double": "float64", "float": "float64", "boolean": "boolean"}


@dataclass(frozen=True)
class ScoreRequest:
    """A validated request: each column's values (coerced to the signature's type) and the asked
    version. The pandas frame is built only when something needs it."""

    values: dict[str, list[Any]]
    types: dict[str, str]
    model_version: int | None = None

    @property
    def n_rows(self) -> int:
        return len(next(iter(self.values.values()), []))

    @cached_property
    def frame(self) -> pd.DataFrame:
        """DataFrame of shape (n_rows, n_columns): Int64 and boolean (``pd.NA`` for null), float64
        (NaN for null) and object (str or None) columns, as a batch route reads them."""
        return pd.DataFrame({name: pd.Series(values, dtype=DTYPES.get(self.types[name], "object"))
                             for name, values in self.values.items()})

    def records(self) -> list[dict[str, Any]]:
        """The rows as JSON-ready dicts (null for missing)."""
        names = list(self.values)
        return [dict(zip(names, row)) for row in zip(*self.values.values())]

    def to_body(self) -> bytes:
        """The request as ``dataframe_split`` JSON (how the endpoint forwards it to a copy)."""
        data = [list(row) for row in zip(*self.values.values())]
        return json.dumps({"dataframe_split": {"columns": list(self.values), "data": data}},
                          allow_nan=False).encode()


def _json_value(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _kind(value: Any) -> str:
    return {bool: "true/false", int: "a whole number", float: "a number", str: "text",
            list: "a list", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _coerce(value: Any, kind: str) -> tuple[Any, str | None]:
    """The value as the column type wants it, or a description of what was wrong."""
    if kind in INTEGER_TYPES:  # null is a value like any other: the recipe imputes it or the row is excluded
        if value is None:
            return None, None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None, "a whole number or null"
        if isinstance(value, float) and not value.is_integer():
            return None, "a whole number or null"
        return int(value), None
    if kind in FLOAT_TYPES:
        if value is None:
            return None, None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isinf(value):
            return None, "a finite number or null"
        return float(value), None
    if kind == "string":
        if value is None or isinstance(value, str):
            return value, None
        return None, "text or null"
    if kind == "boolean":
        if value is None or isinstance(value, bool):
            return value, None
        return None, "true, false or null"
    return value, None


def _records(payload: dict[str, Any]) -> list[dict[str, Any]]:
    if "dataframe_records" in payload:
        records = payload["dataframe_records"]
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise RequestError("dataframe_records must be a list of objects, one per row, like "
                               '[{"month": 10, "carrier": "UA"}]')
        return records
    split = payload["dataframe_split"]
    if not isinstance(split, dict) or not isinstance(split.get("columns"), list) \
            or not isinstance(split.get("data"), list):
        raise RequestError('dataframe_split must be an object {"columns": [...], "data": [[...], ...]}')
    columns = split["columns"]
    out = []
    for i, row in enumerate(split["data"]):
        if not isinstance(row, list) or len(row) != len(columns):
            raise RequestError(f"dataframe_split.data row {i} must be a list of {len(columns)} values "
                               f"(one per column); got {str(row)[:80]}")
        out.append(dict(zip(columns, row)))
    return out


def parse_request(body: bytes, columns: dict[str, str], *, max_body_bytes: int,
                  max_rows: int) -> ScoreRequest:
    """Parse and check one request body against the model's input columns.

    Parameters
    ----------
    body : bytes
        The raw request body (JSON).
    columns : dict of str to str
        Input column name -> signature type (``long``, ``double``, ``string``, ``boolean``, ...), in
        the model's order.
    max_body_bytes : int
        Largest body accepted, in bytes (``max_body_bytes`` in config/serving.yml).
    max_rows : int
        Most rows per request (``max_rows_per_request``).

    Returns
    -------
    ScoreRequest
        Values per column in the model's order; ``.frame`` is of shape (n_rows, len(columns)) with
        Int64 and boolean (pd.NA for null), float64 (NaN for null) and object (str or None) columns.

    Raises
    ------
    RequestError
        413 over a limit; 400 for malformed JSON, an unknown key, an unknown or missing column, or a
        value of the wrong type (up to five problems listed, each naming row and column).
    """
    if len(body) > max_body_bytes:
        raise RequestError(f"request body is {len(body):,} bytes; the limit is {max_body_bytes:,} "
                           "(max_body_bytes in config/serving.yml). Send fewer rows per request.",
                           http_status=413, limit="max_body_bytes")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(f"request body is not valid JSON ({err}); send an object like "
                           '{"dataframe_records": [{"month": 10, ...}]}') from err
    if not isinstance(payload, dict):
        raise RequestError(f"request body must be a JSON object; got {_kind(payload)}. Send "
                           '{"dataframe_records": [...]} or {"dataframe_split": {...}}')
    shapes = [k for k in ("dataframe_records", "dataframe_split") if k in payload]
    unknown = [k for k in payload if k not in ("dataframe_records", "dataframe_split", "model_version")]
    if unknown or len(shapes) != 1:
        raise RequestError(f"request keys must be exactly one of dataframe_records, dataframe_split, plus "
                           f"optional model_version; got {sorted(payload)}")
    version = payload.get("model_version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise RequestError(f"model_version must be a positive whole number or absent; got {version!r}")
    records = _records(payload)
    if not records:
        raise RequestError("the request has no rows; send at least one")
    if len(records) > max_rows:
        raise RequestError(f"the request has {len(records):,} rows; the limit is {max_rows:,} "
                           "(max_rows_per_request in config/serving.yml). Split it into smaller requests.",
                           http_status=413, limit="max_rows_per_request")
    return ScoreRequest(_checked(records, columns), dict(columns), version)


def _checked(records: list[dict[str, Any]], columns: dict[str, str]) -> dict[str, list[Any]]:
    problems: list[str] = []
    values: dict[str, list[Any]] = {name: [] for name in columns}
    known = ", ".join(columns)
    for i, record in enumerate(records):
        for name in record:
            if name not in columns:
                problems.append(f"unknown column {name!r} in row {i}; the model reads {known}")
        for name, kind in columns.items():
            if name not in record:
                problems.append(f"row {i} lacks column {name!r}; every row needs {known}")
                continue
            value, wanted = _coerce(record[name], kind)
            if wanted:
                problems.append(f"column {name!r} needs {wanted} ({kind}); got {record[name]!r:.40} "
                                f"({_kind(record[name])}) in row {i}")
            values[name].append(value)
        if len(problems) >= MAX_PROBLEMS_SHOWN:
            break
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        raise RequestError("; ".join(shown) + ". Fix the request's columns and values.",
                           columns=sorted({p.split("'")[1] for p in shown if "'" in p}))
    return values


def scored_rows(scored: pd.DataFrame, *, model_version: int, served: str) -> list[dict[str, Any]]:
    """JSON-ready rows of a ``FittedChain.predict`` frame, each with ``model_version`` and ``served``.

    Missing values (``pd.NA``, NaN, None) become ``None`` so the JSON carries ``null``.
    """
    columns = {name: [_json_value(v) for v in scored[name].astype(object).tolist()] for name in scored.columns}
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())] if columns else []
    for row in rows:
        row["model_version"] = model_version
        row["served"] = served
    return rows


def dumps(payload: Any) -> bytes:
    """JSON bytes that can never hold NaN (``allow_nan=False``)."""
    return json.dumps(payload, allow_nan=False, separators=(",", ":")).encode()
