"""The placement table: which engine reads and writes a prediction table, per placement and route."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakescore.runtime import PLACEMENTS, DatabricksRuntime, DeltaEngine, LocalRuntime, publication_engine


def test_the_publication_engine_is_decided_by_the_placement_and_the_route(tmp_path: Path) -> None:
    local, workspace = LocalRuntime(tmp_path / ".lakescore"), DatabricksRuntime(Path("/Volumes/main/flights/lakescore"))
    assert publication_engine(local, "spark") is DeltaEngine.SPARK_DELTA
    assert publication_engine(local, "single_node") is DeltaEngine.DELTA_RS  # no JVM for a one-process run
    assert publication_engine(workspace, "spark") is DeltaEngine.SPARK_DELTA
    assert publication_engine(workspace, "single_node") is DeltaEngine.SPARK_DELTA  # delta-rs has no UC credentials
    assert DeltaEngine.SPARK_DELTA == "spark-delta" and str(DeltaEngine.DELTA_RS) == "delta-rs"  # PublishResult.engine
    assert PLACEMENTS["databricks"].delta_writes.startswith("Spark Delta by name for both routes")
    with pytest.raises(ValueError, match="placement local has no publication engine for batch_compute 'gpu'"):
        PLACEMENTS["local"].publication_engine("gpu")  # type: ignore[arg-type]
