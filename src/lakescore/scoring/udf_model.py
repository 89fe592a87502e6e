"""The run's own copy of the model for ``spark_udf``: a local folder the workers read.

Given ``models:/name/version`` on Spark Connect, ``mlflow.pyfunc.spark_udf`` (env_manager
``local``) makes every Python worker resolve the URI against the registry itself: with the local
SQLite registry the workers open it at the same moment and fail (``duplicate column name: step``,
MLflow's schema migration run twice). Resolved once on the driver into a folder, the URI is a
path the workers only copy. Both session kinds take that path, so the route has one code path;
each worker still re-verifies the certificate inside the folder before it scores a row.

The copy's ``MLmodel`` keeps the signature's outputs and params but no input schema. The inputs
are declared ``AnyType`` (see :func:`lakescore.packaging.signature_for`), and for such a column
MLflow's ``predict`` builds a new object column value by value before the model sees it: about
0.7 µs per value, and the Int64 and float64 columns arrive as objects, so lakescore's own
conformance (:func:`lakescore.conform.conform_inputs`, which checks every row against the kinds
saved in the model config) loses its column-wise paths. Without an input schema MLflow hands the
batch over as Arrow gave it. The registered model keeps its full signature.
"""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path


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
        Absolute path of the model folder (with ``MLmodel``, its input schema dropped), for
        ``spark_udf``.
    """
    import mlflow  # heavy: only on the scoring path
    from mlflow.models import Model, ModelSignature

    base = Path(folder) if folder is not None else Path(tempfile.gettempdir()) / "lakescore-models"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_uri.split(":", 1)[-1]).strip("_.") or "model"
    target = base / f"{name}-{uuid.uuid4().hex[:12]}"
    target.mkdir(parents=True)
    from lakescore.model_uri import pyfunc_uri

    path = Path(mlflow.artifacts.download_artifacts(artifact_uri=pyfunc_uri(model_uri), dst_path=str(target))).resolve()
    model = Model.load(str(path))
    if model.signature is not None:
        model.signature = ModelSignature(inputs=None, outputs=model.signature.outputs, params=model.signature.params)
        model.save(str(path / "MLmodel"))
    return str(path)
