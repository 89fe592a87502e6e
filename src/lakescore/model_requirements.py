"""The ``requirements.txt`` a registered lakescore model declares.

Without ``pip_requirements`` MLflow infers a model's requirements by loading it in a child Python
process and recording what it imported (``mlflow.utils.environment.infer_pip_requirements``): about
5 s of every registration here, for a list lakescore knows already. A worker loads a lakescore
model through the ``lakescore`` package, which imports numpy, pandas, pyarrow and scipy, and the
model's own libraries, whose exact versions the certificate seals (``libraries``: scikit-learn,
and xgboost or lightgbm when the model is theirs); a polars chain also imports polars. MLflow adds
its own pin (``mlflow==``) to the list.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Mapping

BASE_MODULES = ("lakescore", "numpy", "pandas", "pyarrow", "scipy")
"""The modules every lakescore model imports on load, besides the model's own libraries."""

ENGINE_MODULES = {"pandas": (), "polars": ("polars",)}
"""The modules a chain's frame engine (``FittedChain.engine``) adds."""


@functools.cache
def _installed() -> Mapping[str, list[str]]:
    """Each importable top-level module's distributions, read once per process (about 0.1 s: every
    installed distribution's file list)."""
    return importlib.metadata.packages_distributions()


def pip_requirements(libraries: Mapping[str, str], engine: str) -> list[str]:
    """``<distribution>==<installed version>`` for each module a worker imports to load the model,
    in a stable order: :data:`BASE_MODULES`, then the certificate's ``libraries`` (names as the
    certificate writes them: ``scikit-learn``, ``xgboost``, ``lightgbm``), then the modules of the
    chain's ``engine`` (:data:`ENGINE_MODULES`).

    A module's distribution is the one installed here (``importlib.metadata.packages_distributions``:
    ``xgboost`` is installed as ``xgboost-cpu``; where several install files of one module, the one
    named as the module); a module installed by no distribution (the source
    tree on ``PYTHONPATH``) is left out, as MLflow's own inference leaves it out.

    Raises
    ------
    KeyError
        An engine other than ``pandas`` or ``polars`` (the chain validated it when it was fitted).
    """
    modules = [*BASE_MODULES, *(("sklearn" if name == "scikit-learn" else name) for name in libraries),
               *ENGINE_MODULES[engine]]
    installed = _installed()
    lines: list[str] = []
    for module in dict.fromkeys(modules):
        distributions = installed.get(module)
        if distributions:
            named = [d for d in distributions if d.lower().replace("_", "-") == module.replace("_", "-")]
            distribution = (named or distributions)[0]  # polars beside polars-runtime-32, say
            line = f"{distribution}=={importlib.metadata.version(distribution)}"
            if line not in lines:
                lines.append(line)
    return lines
