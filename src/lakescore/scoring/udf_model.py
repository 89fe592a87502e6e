"""What the Spark route needs to run the same on a classic and a Spark Connect session: the model
as a local folder for ``spark_udf``, and the session's parallelism read from its conf.

Given ``models:/name/version`` on Spark Connect, ``mlflow.pyfunc.spark_udf`` (env_manager
``local``) makes every Python worker resolve the URI against the registry itself: with the local
SQLite registry the workers open it at the same moment and fail (``duplicate column name: step``,
MLflow's schema migration run twice). Resolved once on the driver into a folder, the URI is a
path the workers only copy. Both session kinds take that path, so the route has one code path;
each worker still re-verifies the certificate inside the folder before it scores a row.
"""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

DEFAULT_PARALLELISM = 200  # Spark's spark.sql.shuffle.partitions default: the last resort


def local_model(model_uri: str, folder: Path | None = None) -> str:
    """Download the logged model at ``model_uri`` once, into a new folder under ``folder``.

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>`` or any URI MLflow resolves (MLflow must point at the registry).
    folder : Path, optional
        Where the copy goes (the run store's ``models`` folder); default
        ``<system temp>/lakescore-models``. Each call makes a folder of its own, named after
        the URI, that outlives the call: a lazy Spark plan reads it when it runs.

    Returns
    -------
    str
        Absolute path of the model folder (with ``MLmodel``), for ``spark_udf``.
    """
    import mlflow  # heavy: only on the scoring path

    base = Path(folder) if folder is not None else Path(tempfile.gettempdir()) / "lakescore-models"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_uri.split(":", 1)[-1]).strip("_.") or "model"
    target = base / f"{name}-{uuid.uuid4().hex[:12]}"
    target.mkdir(parents=True)
    return str(Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=str(target))).resolve())


def default_parallelism(spark: Any) -> int:
    """Tasks that keep every core of ``spark``'s cluster busy, read from its conf (Connect-safe).

    ``spark.default.parallelism`` when set (the local runtime sets it to its cores), else
    ``spark.sql.shuffle.partitions`` when it is a number, else :data:`DEFAULT_PARALLELISM`.
    A classic session's ``sparkContext.defaultParallelism`` does not exist on Spark Connect.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        Classic or Spark Connect.

    Returns
    -------
    int
        At least 1.
    """
    for key in ("spark.default.parallelism", "spark.sql.shuffle.partitions"):
        try:
            value = spark.conf.get(key, None)
        except Exception:  # a serverless session refuses to show some confs
            value = None
        if value is not None and str(value).strip().isdigit() and int(value) > 0:
            return int(value)
    return DEFAULT_PARALLELISM
