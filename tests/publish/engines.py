"""The writers the publication tests run on: the values of the ``engine`` fixture
(tests/publish/conftest.py), and the subset a test of a decision overrides it with; and what a
writer left in a table's data files (:func:`stats_columns_in`)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

# delta-rs (single node); the Spark Delta writer on staged rows (lakescore publish --run-id); the
# Spark Delta writer in the one pass of lakescore score --publish (spark_route.one_pass_rows)
ENGINES = ["delta-rs", pytest.param("spark", marks=pytest.mark.spark),
           pytest.param("spark-one-pass", marks=pytest.mark.spark)]

# A test of what a publication decides (a model or schema change, an update in the window, an empty
# window, a reused run id) runs on the two writers: the one pass reads the rows it commits from the
# source instead of the staged run, then plans and commits them as the Spark writer does, and an empty
# run is never published in one pass. What the one pass changes (the key check, the counts, a replay,
# a watermark, a period replaced, a process killed) is tested on all three.
WRITERS = ENGINES[:2]


def stats_columns_in(path: str) -> set[str]:
    """The columns that any data file of the Delta table at ``path`` has statistics on (its
    current files, read from the log by delta-rs)."""
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=False))
    return {field.name for field in actions.schema.field("null_count").type}
