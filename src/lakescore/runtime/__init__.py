"""Where things live: the :class:`Runtime` Protocol (:mod:`lakescore.runtime.base`) and its
placements, ``local`` (:mod:`lakescore.runtime.local`, the embedded default) and ``databricks``
(:mod:`lakescore.runtime.databricks`, a bundle job on a workspace)."""

from __future__ import annotations

import os
from pathlib import Path

from lakescore.runtime.base import PLACEMENTS, DeltaEngine, Placement, Runtime, publication_engine
from lakescore.runtime.databricks import DatabricksRuntime
from lakescore.runtime.local import LocalRuntime
from lakescore.runtime.serving_address import ServingBind, serving_bind

__all__ = ["PLACEMENTS", "DatabricksRuntime", "DeltaEngine", "LocalRuntime", "Placement", "Runtime", "ServingBind",
           "get_runtime", "publication_engine", "serving_bind"]


def get_runtime(kind: str | None = None, *, home: str | Path | None = None, target: str | None = None,
                catalog: str | None = None, schema: str | None = None, experiment: str | None = None) -> Runtime:
    """The runtime for ``kind``: ``databricks`` when ``DATABRICKS_RUNTIME_VERSION`` is set (every
    Databricks cluster and serverless job sets it), else ``local``.

    Parameters
    ----------
    kind : {"local", "databricks"} or None
        ``--runtime``; None chooses as above.
    home : str or Path, optional
        ``--home``. Local: default ``.lakescore``. Databricks: default ``LAKESCORE_HOME``, else
        the volume ``/Volumes/<catalog>/<schema>/lakescore``; a local folder is refused.
    target : str, optional
        ``--target``, the bundle target; default ``BUNDLE_TARGET``, else ``dev``.
    catalog, schema : str, optional
        ``--catalog`` / ``--schema``: the databricks runtime's default volume.
    experiment : str, optional
        ``--experiment``: the databricks runtime's MLflow experiment path (default
        ``LAKESCORE_EXPERIMENT``, else the bundle's default root path + ``/lakescore``).

    Raises
    ------
    RuntimeUnsupportedError
        ``databricks`` with a local ``home`` (relative, or under ``.lakescore``).
    """
    on_cluster = "DATABRICKS_RUNTIME_VERSION" in os.environ
    kind = kind or ("databricks" if on_cluster else "local")
    target = target or os.environ.get("BUNDLE_TARGET") or "dev"
    if kind == "databricks":
        from lakescore.runtime.databricks import from_environment

        return from_environment(target=target, catalog=catalog, schema=schema, home=home, experiment=experiment)
    return LocalRuntime(Path(home or ".lakescore"), target=target)
