"""The Spark route reads its source in the source's own file splits: no shuffle, every core a split.

A ``repartition`` before the UDF would shuffle the whole table (every row written and read once
more) only to spread it over the cores. Spark's file scan already aims at that: it packs files
into splits of at most

    ``min(maxPartitionBytes, max(openCostInBytes, sum(file bytes + openCostInBytes) / cores))``

(Spark's ``FilePartition.maxSplitBytes``; defaults 128 MiB and 4 MiB), counting every file
``openCostInBytes`` larger than it is. With the default open cost a table smaller than about
``cores x 4 MiB`` lands in fewer splits than there are cores. :func:`spread_reads` lowers
``spark.sql.files.openCostInBytes`` to :data:`OPEN_COST_BYTES` (1 MiB) for the read of the
source, so such a table is cut per core too, and a table of many small files is still packed into
about one split per core: each split is a task whose Python worker loads the model (8 files of
336,776 flights cut at ``bytes / cores`` with a 4 MiB open cost on top are 8 splits for 2 cores,
and the one pass's warm call takes 0.3-0.8 s longer than over 2). Nothing is planned or read to
set it.

A split never cuts a Parquet row group: a row group goes whole to the split holding its middle.
A table whose files hold fewer row groups than there are cores (one small file written as one
row group) leaves cores idle whatever the setting; that is the table's layout to change
(``OPTIMIZE``, smaller row groups), not a reason to shuffle it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

OPEN_COST_CONF = "spark.sql.files.openCostInBytes"
OPEN_COST_BYTES = 1 << 20
"""The open cost set (1 MiB): the smallest split Spark then makes. Below it a split holds a
fraction of a Parquet row group, and each extra task starts a Python worker that loads the model."""
REFUSED_CONF = frozenset({"CONFIG_NOT_AVAILABLE", "CANNOT_MODIFY_CONFIG", "CANNOT_MODIFY_STATIC_CONFIG"})
"""Error conditions of a session that will not take a conf (Databricks serverless answers
``CONFIG_NOT_AVAILABLE``; Spark's own for a conf fixed at start-up): the route then keeps the
session's own value."""
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}

log = logging.getLogger(__name__)


def byte_size(text: str | None) -> int | None:
    """Bytes of a Spark size setting (``4194304``, ``4194304b``, ``4m``, ``1g``: Spark's
    ``JavaUtils.byteStringAs`` units, binary), or None when ``text`` is not one.

    >>> byte_size("4194304b"), byte_size("4m"), byte_size(" 1 GB "), byte_size("lots")
    (4194304, 4194304, 1073741824, None)
    """
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", (text or "").lower())
    if found is None or found.group(2) not in _UNITS:
        return None
    return int(found.group(1)) * _UNITS[found.group(2)]


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


def spread_reads(spark: Any) -> int | None:
    """Lower ``spark.sql.files.openCostInBytes`` on ``spark`` to :data:`OPEN_COST_BYTES` so that the
    scan of the source gives every core a split (see the module). A session whose open cost is
    already as low keeps it; so does one that refuses the conf (serverless).

    The value is read when the plan runs, so it stays set on the session after this call; the
    score workflow puts it back once the run is staged or published (:func:`reads_restored`).

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The session that reads the source (classic or Spark Connect).

    Returns
    -------
    int or None
        The bytes set, or None when nothing was.
    """
    from pyspark.errors import PySparkException  # pyspark only where a conf is set

    try:
        held = byte_size(spark.conf.get(OPEN_COST_CONF, None))
    except PySparkException:  # a session that will not show it will not take it either
        return None
    if held is not None and held <= OPEN_COST_BYTES:
        return None
    return OPEN_COST_BYTES if set_conf(spark, OPEN_COST_CONF, str(OPEN_COST_BYTES)) else None


@contextmanager
def reads_restored(spark: Any) -> Iterator[None]:
    """Put ``spark.sql.files.openCostInBytes`` back as it was (unset if it was) when the block
    ends: :func:`spread_reads` sets it for one scored source, and later reads in the session (the
    prediction table, another window) must keep Spark's own split size."""
    from pyspark.errors import PySparkException  # pyspark only where a conf is set

    try:
        previous = spark.conf.get(OPEN_COST_CONF, None)
    except PySparkException:  # a session that will not show it will not take it either
        yield
        return
    try:
        yield
    finally:
        if previous is None:
            try:
                spark.conf.unset(OPEN_COST_CONF)
            except PySparkException:
                pass  # refused: the session never took our value either
        else:
            set_conf(spark, OPEN_COST_CONF, previous)
