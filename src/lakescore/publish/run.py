"""What a publish did (:class:`PublishResult`), and the facts of the rows it commits
(:class:`FrameFacts`: schema, row count, period nulls and bounds), computed where the rows are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakescore.frames import spark_arrow_schema
from lakescore.publish.state import delta_schema
from lakescore.runtime.base import DeltaEngine


@dataclass(frozen=True)
class PublishResult:
    """What a publish did: the decision's message, the table version after, the receipt, and the
    engine that wrote (or would have written, for a no-op): ``delta-rs`` or ``spark-delta``."""

    table: str
    action: str
    message: str
    table_version: int | None
    receipt: dict[str, Any] | None
    engine: DeltaEngine = DeltaEngine.DELTA_RS

    def summary(self) -> dict[str, Any]:
        return {"table": self.table, "action": self.action, "message": self.message,
                "table_version": self.table_version, "engine": str(self.engine), "receipt": self.receipt}


@dataclass(frozen=True)
class FrameFacts:
    """What a :class:`~lakescore.publish.plan.PublishRequest` needs of the rows to commit.

    ``schema`` holds ``(column, Delta type)`` pairs (:func:`lakescore.publish.state.delta_schema`);
    ``period_nulls`` / ``period_low`` / ``period_high`` describe ``publication.period_column``
    (0 / None / None when it is unset or not a column of the rows).
    """

    schema: tuple[tuple[str, str], ...]
    rows: int
    has_period: bool = False
    period_nulls: int = 0
    period_low: Any = None
    period_high: Any = None


def arrow_facts(data: pa.Table, period_column: str | None) -> FrameFacts:
    """The :class:`FrameFacts` of an Arrow table (the single-node route's rows, in this process)."""
    if not period_column or period_column not in data.column_names:
        return FrameFacts(delta_schema(data.schema), data.num_rows)
    column = data[period_column]
    bounds = pc.min_max(column).as_py() if data.num_rows else {"min": None, "max": None}
    return FrameFacts(delta_schema(data.schema), data.num_rows, True, column.null_count, bounds["min"], bounds["max"])


def _fact_columns(frame: Any, period_column: str | None) -> tuple[list[Any], bool, bool]:
    """The aggregate columns of a Spark DataFrame's facts (``rows``, and with the period column
    ``nulls``, ``low``, ``high``), whether it has the period column, and whether that column is
    a timestamp (its bounds then cross as microseconds since the epoch, ``unix_micros``)."""
    from pyspark.sql import functions as F  # Spark only on this route
    from pyspark.sql.types import TimestampType

    rows = F.count(F.lit(1)).alias("rows")
    if not period_column or period_column not in frame.columns:
        return [rows], False, False
    col = F.col(period_column)
    stamp = isinstance(frame.schema[period_column].dataType, TimestampType)
    low, high = (F.unix_micros(F.min(col)), F.unix_micros(F.max(col))) if stamp else (F.min(col), F.max(col))
    return [rows, F.sum(col.isNull().cast("long")).alias("nulls"), low.alias("low"), high.alias("high")], True, stamp


def _bound(value: Any, stamp: bool) -> Any:
    """A period bound as :class:`FrameFacts` holds it: a timestamp's microseconds as a UTC
    ``pandas.Timestamp``, whatever the session or the driver's time zone."""
    import pandas as pd  # only for the UTC timestamp of a bound

    return pd.Timestamp(value, unit="us", tz="UTC") if stamp and value is not None else value


def _facts_of(schema: tuple[tuple[str, str], ...], row: Any, has_period: bool, stamp: bool) -> FrameFacts:
    if not has_period:
        return FrameFacts(schema, int(row["rows"]))
    return FrameFacts(schema, int(row["rows"]), True, int(row["nulls"] or 0), _bound(row["low"], stamp),
                      _bound(row["high"], stamp))


def spark_facts(frame: Any, period_column: str | None) -> FrameFacts:
    """The :class:`FrameFacts` of a Spark DataFrame: the schema from Spark's (as Arrow, timestamps
    in UTC), and the row count, period nulls and bounds from one aggregate on the executors.

    A timestamp bound crosses as microseconds since the epoch (``unix_micros``) and comes back as
    a UTC ``pandas.Timestamp``, whatever the session or the driver's time zone.
    """
    columns, has_period, stamp = _fact_columns(frame, period_column)
    return _facts_of(delta_schema(spark_arrow_schema(frame.schema)), frame.agg(*columns).first(), has_period, stamp)


def observe_facts(frame: Any, period_column: str | None) -> tuple[Any, Callable[[], dict[str, Any]]]:
    """``frame`` with its facts observed (``DataFrame.observe``): the action that computes it (the
    score workflow's staging write) counts them on the way, with no pass of its own.

    Parameters
    ----------
    frame : pyspark.sql.DataFrame
        The predictions about to be staged.
    period_column : str or None
        ``publication.period_column``.

    Returns
    -------
    (pyspark.sql.DataFrame, callable)
        The observed frame, and a function to call once an action on it has finished: the
        facts as JSON (what :func:`saved_facts` reads back), without the schema.
    """
    from pyspark.sql import Observation  # Spark only on this route

    columns, has_period, stamp = _fact_columns(frame, period_column)
    observation = Observation()
    observed = frame.observe(observation, *columns)

    def facts() -> dict[str, Any]:
        found = observation.get
        return {"period_column": period_column if has_period else None, "rows": int(found["rows"]),
                "period_nulls": int(found.get("nulls") or 0), "stamp": stamp,
                "period_low": _to_json(found.get("low")), "period_high": _to_json(found.get("high"))}

    return observed, facts


def checked_facts(frame: Any, totals: dict[str, Any], period_column: str | None) -> dict[str, Any]:
    """The facts of ``frame`` (the one pass's predictions) as :func:`observe_facts` saves them, from
    the totals of the key check of the source read they are scored from
    (:func:`lakescore.publish.spark_delta.check_keys_within` with ``period_column``): the UDF keeps
    one row per source row and carries the period column through, so rows and period facts are
    the source's, known before the UDF runs.

    Parameters
    ----------
    frame : pyspark.sql.DataFrame
        The predictions (only their schema is read: no job).
    totals : dict
        ``rows`` and, with the period column, ``nulls``, ``low``, ``high``.
    period_column : str or None
        ``publication.period_column``.
    """
    from pyspark.sql.types import TimestampType  # Spark only on this route

    has_period = bool(period_column) and period_column in frame.columns and "nulls" in totals
    stamp = has_period and isinstance(frame.schema[period_column].dataType, TimestampType)
    return {"period_column": period_column if has_period else None, "rows": int(totals.get("rows") or 0),
            "period_nulls": int(totals.get("nulls") or 0) if has_period else 0, "stamp": stamp,
            "period_low": _to_json(totals.get("low")) if has_period else None,
            "period_high": _to_json(totals.get("high")) if has_period else None}


def _to_json(value: Any) -> Any:
    """A bound as JSON: a date or a time zone-less timestamp tagged with its ISO text; numbers
    (a timestamp's microseconds) and text as they are."""
    from datetime import date, datetime

    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    return value


def _from_json(value: Any) -> Any:
    """The bound :func:`_to_json` saved."""
    from datetime import date, datetime

    if isinstance(value, dict):
        return datetime.fromisoformat(value["datetime"]) if "datetime" in value else date.fromisoformat(value["date"])
    return value


def saved_facts(frame: Any, saved: dict[str, Any] | None, period_column: str | None) -> FrameFacts | None:
    """The :class:`FrameFacts` of ``frame`` from the facts observed when it was staged
    (:func:`observe_facts`; the schema is ``frame``'s, read without a job), or None when none
    were saved or they were observed for another period column (then count them again,
    :func:`spark_facts`)."""
    if not saved or "rows" not in saved:
        return None
    has_period = bool(period_column) and period_column in frame.columns
    if saved.get("period_column") != (period_column if has_period else None):
        return None
    row = {"rows": saved["rows"], "nulls": saved["period_nulls"], "low": _from_json(saved["period_low"]),
           "high": _from_json(saved["period_high"])}
    return _facts_of(delta_schema(spark_arrow_schema(frame.schema)), row, has_period, bool(saved.get("stamp")))
