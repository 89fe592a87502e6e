"""``lakescore serve`` on the databricks runtime, for tests/serving/test_serve_command.py.

Only the workspace is replaced, at the seams tests/runtime/test_databricks.py uses: MLflow's URIs
point at the test's SQLite registry (``<home>/mlflow.db``) and the volume is a temporary folder.
The one Databricks-side lookup of the serving address,
:func:`lakescore.runtime.serving_address.cluster_facts`, answers with ``driver`` as the driver's
address (an address of this machine) and a made-up workspace, org and cluster.

Usage: ``python dbx_serve_child.py DRIVER CONFIG_DIR HOME``
"""

from __future__ import annotations

import sys
from pathlib import Path

import lakescore.runtime.serving_address as serving_address
from lakescore.config import load_project
from lakescore.runtime import DatabricksRuntime
from lakescore.runtime.databricks import MlflowUris
from lakescore.runtime.local import EXPERIMENT
from lakescore.workflows.serve import serve

WORKSPACE, ORG, CLUSTER = "adb-1234567890123456.7.azuredatabricks.net", "1234567890123456", "0101-123456-abcde123"


def main(driver: str, config_dir: str, home: str) -> None:
    serving_address.cluster_facts = lambda runtime: serving_address.ClusterFacts(WORKSPACE, ORG, CLUSTER, driver)
    db = f"sqlite:///{Path(home) / 'mlflow.db'}"
    runtime = DatabricksRuntime(Path(home), uris=MlflowUris(db, db), experiment=EXPERIMENT)
    serve(load_project(config_dir), runtime)


if __name__ == "__main__":
    main(*sys.argv[1:4])
