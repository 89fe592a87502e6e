"""What a publish did (:class:`PublishResult`), and the facts of the rows it commits
(:class:`FrameFacts`: schema, row count, period nulls and bounds), computed where the rows are."""

from __future__ import annotations

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


def spark_facts(frame: Any, period_column: str | None) -> FrameFacts:
    """The :class:`FrameFacts` of a Spark DataFrame: the schema from Spark's (as Arrow, timestamps
    in UTC), and the row count, period nulls and bounds from one aggregate on the executors.

    A timestamp bound crosses as microseconds since the epoch (``unix_micros``) and comes back as
    a UTC ``pandas.Timestamp``, whatever the session or the driver's time zone.
    """
    import pandas as pd  # only for the UTC timestamp of a bound
    from pyspark.sql import functions as F  # Spark only on this route
    from pyspark.sql.types import TimestampType

    schema = delta_schema(spark_arrow_schema(frame.schema))
    if not period_column or period_column not in frame.columns:
        return FrameFacts(schema, int(frame.count()))
    col = F.col(period_column)
    stamp = isinstance(frame.schema[period_column].dataType, TimestampType)
    low, high = (F.unix_micros(F.min(col)), F.unix_micros(F.max(col))) if stamp else (F.min(col), F.max(col))
    row = frame.agg(F.count(F.lit(1)).alias("rows"), F.sum(col.isNull().cast("long")).alias("nulls"),
                    low.alias("low"), high.alias("high")).first()

    def bound(value: Any) -> Any:
        return pd.Timestamp(value, unit="us", tz="UTC") if stamp and value is not None else value

    return FrameFacts(schema, int(row["rows"]), True, int(row["nulls"] or 0), bound(row["low"]), bound(row["high"]))
