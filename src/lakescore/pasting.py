"""``PastingEnsemble``: slice chains fitted on disjoint slices of the rows, scored as one model.

Split training (:mod:`lakescore.workflows.split_train`) fits the searched configuration, the whole
chain (its own preprocessing state and model), on each slice of the training rows; pasting
(Breiman's "pasting small votes") combines them:

- classification (binary): ``probability`` is the mean of the members' positive-class
  probabilities, and ``prediction`` the label of that mean under the search's decision threshold
  (without one: ``classes[1]`` when the mean is above 0.5, as ``argmax`` labels);
- regression: ``prediction`` is the mean of the members' predictions.

The output has a single chain's columns and dtypes (``prediction``, ``probability``,
``scoring_status``, ``exclusion_reason``, then the output rules' columns), so every route scores,
publishes and monitors it as it does one chain. A row any member excludes is excluded, with the
first excluding member's reason (each member's step names are the recipe's, so the reason reads
as a single chain's): a row is scored by every member or not at all.

It is a :class:`~lakescore.model_set.ModelSet` underneath: saved as ``set.json`` (with
``"combine": "pasting"``) and ``components/<slice>/``, sealed by the same certificate, admitted
like a set (every member checked as a chain, the whole probed). Multiclass models are refused
(a member's ``probability`` is its predicted class's only, and means of those are meaningless).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lakescore.chain import PASS_ROWS, STATUS_EXCLUDED, STATUS_PREDICTED, FittedChain, _masked
from lakescore.errors import SplitTrainingError
from lakescore.frames import require_columns, to_pandas
from lakescore.members import FromFirst
from lakescore.model_set import SET_FILE, ModelSet
from lakescore.rules import add_outputs
from lakescore.thresholds import Threshold, default_rule

COMBINE = "pasting"
NOTE = ("pasting: each of the {slices} slice chains was fitted on its own slice of the training rows and "
        "their outputs are averaged; this is not the same as one fit over all {rows:,} rows")


@dataclass(frozen=True)
class PastingEnsemble(ModelSet):
    """Slice chains averaged into one model (see the module docstring).

    Attributes
    ----------
    threshold : Threshold or None
        The search's decision threshold, applied to the mean probability (classification).
    coverage : dict
        What the version records: ``rows`` (training rows the slices covered), ``slices``,
        ``left_out`` (rows no slice fitted) and ``note``.
    """

    threshold: Threshold | None = None
    coverage: dict[str, Any] = field(default_factory=dict)

    # a single chain's surface: every slice chain has the same task, classes, class and rules
    task = FromFirst("``classification`` or ``regression``, as each slice chain's.")
    classes = FromFirst("The slice chains' classes (classification), None for regression.")
    model_class = FromFirst("The slice chains' model class, e.g. ``LogisticRegression``.")
    label_dtype = FromFirst("The pandas dtype of ``prediction``.")
    output_rules = FromFirst("The output rules, applied after the mean.")
    output_dtypes = FromFirst("A single chain's columns and dtypes.")

    @property
    def decision_rule(self) -> str:
        """The search's rule, on the mean probability, e.g. ``threshold 0.37 (...)``."""
        return self.threshold.describe() if self.threshold else default_rule(self.task, self.classes)

    def predict(self, frame: Any, *, pass_rows: int = PASS_ROWS) -> pd.DataFrame:
        """Score ``frame`` with every member and average: one output row per input row, same index.

        Parameters
        ----------
        frame : pandas or Polars DataFrame of shape (n_rows, >= len(input_columns))
        pass_rows : int, default :data:`lakescore.chain.PASS_ROWS`
            Each member's most rows per model call (:meth:`FittedChain.predict`).

        Returns
        -------
        DataFrame of shape (n_rows, len(output_dtypes)), columns and dtypes as :attr:`output_dtypes`.

        Raises
        ------
        InputError
            A required column is missing.
        ValueError
            ``pass_rows`` below 1.
        """
        frame = to_pandas(frame)
        require_columns(frame, self.input_columns, what="the pasting ensemble")
        excluded = np.zeros(len(frame), dtype=bool)
        reasons = np.full(len(frame), None, dtype=object)
        column = "probability" if self.task == "classification" else "prediction"
        total = np.zeros(len(frame))
        for _, member in self.components:
            out = member.predict(frame, pass_rows=pass_rows)
            mine = (out["scoring_status"] == STATUS_EXCLUDED).to_numpy(dtype=bool)
            first = mine & ~excluded
            reasons[first] = out["exclusion_reason"].to_numpy()[first]
            excluded |= mine
            total += out[column].to_numpy(dtype="float64", na_value=np.nan)
        rows = np.flatnonzero(~excluded)
        mean = total[rows] / len(self.components)
        columns: dict[str, Any] = {"prediction": _masked(self._labels(mean) if self.task == "classification" else mean,
                                                         rows, len(frame), self.label_dtype)}
        if self.task == "classification":
            proba = np.full(len(frame), np.nan)
            proba[rows] = mean
            columns["probability"] = pd.arrays.FloatingArray(proba, np.isnan(proba))
        status = np.where(excluded, STATUS_EXCLUDED, STATUS_PREDICTED).astype(object)
        columns["scoring_status"] = pd.array(status, dtype="string")
        columns["exclusion_reason"] = pd.array(reasons, dtype="string")
        out = pd.DataFrame(columns, index=frame.index, copy=False)
        return add_outputs(self.output_rules, frame, out, rows) if self.output_rules else out

    def _labels(self, mean: np.ndarray) -> np.ndarray:
        """Labels of the mean positive-class probabilities (see the module docstring)."""
        classes = list(self.classes or [])
        if self.threshold is not None:
            return self.threshold.labels(np.column_stack([1 - mean, mean]), classes)
        return np.asarray(classes)[(mean > 0.5).astype(int)]

    # --- save / load ------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """A model set's folder (:meth:`ModelSet.save`) whose ``set.json`` adds ``combine: pasting``,
        the task, the classes, the search's threshold and the coverage."""
        folder = super().save(path)
        meta = json.loads((folder / SET_FILE).read_text())
        meta.update({"combine": COMBINE, "task": self.task, "classes": self.classes,
                     "threshold": self.threshold.to_json() if self.threshold else None, "coverage": self.coverage})
        (folder / SET_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
        return folder

    @classmethod
    def load(cls, path: str | Path) -> PastingEnsemble:
        """Read an ensemble written by :meth:`save`."""
        meta = json.loads((Path(path) / SET_FILE).read_text())
        members = ModelSet.load(path)
        return cls(components=members.components,
                   threshold=Threshold.from_json(meta["threshold"]) if meta.get("threshold") else None,
                   coverage=dict(meta.get("coverage") or {}))


def is_pasting(meta: dict[str, Any]) -> bool:
    """True when a saved set's ``set.json`` content describes a pasting ensemble."""
    return meta.get("combine") == COMBINE


def paste(members: list[tuple[str, FittedChain]], *, threshold: Threshold | None,
          coverage: dict[str, Any]) -> PastingEnsemble:
    """The pasting ensemble of fitted slice chains.

    Parameters
    ----------
    members : list of (str, FittedChain)
        Slice chains (e.g. ``slice_00``), each fitted on its own slice; at least 2.
    threshold : Threshold or None
        The search's decision threshold (classification).
    coverage : dict
        ``rows``, ``slices``, ``left_out``, ``note`` (see :class:`PastingEnsemble`).

    Raises
    ------
    SplitTrainingError
        Fewer than 2 members, members of different tasks or classes, or a multiclass model.
    """
    if len(members) < 2:
        raise SplitTrainingError(f"pasting needs at least 2 slice chains; got {len(members)}; the sampled fit stands",
                                 slices=len(members))
    first = members[0][1]
    odd = [name for name, chain in members if (chain.task, chain.classes) != (first.task, first.classes)]
    if odd:
        raise SplitTrainingError(f"slice chain {odd[0]} learned other classes than {members[0][0]} "
                                 f"({first.classes}); a slice missed a class: give each worker more rows "
                                 "(raise max_rows) or keep the sampled fit", slice=odd[0])
    if first.task == "classification" and len(first.classes or []) != 2:
        raise SplitTrainingError(f"pasting averages a binary classifier's probabilities; {first.model_class} has "
                                 f"{len(first.classes or [])} classes {first.classes}; the sampled fit stands "
                                 "(multiclass pasting is not built)")
    return PastingEnsemble(components=tuple(members), threshold=threshold, coverage=dict(coverage))
