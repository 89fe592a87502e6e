"""Where things live: the :class:`Runtime` Protocol (:mod:`lakescore.runtime.base`) and its
placements, ``local`` (:mod:`lakescore.runtime.local`, the embedded default) and ``databricks``
(not built yet: ``runtime_unsupported``)."""

from __future__ import annotations

import os
from pathlib import Path

from lakescore.errors import RuntimeUnsupportedError
from lakescore.runtime.base import PLACEMENTS, Placement, Runtime
from lakescore.runtime.local import LocalRuntime

__all__ = ["PLACEMENTS", "LocalRuntime", "Placement", "Runtime", "get_runtime"]


def get_runtime(kind: str | None = None, *, home: str | Path = ".lakescore", target: str = "dev") -> Runtime:
    """The runtime for ``kind`` (default: ``databricks`` when ``DATABRICKS_RUNTIME_VERSION`` is set, else ``local``).

    Raises
    ------
    RuntimeUnsupportedError
        ``databricks``: not built yet in this version.
    """
    on_cluster = "DATABRICKS_RUNTIME_VERSION" in os.environ
    kind = kind or ("databricks" if on_cluster else "local")
    if kind == "databricks":
        raise RuntimeUnsupportedError(
            "runtime 'databricks' is not built yet in this version: run with --runtime local "
            "(the embedded default)."
        )
    return LocalRuntime(Path(home), target=target)
