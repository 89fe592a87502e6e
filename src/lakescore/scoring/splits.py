"""The Spark route reads its source in the source's own file splits: no shuffle, every core a split.

A ``repartition`` before the UDF would shuffle the whole table (every row written and read once
more) only to spread it over the cores. Spark's file scan already aims at that: it cuts files into
splits of ``min(maxPartitionBytes, max(openCostInBytes, total_bytes / cores))`` (Spark's
``FilePartition.maxSplitBytes``; defaults 128 MiB and 4 MiB), so a table smaller than
``cores x 4 MiB`` lands in fewer splits than there are cores. :func:`spread_reads` sets
``spark.sql.files.maxPartitionBytes`` to ``total_bytes / cores`` (:func:`split_bytes`) for the
read of the source, so such a table is cut per core too.

A split never cuts a Parquet row group: a row group goes whole to the split holding its middle.
A table whose files hold fewer row groups than there are cores (one small file written as one
row group) leaves cores idle whatever the setting; that is the table's layout to change
(``OPTIMIZE``, smaller row groups), not a reason to shuffle it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MAX_PARTITION_BYTES_CONF = "spark.sql.files.maxPartitionBytes"
SPLIT_FLOOR_BYTES = 1 << 20
"""Smallest split set (1 MiB): below it a split holds a fraction of a Parquet row group, and each
extra task starts a Python worker that loads the model."""
SPLIT_CEILING_BYTES = 128 << 20
"""Largest split set (128 MiB, Spark's default ``maxPartitionBytes``): never coarser than Spark."""
REFUSED_CONF = frozenset({"CONFIG_NOT_AVAILABLE", "CANNOT_MODIFY_CONFIG", "CANNOT_MODIFY_STATIC_CONFIG"})
"""Error conditions of a session that will not take a conf (Databricks serverless answers
``CONFIG_NOT_AVAILABLE``; Spark's own for a conf fixed at start-up): the route then keeps the
session's own value."""

log = logging.getLogger(__name__)


def split_bytes(total_bytes: int, cores: int) -> int:
    """The ``maxPartitionBytes`` that cuts ``total_bytes`` of files into one split per core.

    ``ceil(total_bytes / cores)``, bounded to [:data:`SPLIT_FLOOR_BYTES`, :data:`SPLIT_CEILING_BYTES`].

    >>> split_bytes(7_259_684, 2)
    3629842
    >>> split_bytes(10_000, 2), split_bytes(10 << 30, 8)
    (1048576, 134217728)
    """
    share = -(-max(int(total_bytes), 0) // max(int(cores), 1))
    return int(min(SPLIT_CEILING_BYTES, max(SPLIT_FLOOR_BYTES, share)))


def scanned_bytes(frame: Any) -> int | None:
    """Bytes of the files behind ``frame``'s scans: the sum of the optimized plan's leaves'
    ``sizeInBytes`` (for a Delta read, the sizes of the snapshot's or change feed's files).

    Returns
    -------
    int or None
        None on a Spark Connect session (no JVM plan to ask) or when the plan gives no size.
    """
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:  # Spark Connect: the plan lives on the server
        return None
    leaves = jdf.queryExecution().optimizedPlan().collectLeaves()
    sizes = [int(str(leaves.apply(i).stats().sizeInBytes())) for i in range(leaves.length())]
    return sum(sizes) if sizes else None


def set_conf(spark: Any, key: str, value: str) -> bool:
    """Set a session conf where the session allows it.

    Returns
    -------
    bool
        False when the session refuses the key (an error of condition in :data:`REFUSED_CONF`,
        as serverless gives); other errors propagate.
    """
    from pyspark.errors import PySparkException  # pyspark only where a conf is set

    try:
        spark.conf.set(key, value)
    except PySparkException as err:
        if (err.getCondition() or "") not in REFUSED_CONF:
            raise
        log.info("lakescore: the session keeps its own %s (%s)", key, err.getCondition())
        return False
    return True


def spread_reads(source: Any) -> int | None:
    """Set ``spark.sql.files.maxPartitionBytes`` on ``source``'s session so that its scan gives
    every core a split (:func:`split_bytes` of :func:`scanned_bytes` over the classic session's
    ``defaultParallelism``).

    The value is read when the plan runs, so it stays set on the session after this call; the
    score workflow puts it back once the run is staged (:func:`reads_restored`). On Spark Connect,
    or where the session refuses the conf, nothing is set and Spark's own split size holds.

    Parameters
    ----------
    source : pyspark.sql.DataFrame
        The rows the route scores, not yet run.

    Returns
    -------
    int or None
        The bytes set, or None when nothing was.
    """
    total = scanned_bytes(source)
    if total is None:
        return None
    spark = source.sparkSession
    value = split_bytes(total, spark.sparkContext.defaultParallelism)
    return value if set_conf(spark, MAX_PARTITION_BYTES_CONF, str(value)) else None


@contextmanager
def reads_restored(spark: Any) -> Iterator[None]:
    """Put ``spark.sql.files.maxPartitionBytes`` back as it was (unset if it was) when the block
    ends: :func:`spread_reads` sets it for one scored source, and later reads in the session (the
    prediction table, another window) must keep Spark's own split size."""
    from pyspark.errors import PySparkException  # pyspark only where a conf is set

    try:
        previous = spark.conf.get(MAX_PARTITION_BYTES_CONF, None)
    except PySparkException:  # a session that will not show it will not take it either
        yield
        return
    try:
        yield
    finally:
        if previous is None:
            try:
                spark.conf.unset(MAX_PARTITION_BYTES_CONF)
            except PySparkException:
                pass  # refused: the session never took our value either
        else:
            set_conf(spark, MAX_PARTITION_BYTES_CONF, previous)
