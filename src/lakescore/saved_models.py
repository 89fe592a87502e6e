"""Reading back whatever a logged model's ``chain`` artifact holds: a chain, a model set or a pasting ensemble.

The three are saved as folders: a :class:`~lakescore.chain.FittedChain` as ``chain.json`` and its
parts; a :class:`~lakescore.model_set.ModelSet` as ``set.json`` and ``components/<name>/``; a
:class:`~lakescore.pasting.PastingEnsemble` as a model set whose ``set.json`` says
``"combine": "pasting"``. :func:`load_saved` tells them apart, so it sits above both
:mod:`lakescore.model_set` and :mod:`lakescore.pasting` (the ensemble is a set underneath).
"""

from __future__ import annotations

import json
from pathlib import Path

from lakescore.chain import FittedChain
from lakescore.model_set import SET_FILE, ModelSet, is_set_folder
from lakescore.pasting import PastingEnsemble, is_pasting


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
