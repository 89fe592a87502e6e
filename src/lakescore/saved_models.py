"""Reading back whatever a logged model's ``chain`` artifact holds: a chain, a model set or a pasting ensemble.

The three are saved as folders: a :class:`~lakescore.chain.FittedChain` as ``chain.json`` and its
parts; a :class:`~lakescore.model_set.ModelSet` as ``set.json`` and ``components/<name>/``; a
:class:`~lakescore.pasting.PastingEnsemble` as a model set whose ``set.json`` says
``"combine": "pasting"``. :func:`load_saved` tells them apart, so it sits above both
:mod:`lakescore.model_set` and :mod:`lakescore.pasting` (the ensemble is a set underneath).
:func:`chain_meta` reads the saved JSON alone from a logged model (preflight, serving and monitoring
read it so), without loading the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lakescore.chain import FittedChain
from lakescore.model_set import SET_FILE, ModelSet, is_set_folder
from lakescore.pasting import PastingEnsemble, is_pasting

CHAIN_FILE = "chain.json"  # a single chain's metadata in a logged model; a model set saves set.json instead


def load_saved(path: str | Path) -> FittedChain | ModelSet:
    """The chain, model set or pasting ensemble saved in the folder ``path``.

    Parameters
    ----------
    path : str or Path
        A saved model folder, e.g. the logged model's ``chain`` artifact.

    Returns
    -------
    FittedChain, ModelSet or PastingEnsemble
        A :class:`~lakescore.pasting.PastingEnsemble` when ``set.json`` says ``"combine": "pasting"``,
        a :class:`~lakescore.model_set.ModelSet` for any other ``set.json``, else a
        :class:`~lakescore.chain.FittedChain`.
    """
    if not is_set_folder(path):
        return FittedChain.load(path)
    meta = json.loads((Path(path) / SET_FILE).read_text())
    return PastingEnsemble.load(path) if is_pasting(meta) else ModelSet.load(path)


def chain_meta(model_uri: str) -> dict[str, Any]:
    """The logged model's ``chain.json`` (engine, task, classes, threshold, ...), or a model set's
    ``set.json`` (engine, decision_rule, feature_lookups, components), without loading the model.

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>``, ``runs:/...`` or a folder.

    Returns
    -------
    dict
        The saved JSON object.

    Raises
    ------
    mlflow.exceptions.MlflowException, OSError
        ``chain.json`` is there but cannot be read (permissions, a broken link, a lost connection):
        the reader's own error, never a fallback to ``set.json``. With no ``chain.json`` and no
        ``set.json``, the reader's error for ``set.json``.
    """
    import posixpath

    import mlflow  # registry access: only where a logged model is read

    from lakescore.model_uri import pyfunc_uri

    chain_dir = f"{pyfunc_uri(model_uri)}/artifacts/chain"
    try:
        saved = mlflow.artifacts.download_artifacts(f"{chain_dir}/{CHAIN_FILE}")
    except Exception:
        # What a missing file raises differs by artifact store (a local store's RESOURCE_DOES_NOT_EXIST,
        # a cloud store's HTTP 404 inside INTERNAL_ERROR), so absence is read from the listing:
        # only a folder without chain.json is a model set's, whatever went wrong.
        listed = {posixpath.basename(info.path) for info in mlflow.artifacts.list_artifacts(chain_dir)}
        if CHAIN_FILE in listed:
            raise
        saved = mlflow.artifacts.download_artifacts(f"{chain_dir}/{SET_FILE}")
    return dict(json.loads(Path(saved).read_text()))
