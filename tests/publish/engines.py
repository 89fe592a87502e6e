"""The writers the publication tests run on: the values of the ``engine`` fixture
(tests/publish/conftest.py), and the subset a test of a decision overrides it with."""

from __future__ import annotations

import pytest

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
