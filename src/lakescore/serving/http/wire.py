"""What travels over HTTP, and on to the replicas over their channel: request bodies in, scored rows out.

A request is parsed and checked here once, in the endpoint; what goes on to a replica
(:mod:`lakescore.serving.replicas.channel`) or the cold path is ``ScoreRequest.to_body()``, and the replica reads
it back with :func:`forwarded` without checking the values again.

Requests take MLflow's scoring-server shapes, so the same body works for ``mlflow models serve``::

    {"dataframe_records": [{"month": 10, "carrier": "UA", ...}, ...]}
    {"dataframe_split": {"columns": ["month", ...], "data": [[10, ...], ...]}}

plus an optional ``"model_version": N`` (a version other than the endpoint's is scored on the
cold path). The body is parsed once (orjson; the standard library only when orjson refuses it, which
is how the ``NaN`` literal is read) straight into one list per column, and every value is checked
against the model signature's column types before a row is scored; each problem names the row, the
column and what is allowed. ``NaN`` in a numeric column is a missing value, as a NaN in a Delta
double column is on the batch routes, and travels on as null; ``NaN`` elsewhere and ``Infinity``
anywhere are refused. Replies carry JSON ``null`` for a missing prediction, probability or reason,
never NaN or ``"<NA>"``. A lookup model's requests add two types
(:mod:`lakescore.serving.features`): ``key`` (text, a whole number or null) and ``timestamp`` (ISO
8601 text, required, forwarded as UTC text and built into a ``datetime64[ns, UTC]`` column).

pandas is imported only where a frame is built or read (a replica), never by the endpoint process.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from lakescore.errors import RequestError
from lakescore.serving.features import KEY_KIND, TIMESTAMP_KIND

if TYPE_CHECKING:
    import pandas as pd

INTEGER_TYPES = {"long", "integer"}
FLOAT_TYPES = {"double", "float"}
MAX_PROBLEMS_SHOWN = 5
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class ScoreRequest:
    """A validated request: each column's values (coerced to the signature's type, None for
    missing) and the asked version. No pandas: :meth:`frame` builds the frame where it is needed."""

    values: dict[str, list[Any]]
    types: dict[str, str]
    model_version: int | None = None

    @property
    def n_rows(self) -> int:
        return len(next(iter(self.values.values()), []))

    @property
    def frame(self) -> pd.DataFrame:
        """DataFrame of shape (n_rows, n_columns): Int64 and boolean (``pd.NA`` for null), float64
        (NaN for null) and object (str or None) columns, as a batch route reads them."""
        import pandas as pd  # only a replica builds frames

        return pd.DataFrame({name: _array(values, self.types[name]) for name, values in self.values.items()},
                            copy=False)

    def records(self) -> list[dict[str, Any]]:
        """The rows as JSON-ready dicts (null for missing)."""
        names = list(self.values)
        return [dict(zip(names, row)) for row in zip(*self.values.values())]

    def to_body(self) -> bytes:
        """The request as ``dataframe_split`` JSON, columns in the model's order (what the endpoint
        forwards to a replica or the cold path; see :func:`forwarded`)."""
        data = [list(row) for row in zip(*self.values.values())]
        return orjson.dumps({"dataframe_split": {"columns": list(self.values), "data": data}})


def forwarded(body: bytes, columns: dict[str, str]) -> ScoreRequest:
    """The request of a body the endpoint built with :meth:`ScoreRequest.to_body`, read without
    checking a value again: the endpoint checked them against the same signature.

    Parameters
    ----------
    body : bytes
        ``dataframe_split`` JSON from ``to_body``.
    columns : dict of str to str
        The reader's input columns -> signature types, in the model's order.

    Returns
    -------
    ScoreRequest
        The forwarded values. When the body's columns are not exactly ``columns`` (a candidate
        version with another signature), the body is parsed and checked as a new request instead,
        so the problem is a 400 naming the column.
    """
    split = orjson.loads(body)["dataframe_split"]
    if split["columns"] != list(columns):
        return parse_request(body, columns, max_body_bytes=len(body), max_rows=max(len(split["data"]), 1))
    data = split["data"]
    values = {name: [row[i] for row in data] for i, name in enumerate(columns)}
    return ScoreRequest(values, dict(columns))


def _array(values: list[Any], kind: str) -> Any:
    import numpy as np
    import pandas as pd

    if kind in FLOAT_TYPES:
        return np.array([math.nan if v is None else v for v in values], dtype="float64")
    if kind in INTEGER_TYPES:
        return _masked(values, int, "Int64")
    if kind == "boolean":
        return _masked(values, bool, "boolean")
    if kind == TIMESTAMP_KIND:  # checked ISO 8601 text in UTC: the dtype a point-in-time join compares
        return pd.DatetimeIndex(pd.to_datetime(values, utc=True, format="ISO8601"))
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # element by element: a list value stays one value
        out[i] = value
    return out


def _masked(values: list[Any], kind: type, dtype: str) -> Any:
    """An Int64 or boolean array (``dtype``) of ``values``, missing as ``pd.NA``: what
    ``pd.array(values, dtype=dtype)`` gives. Values that are all of type ``kind`` or None (what the
    request's check leaves) are set into the array's data and mask directly: ``pd.array`` looks at
    each value's type first (0.028 ms for a one-row column: with 8 such columns, half of a one-row
    request's frame of 17 columns). Anything else goes through ``pd.array``, which checks it."""
    import numpy as np
    import pandas as pd

    if all(type(v) is kind or v is None for v in values):
        mask = np.array([v is None for v in values], dtype=bool)
        try:
            data = np.array([False if v is None else v for v in values], dtype="int64" if kind is int else "bool")
        except OverflowError:  # a whole number beyond int64, not from a checked request: pd.array says so
            return pd.array(values, dtype=dtype)
        return pd.arrays.IntegerArray(data, mask) if kind is int else pd.arrays.BooleanArray(data, mask)
    return pd.array(values, dtype=dtype)


def _kind(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity"
    return {bool: "true/false", int: "a whole number", float: "a number", str: "text",
            list: "a list", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


Coerce = Callable[[Any], tuple[Any, "str | None"]]


def _whole(value: Any) -> tuple[Any, str | None]:
    # null (and NaN, a missing number) is a value like any other: the recipe imputes it or the row is excluded
    if value is None:
        return None, None
    if type(value) is int:
        return (value, None) if INT64_MIN <= value <= INT64_MAX else (None, "a whole number within 64 bits or null")
    if type(value) is float:
        if math.isnan(value):
            return None, None
        if value.is_integer() and abs(value) < 2**63:  # a float past 2**63 has lost its exact value
            return int(value), None
    return None, "a whole number or null"


def _number(value: Any) -> tuple[Any, str | None]:
    if value is None:
        return None, None
    if type(value) is float:
        if math.isnan(value):
            return None, None
        return (value, None) if math.isfinite(value) else (None, "a finite number or null")
    if type(value) is int:
        return float(value), None
    return None, "a finite number or null"


def _text(value: Any) -> tuple[Any, str | None]:
    return (value, None) if value is None or type(value) is str else (None, "text or null")


def _flag(value: Any) -> tuple[Any, str | None]:
    return (value, None) if value is None or type(value) is bool else (None, "true, false or null")


def _key(value: Any) -> tuple[Any, str | None]:
    # a lookup key: a null or unknown key finds no feature row, and the recipe imputes the features
    if value is None or type(value) is str:
        return value, None
    whole, wanted = _whole(value)
    return (whole, None) if wanted is None else (None, "text, a whole number or null")


def _timestamp(value: Any) -> tuple[Any, str | None]:
    # a point-in-time lookup needs the row's own time: null or text that is not a time is refused
    wanted = "an ISO 8601 timestamp like '2013-01-01T05:00:00Z' (a point-in-time lookup needs one)"
    if type(value) is not str:
        return None, wanted
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        return None, wanted
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return when.isoformat(), None


def _other(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, float) and not math.isfinite(value):
        return None, "a finite value or null"
    return value, None


def _coercer(kind: str) -> Coerce:
    """How a value of a column of signature type ``kind`` is checked and coerced."""
    if kind in INTEGER_TYPES:
        return _whole
    if kind in FLOAT_TYPES:
        return _number
    return {"string": _text, "boolean": _flag, KEY_KIND: _key, TIMESTAMP_KIND: _timestamp}.get(kind, _other)


def _loads(body: bytes) -> Any:
    """orjson, or the standard library when orjson refuses the body (it reads ``NaN`` and
    ``Infinity`` literals and integers over 64 bits, which orjson does not)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as fast_err:
        try:
            return json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RequestError(f"request body is not valid JSON ({err}); send an object like "
                               '{"dataframe_records": [{"month": 10, ...}]}') from fast_err


def _rows(payload: dict[str, Any]) -> tuple[list[Any], list[str] | None]:
    """The request's rows and, for ``dataframe_split``, its column names (rows are then lists)."""
    if "dataframe_records" in payload:
        records = payload["dataframe_records"]
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise RequestError("dataframe_records must be a list of objects, one per row, like "
                               '[{"month": 10, "carrier": "UA"}]')
        return records, None
    split = payload["dataframe_split"]
    if not isinstance(split, dict) or not isinstance(split.get("columns"), list) \
            or not isinstance(split.get("data"), list):
        raise RequestError('dataframe_split must be an object {"columns": [...], "data": [[...], ...]}')
    columns, data = split["columns"], split["data"]
    for i, row in enumerate(data):
        if not isinstance(row, list) or len(row) != len(columns):
            raise RequestError(f"dataframe_split.data row {i} must be a list of {len(columns)} values "
                               f"(one per column); got {str(row)[:80]}")
    if not all(isinstance(c, str) for c in columns) or len(set(columns)) != len(columns):
        raise RequestError(f"dataframe_split.columns must be distinct column names; got {str(columns)[:120]}")
    return data, columns


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
        One list per column, in the model's order: int, float, str or bool values, None for null
        (and for NaN in a ``long``/``integer``/``double``/``float`` column: a missing number).

    Raises
    ------
    RequestError
        413 over a limit; 400 for malformed JSON, an unknown key, an unknown or missing column, or a
        value of the wrong type, including NaN outside a numeric column and Infinity anywhere (up to
        five problems listed, each naming row and column).
    """
    if len(body) > max_body_bytes:
        raise RequestError(f"request body is {len(body):,} bytes; the limit is {max_body_bytes:,} "
                           "(max_body_bytes in config/serving.yml). Send fewer rows per request.",
                           http_status=413, limit="max_body_bytes")
    payload = _loads(body)
    if not isinstance(payload, dict):
        raise RequestError(f"request body must be a JSON object; got {_kind(payload)}. Send "
                           '{"dataframe_records": [...]} or {"dataframe_split": {...}}')
    shapes = [k for k in ("dataframe_records", "dataframe_split") if k in payload]
    unknown = [k for k in payload if k not in ("dataframe_records", "dataframe_split", "model_version")]
    if unknown or len(shapes) != 1:
        raise RequestError(f"request keys must be exactly one of dataframe_records, dataframe_split, plus "
                           f"optional model_version; got {sorted(payload)}")
    version = payload.get("model_version")
    if version is not None and (type(version) is not int or version < 1):
        raise RequestError(f"model_version must be a positive whole number or absent; got {version!r}")
    rows, names = _rows(payload)
    if not rows:
        raise RequestError("the request has no rows; send at least one")
    if len(rows) > max_rows:
        raise RequestError(f"the request has {len(rows):,} rows; the limit is {max_rows:,} "
                           "(max_rows_per_request in config/serving.yml). Split it into smaller requests.",
                           http_status=413, limit="max_rows_per_request")
    values = _checked_split(rows, names, columns) if names is not None else _checked_records(rows, columns)
    return ScoreRequest(values, dict(columns), version)


def _checked_split(data: list[list[Any]], names: list[str], columns: dict[str, str]) -> dict[str, list[Any]]:
    known = ", ".join(columns)
    problems = [f"unknown column {n!r} in row 0; the model reads {known}" for n in names if n not in columns]
    problems += [f"row 0 lacks column {n!r}; every row needs {known}" for n in columns if n not in names]
    values: dict[str, list[Any]] = {}
    if not problems:
        for name, kind in columns.items():
            at, coerce = names.index(name), _coercer(kind)
            column = values[name] = []
            for i, row in enumerate(data):
                value, wanted = coerce(row[at])
                if wanted:
                    problems.append(_problem(name, kind, wanted, row[at], i))
                column.append(value)
    return _or_refuse(values, problems)


def _checked_records(records: list[dict[str, Any]], columns: dict[str, str]) -> dict[str, list[Any]]:
    problems: list[str] = []
    coercers = {name: _coercer(kind) for name, kind in columns.items()}
    values: dict[str, list[Any]] = {name: [] for name in columns}
    known = ", ".join(columns)
    for i, record in enumerate(records):
        problems += [f"unknown column {n!r} in row {i}; the model reads {known}" for n in record if n not in columns]
        for name, coerce in coercers.items():
            if name not in record:
                problems.append(f"row {i} lacks column {name!r}; every row needs {known}")
                continue
            value, wanted = coerce(record[name])
            if wanted:
                problems.append(_problem(name, columns[name], wanted, record[name], i))
            values[name].append(value)
        if len(problems) >= MAX_PROBLEMS_SHOWN:
            break
    return _or_refuse(values, problems)


def _problem(name: str, kind: str, wanted: str, value: Any, row: int) -> str:
    return f"column {name!r} needs {wanted} ({kind}); got {value!r:.40} ({_kind(value)}) in row {row}"


def _or_refuse(values: dict[str, list[Any]], problems: list[str]) -> dict[str, list[Any]]:
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        raise RequestError("; ".join(shown) + ". Fix the request's columns and values.",
                           columns=sorted({p.split("'")[1] for p in shown if "'" in p}))
    return values


def scored_rows(scored: pd.DataFrame, *, model_version: int, served: str,
                feature_tables: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """JSON-ready rows of a ``FittedChain.predict`` frame, each with ``model_version`` and ``served``,
    and for a lookup model ``feature_tables`` (``[{"table", "version"}]``: what the row was joined with).

    Missing values (``pd.NA``, NaN, None) become ``None`` so the JSON carries ``null``; numpy
    scalars become Python ones.
    """
    columns = {}
    for name in scored.columns:
        values = scored[name].to_numpy(dtype=object, na_value=None).tolist()  # Python scalars, None for missing
        columns[name] = [v.item() if hasattr(v, "item") else v for v in values]  # numpy scalars in object columns
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())] if columns else []
    for row in rows:
        row["model_version"] = model_version
        row["served"] = served
        if feature_tables is not None:
            row["feature_tables"] = feature_tables
    return rows


def error_payload(err: Exception) -> tuple[int, dict[str, Any]]:
    """HTTP status and JSON payload (``{"error_code", "message", ...}``) of an error: a
    :class:`~lakescore.errors.LakescoreError` with its own code and status, anything else 500
    ``scoring_failed``."""
    from lakescore.errors import LakescoreError

    if isinstance(err, LakescoreError):
        fields = {k: v for k, v in err.fields.items() if isinstance(v, (str, int, float, list))}
        return err.http_status, {"error_code": err.code, "message": str(err), **fields}
    return 500, {"error_code": "scoring_failed",
                 "message": f"{type(err).__name__}: {err}. The replica keeps serving; check the input rows or the "
                            "model, and see the replica's log."}


def dumps(payload: Any) -> bytes:
    """JSON bytes (orjson) that never hold NaN or Infinity: a non-finite float is written as null."""
    return orjson.dumps(payload)
