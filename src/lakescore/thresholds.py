"""Decision thresholds of classifiers: how probabilities become labels, and how training picks one.

A chain without a threshold labels rows with the model's own ``predict``. With one (training.yml
``model.threshold``), the label comes from the probabilities and the threshold alone; the
``probability`` column is never changed.

- Binary: the positive class (``classes[1]``, the second of the model's classes) when its
  probability is **at or above** the threshold (``p >= t``), else ``classes[0]``. This is
  scikit-learn's rule (``FixedThresholdClassifier``, and the thresholds of ``roc_curve``), so the
  value that ``optimize`` picks from the holdout's probabilities means the same at scoring.
- Multiclass: every class has a threshold; the class with the largest ``p / t`` wins, and on a tie
  the first in the model's class order. This is Spark ML's ``thresholds`` rule
  (``ProbabilisticClassificationModel``: "the class with largest value p/t is predicted") and mlr's
  ``setThreshold``. Equal thresholds give the argmax.
- ``optimize: f1 | youden`` (binary only) picks, among the distinct positive-class probabilities
  of the predicted holdout rows (the candidate set: each is a threshold under ``p >= t``), the one
  that maximises F1 of the positive class, or Youden's J = TPR - FPR. The counts come from
  ``sklearn.metrics.roc_curve`` (``drop_intermediate=False``) and the scores are compared as exact
  fractions of those counts, so a tie is a real tie; a tie goes to the **highest** threshold
  (fewest positive labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:  # annotations only: a worker imports no pydantic
    from lakescore.config import ThresholdOptimize

Method = Literal["fixed", "f1", "youden"]


@dataclass(frozen=True)
class Threshold:
    """A classifier's decision threshold, saved in the chain (``chain.json``) and sealed with it.

    Attributes
    ----------
    value : float or None
        Binary: the positive-class probability at or above which a row is labelled ``classes[1]``,
        in (0, 1). None for a multiclass threshold.
    classes : tuple of (label, float)
        Multiclass: each class of the model, in the model's order, with its threshold in (0, 1).
        Empty for a binary threshold.
    method : {"fixed", "f1", "youden"}, default "fixed"
        How it was chosen: written in training.yml, or ``optimize`` on the holdout.
    holdout_rows : int or None
        The holdout rows ``optimize`` chose on (predicted rows with a label); None when fixed.
    """

    value: float | None = None
    classes: tuple[tuple[Any, float], ...] = ()
    method: Method = "fixed"
    holdout_rows: int | None = None

    def labels(self, proba: np.ndarray, classes: list[Any]) -> np.ndarray:
        """Labels of rows from their probabilities (see the module docstring for the rule).

        Parameters
        ----------
        proba : ndarray of shape (n_rows, n_classes)
            ``predict_proba`` of the model, columns in ``classes`` order.
        classes : list
            The model's classes, in order.

        Returns
        -------
        ndarray of shape (n_rows,): the labels, of the classes' dtype.
        """
        labels = np.asarray(classes)
        if self.value is not None:
            return labels[(proba[:, 1] >= self.value).astype(int)]
        per_class = dict(self.classes)
        weights = np.array([per_class[c] for c in classes], dtype="float64")
        return labels[np.argmax(proba / weights, axis=1)]

    def describe(self) -> str:
        """Which threshold is in force and how it was chosen, for the receipt and the model version,
        e.g. ``threshold 0.37 (optimize: f1 on 1,204 holdout rows; positive when p >= 0.37)``. Values
        are written in full (``repr``: the shortest text that reads back as the same float)."""
        if self.value is None:
            listed = ", ".join(f"{c}: {t!r}" for c, t in self.classes)
            return f"class thresholds {listed} (fixed in training.yml; the class with the largest p/threshold wins)"
        if self.method == "fixed":
            return f"threshold {self.value!r} (fixed in training.yml; {self.positive_rule})"
        chosen = f"optimize: {self.method} on {self.holdout_rows:,} holdout rows"
        return f"threshold {self.value!r} ({chosen}; {self.positive_rule})"

    @property
    def positive_rule(self) -> str:
        """The binary rule in words: ``positive when p >= <value>``."""
        return f"positive when p >= {self.value!r}"

    def to_json(self) -> dict[str, Any]:
        """The saved form; classes stay a list of pairs so integer labels stay integers."""
        return {"value": self.value, "classes": [[c, t] for c, t in self.classes], "method": self.method,
                "holdout_rows": self.holdout_rows}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Threshold:
        return cls(value=data["value"], classes=tuple((c, float(t)) for c, t in data["classes"]),
                   method=data["method"], holdout_rows=data["holdout_rows"])


def default_rule(task: str, classes: list[Any] | None) -> str:
    """How a chain without a threshold labels rows, in the words :meth:`Threshold.describe` uses."""
    if task != "classification":
        return "no decision threshold (regressor)"
    if classes is not None and len(classes) == 2:
        return "default 0.5 (the model's own predict: argmax)"
    return "default (the model's own predict: argmax)"


def saved_decision_rule(meta: dict[str, Any]) -> str:
    """:meth:`Threshold.describe` (or :func:`default_rule`) of a saved chain's ``chain.json``:
    ``FittedChain.decision_rule`` without loading the model."""
    saved = meta.get("threshold")
    return Threshold.from_json(saved).describe() if saved else default_rule(meta.get("task", ""), meta.get("classes"))


def optimal_threshold(positive: np.ndarray, score: np.ndarray, method: ThresholdOptimize) -> float:
    """The threshold (one of ``score``'s distinct values) that maximises F1 or Youden's J.

    Parameters
    ----------
    positive : ndarray of bool, shape (n_rows,)
        True where the row's label is the positive class.
    score : ndarray of float64, shape (n_rows,)
        The positive-class probability of each row.
    method : {"f1", "youden"}
        F1 of the positive class, 2·TP / (2·TP + FP + FN); or J = TP/P - FP/N.

    Returns
    -------
    float
        The best candidate under ``p >= t``; ties go to the highest one.

    Raises
    ------
    ValueError
        When the rows hold only one class (neither score is defined).
    """
    from sklearn.metrics import roc_curve  # only when a threshold is optimised

    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"the rows hold {n_pos} positive and {n_neg} negative label(s); both are needed")
    fpr, tpr, thresholds = roc_curve(positive, score, drop_intermediate=False)
    # roc_curve's first point (threshold +inf) labels nothing positive: not a candidate
    tps = np.rint(tpr[1:] * n_pos).astype("int64")
    fps = np.rint(fpr[1:] * n_neg).astype("int64")
    if method == "f1":
        scores = [Fraction(2 * int(tp), int(tp) + int(fp) + n_pos) for tp, fp in zip(tps, fps)]
    else:
        scores = [Fraction(int(tp) * n_neg - int(fp) * n_pos, n_pos * n_neg) for tp, fp in zip(tps, fps)]
    best = max(range(len(scores)), key=lambda i: (scores[i], thresholds[1 + i]))
    return float(thresholds[1 + best])
