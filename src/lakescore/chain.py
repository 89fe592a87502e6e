"""``FittedChain``: steps -> model -> rules, and the one ``predict`` every scoring path calls.

One row out per row in, in the same order with the same index. A row that an eligibility rule
refuses, or that a step flags (outlier, invalid value), stays in the output with
``scoring_status = "excluded"``, the first reason that excluded it in ``exclusion_reason``, and null
prediction and probability. Excluded rows are not fed to later steps or to the model, so a row's
answer never depends on the other rows of its batch.

Order: eligibility rules on the raw row -> the pre-split recipe (its fixed edits; its row filters
as eligibility, ``ineligible:<step>``, when scoring.yml says ``mode: pre_split | combined``) ->
the preprocessing steps (training-only ones skipped) -> the model -> output rules on the
predicted rows.

Just before the model: a row whose model matrix holds NaN, when the model cannot take NaN
(scikit-learn's ``input_tags.allow_nan``: linear models, SVMs, k-NN, naive Bayes, GradientBoosting,
AdaBoost; trees, forests, HistGradientBoosting, XGBoost and LightGBM take it), is excluded with
``invalid:<feature>``, the first model feature (in ``feature_columns`` order) that is NaN in that
row. The reason reads only the row itself, so it is the same in every batch. Such a NaN comes from
a null in a feature the recipe does not impute.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from lakescore import custom  # noqa: F401  (registers the user step kinds: step: custom)
from lakescore import model_input as containers
from lakescore.compiled import CompiledPlan
from lakescore.errors import InputError
from lakescore.frames import frame_of, require_columns, to_pandas
from lakescore.lookup import FeatureLookup
from lakescore.models import Task, labels_follow_proba, proba_labels
from lakescore.rules import EligibilityRule, OutputRule, add_outputs
from lakescore.steps import FittedStep
from lakescore.thresholds import Threshold, default_rule

if TYPE_CHECKING:  # annotations only: a worker that loads a chain imports no pydantic
    from lakescore.config import EligibilityMode, FrameEngine

CHAIN_FORMAT = 1
# what a pre-split step does at scoring (pre_split_role)
PreSplitRole = Literal["skip", "eligibility", "apply"]
PASS_ROWS = 16_384
"""Rows per pass of the compiled plan and the model inside one ``predict``. A pass's arrays (one per
column, and the model matrix) stay in the CPU cache, and a large frame needs no more working memory
than one pass beyond its input and output. Measured on the demo chain over all 336,776 flights
(best of 4, 2-core machine): 4,096 rows 0.19 s, 10,000 0.15 s, 16,384 0.14 s, 32,768 0.35 s,
65,536 0.33 s."""
STATUS_PREDICTED = "predicted"
STATUS_EXCLUDED = "excluded"


@dataclass(frozen=True)
class FittedChain:
    """A fitted recipe, model and rules.

    Attributes
    ----------
    input_columns : tuple of str
        Raw columns a request must carry (features and the columns the rules read).
    feature_columns : tuple of str
        Columns the model reads after every step, in order.
    steps : tuple of FittedStep
        Learned steps in recipe order (training-only steps are kept for the record, skipped here).
    model : estimator
        The fitted model (exact class from :data:`lakescore.models.MODEL_CLASSES`).
    task : {"classification", "regression"}
    classes : list or None
        Class labels of a classifier, in the model's order.
    rules : tuple of EligibilityRule
    engine : {"pandas", "polars"}
        The frame library training used.
    pre_split : tuple of FittedStep
        The pre-split recipe, learned on the whole table before the split (fixed steps only).
    eligibility_mode : {"rules", "pre_split", "combined"}
        Whether the pre-split row filters are re-applied at scoring as eligibility.
    pre_split_skipped : tuple of str
        Pre-split steps that read the target; never run at scoring.
    output_rules : tuple of OutputRule
        Typed columns added after the model (see :data:`output_dtypes`).
    threshold : Threshold or None
        A classifier's decision threshold (training.yml ``model.threshold``); None: the model's own
        ``predict`` labels the rows. It changes ``prediction`` only, never ``probability``.
    lookups : tuple of FeatureLookup
        Feature lookups joined onto the rows before the chain (training.yml ``feature_lookups``);
        their output columns are among ``input_columns``. The caller joins them
        (:func:`lakescore.lookup.join_all`); ``predict`` reads the joined rows.
    lookup_versions : tuple of int
        The Delta version of each lookup's feature table that training read, in ``lookups`` order.
    model_input : {"dense", "sparse"}
        The container the model was fitted on and receives at every call (float64 array, or
        canonical scipy CSR), chosen at training (:mod:`lakescore.model_input`).
    """

    input_columns: tuple[str, ...]
    feature_columns: tuple[str, ...]
    steps: tuple[FittedStep, ...]
    model: Any
    task: Task
    classes: list[Any] | None = None
    rules: tuple[EligibilityRule, ...] = ()
    engine: FrameEngine = "pandas"
    model_class: str = field(default="")
    pre_split: tuple[FittedStep, ...] = ()
    eligibility_mode: EligibilityMode = "combined"
    pre_split_skipped: tuple[str, ...] = ()
    output_rules: tuple[OutputRule, ...] = ()
    threshold: Threshold | None = None
    lookups: tuple[FeatureLookup, ...] = ()
    lookup_versions: tuple[int, ...] = ()
    model_input: containers.ModelInput = "dense"

    @property
    def decision_rule(self) -> str:
        """Which threshold is in force (:meth:`lakescore.thresholds.Threshold.describe`), e.g.
        ``threshold 0.37 (optimize: f1 on 1,204 holdout rows; positive when p >= 0.37)``, or
        ``default 0.5 (the model's own predict: argmax)``; the receipt and the model version say it."""
        return self.threshold.describe() if self.threshold else default_rule(self.task, self.classes)

    @property
    def excludes_rows(self) -> bool:
        """True when some rule or step can exclude a row (the output then has status columns)."""
        return bool(self.rules) or any(s.impl.exclusion for s in self.steps) or any(
            self.pre_split_role(s) == "eligibility" for s in self.pre_split)

    def pre_split_role(self, step: FittedStep) -> str:
        """What pre-split ``step`` does at scoring (see :func:`pre_split_role`)."""
        return pre_split_role(step, mode=self.eligibility_mode, skipped=self.pre_split_skipped)

    @property
    def label_dtype(self) -> str:
        """pandas dtype of ``prediction``: Int64 (integer classes), string (text classes), Float64."""
        if self.task == "regression":
            return "Float64"
        return "Int64" if self.classes and all(isinstance(c, (int, np.integer)) for c in self.classes) else "string"

    @property
    def output_columns(self) -> list[str]:
        """Columns of :meth:`predict`'s frame, in order (output rule columns last)."""
        return list(self.output_dtypes)

    @property
    def output_dtypes(self) -> dict[str, str]:
        """Column -> pandas dtype of :meth:`predict`'s frame: prediction, probability (Float64,
        classification), scoring_status and exclusion_reason (string), then each output rule's
        declared columns (string, Float64, Int64 or boolean)."""
        from lakescore.rules import OUTPUT_TYPES

        dtypes = {"prediction": self.label_dtype}
        if self.task == "classification":
            dtypes["probability"] = "Float64"
        dtypes.update({"scoring_status": "string", "exclusion_reason": "string"})
        for rule in self.output_rules:
            dtypes.update({name: OUTPUT_TYPES[kind] for name, kind in rule.outputs})
        return dtypes

    def predict(self, frame: Any, *, pass_rows: int = PASS_ROWS) -> pd.DataFrame:
        """Score ``frame``: one output row per input row, same index and order.

        Parameters
        ----------
        frame : pandas or Polars DataFrame of shape (n_rows, >= len(input_columns))
            Raw request rows; extra columns are ignored.
        pass_rows : int, default :data:`PASS_ROWS`
            Most rows per pass of the compiled plan and the model (one model call each), at
            least 1; consecutive rows, in order. The output frame is assembled once.

        Returns
        -------
        DataFrame of shape (n_rows, 4) for classification (``prediction`` Int64 or string,
        ``probability`` Float64 — of the positive class when binary, of the predicted class
        otherwise — ``scoring_status`` and ``exclusion_reason`` strings), 3 columns for regression,
        then the output rules' columns (see :attr:`output_dtypes`).

        Raises
        ------
        InputError
            When a required column is missing or a rule returns something other than one boolean
            per row.
        ValueError
            ``pass_rows`` below 1.
        """
        if pass_rows < 1:
            raise ValueError(f"pass_rows must be at least 1; got {pass_rows}")
        frame = to_pandas(frame)
        require_columns(frame, self.input_columns, what="the model")
        passes = []
        for start in range(0, max(len(frame), 1), pass_rows):
            chunk = frame if len(frame) <= pass_rows else frame.iloc[start:start + pass_rows]
            rows, matrix, chunk_reasons = self.plan.run(chunk)
            rows, matrix, finite = self._exclude_unusable(rows, matrix, chunk_reasons)
            passes.append((rows + start, *self._model_call(matrix, finite=finite), chunk_reasons))
        if len(passes) == 1:  # a frame of up to pass_rows rows: nothing to stitch
            return self._assemble(frame, *passes[0])
        labels = [p[1] for p in passes if p[1] is not None]
        return self._assemble(frame, np.concatenate([p[0] for p in passes]),
                              np.concatenate(labels) if labels else None,
                              np.concatenate([p[2] for p in passes]), np.concatenate([p[3] for p in passes]))

    @cached_property
    def plan(self) -> CompiledPlan:
        """The chain compiled once (per loaded chain) into a plan over arrays (see :mod:`lakescore.compiled`)."""
        return CompiledPlan(self.input_columns, self.rules, self.scoring_steps(), self.feature_columns,
                            model_input=self.model_input)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("plan", None)  # compiled again on first use after unpickling
        state.pop("model_takes_nan", None)  # read from the model again
        state.pop("labels_follow_proba", None)
        return state

    def scoring_steps(self) -> list[tuple[FittedStep, str | None]]:
        """The steps that run at scoring, in order, each with the reason prefix of the rows it
        excludes (None: it excludes none): the pre-split edits and re-used row filters
        (``ineligible``), then the recipe's prediction-time steps."""
        steps: list[tuple[FittedStep, str | None]] = []
        for step in self.pre_split:
            role = self.pre_split_role(step)
            if role != "skip":
                steps.append((step, "ineligible" if role == "eligibility" else None))
        steps += [(step, step.impl.exclusion) for step in self.steps if not step.impl.training_only]
        return steps

    def reference_predict(self, frame: Any) -> pd.DataFrame:
        """:meth:`predict` by the step-by-step pandas walk: each rule and step on a frame, each step's
        reference ``apply``. Slow; it is what the admission probe compares the compiled plan against
        (same shapes, dtypes and errors as :meth:`predict`)."""
        frame = to_pandas(frame)
        require_columns(frame, self.input_columns, what="the model")
        reasons = np.full(len(frame), None, dtype=object)
        rows = np.arange(len(frame))
        for rule in self.rules:
            eligible = rule.eligible(frame.iloc[rows])
            reasons[rows[~eligible]] = rule.reason
            rows = rows[eligible]
        data = frame.iloc[rows][list(self.input_columns)]
        for step, prefix in self.scoring_steps():
            rows, data = _run_step(step, data, rows, reasons, prefix)
        matrix = self.model_matrix(data)
        rows, matrix, finite = self._exclude_unusable(rows, matrix, reasons)
        return self._assemble(frame, rows, *self._model_call(matrix, finite=finite), reasons)

    @cached_property
    def model_takes_nan(self) -> bool:
        """True when the model accepts NaN in its input (scikit-learn tag ``input_tags.allow_nan``;
        a model without scikit-learn tags is taken not to). Read once per loaded chain (the tags
        are a fixed trait of the fitted model; scikit-learn builds them anew on every read)."""
        tags = getattr(self.model, "__sklearn_tags__", None)
        return bool(tags().input_tags.allow_nan) if tags is not None else False

    @cached_property
    def labels_follow_proba(self) -> bool:
        """True when the model's own ``predict`` labels can be read from its ``predict_proba``
        (:func:`lakescore.models.labels_follow_proba`), so a classifier without a threshold is
        called once per pass, not twice. Read once per loaded chain."""
        return self.task == "classification" and labels_follow_proba(self.model)

    def model_matrix(self, data: pd.DataFrame) -> Any:
        """What the model receives for the preprocessed rows ``data`` (n_rows, >= n_features): the
        ``feature_columns`` in order, in the sealed ``model_input`` container (float64 array or
        scipy CSR, :func:`lakescore.model_input.build`)."""
        missing = [c for c in self.feature_columns if c not in data.columns]
        if missing and len(data):
            raise InputError(f"after preprocessing, model feature(s) {missing} are missing; "
                             "check the recipe's column names")
        if not len(data):
            return containers.build([np.empty(0)] * len(self.feature_columns), 0, self.model_input)
        return containers.from_frame(data, self.feature_columns, self.model_input)

    def _exclude_unusable(self, rows: np.ndarray, matrix: np.ndarray,
                          reasons: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool | None]:
        """Exclude the rows whose matrix holds NaN when the model cannot take it (``invalid:<feature>``,
        the row's first NaN feature); return the remaining rows, their matrix, and whether every
        value of it is finite (:func:`lakescore.model_input.all_finite`, one sum that answers the
        model call's check too; None: not looked at)."""
        if not len(rows) or self.model_takes_nan:
            return rows, matrix, None
        if containers.all_finite(matrix):  # no NaN: no row is bad
            return rows, matrix, True
        bad, first = containers.nan_features(matrix)
        if not bad.any():
            return rows, matrix, False  # an infinity, no NaN
        reasons[rows[bad]] = [f"invalid:{self.feature_columns[i]}" for i in first]
        return rows[~bad], matrix[~bad], None

    def _model_call(self, matrix: np.ndarray, *, finite: bool | None = None) -> tuple[np.ndarray | None, np.ndarray]:
        """The model on a float64 matrix (n_kept, n_features): labels (None when there are no rows)
        and, for a classifier, the probability of the positive class (binary) or of the class with
        the highest probability, float64 of shape (n_kept,); NaN for a regressor. ``finite``: whether
        every value of ``matrix`` is finite, when already known (None: not looked at yet)."""
        if not containers.n_rows(matrix):
            return None, np.empty(0)
        containers.require(matrix, self.model_input, model=self.model_class or type(self.model).__name__)
        with _finite_checked(matrix, finite):
            if self.task != "classification":
                return self.model.predict(matrix), np.full(len(matrix), np.nan)
            p = self.model.predict_proba(matrix)
            return self.decide(matrix, p), (p[:, 1] if p.shape[1] == 2 else p.max(axis=1)).astype("float64")

    def decide(self, matrix: np.ndarray, proba: np.ndarray) -> np.ndarray:
        """A classifier's labels for the rows of ``matrix`` (n_rows, n_features) whose
        ``predict_proba`` is ``proba`` (n_rows, n_classes): the threshold's rule when the chain
        has one (:class:`lakescore.thresholds.Threshold`), else the model's own ``predict``'s labels:
        read from ``proba`` when they follow it (:func:`lakescore.models.proba_labels`: the model is
        called again only on rows whose probabilities tie), else ``predict`` itself. The admission
        probe's model part labels rows through it too."""
        if self.threshold is None:
            return proba_labels(self.model, matrix, proba) if self.labels_follow_proba else self.model.predict(matrix)
        return self.threshold.labels(proba, list(self.classes or []))

    def _assemble(self, frame: pd.DataFrame, rows: np.ndarray, labels: np.ndarray | None, kept_proba: np.ndarray,
                  reasons: np.ndarray) -> pd.DataFrame:
        """The output frame: ``labels`` and ``kept_proba`` at the positions ``rows``, nulls and
        ``reasons`` elsewhere, then the output rules' columns."""
        n_rows = len(frame)
        columns: dict[str, Any] = {"prediction": _masked(labels, rows, n_rows, self.label_dtype)}
        if self.task == "classification":
            proba = np.full(n_rows, np.nan)
            proba[rows] = kept_proba
            columns["probability"] = pd.arrays.FloatingArray(proba, np.isnan(proba))
        predicted = np.zeros(n_rows, dtype=np.intp)
        predicted[rows] = 1
        columns["scoring_status"] = _statuses().take(predicted)
        columns["exclusion_reason"] = (pd.array(reasons, dtype="string") if len(rows) < n_rows
                                       else _statuses().take(np.full(n_rows, -1), allow_fill=True))  # all null
        out = frame_of(columns, frame.index)
        return add_outputs(self.output_rules, frame, out, rows) if self.output_rules else out

    # --- save / load ------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the chain to the folder ``path``: ``chain.json`` (steps, rules, columns) and
        ``model.joblib``. Returns the folder."""
        import joblib  # scikit-learn's own persistence; imported here to keep predict light

        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        joblib.dump(self.model, folder / "model.joblib")
        meta = {
            "format": CHAIN_FORMAT, "input_columns": list(self.input_columns),
            "feature_columns": list(self.feature_columns), "task": self.task,
            "classes": self.classes, "engine": self.engine, "model_class": self.model_class,
            "steps": [s.to_json() for s in self.steps], "rules": [r.to_json() for r in self.rules],
            "pre_split": [s.to_json() for s in self.pre_split], "eligibility_mode": self.eligibility_mode,
            "pre_split_skipped": list(self.pre_split_skipped),
            "output_rules": [r.to_json() for r in self.output_rules],
            "threshold": self.threshold.to_json() if self.threshold else None,
            "feature_lookups": [{"spec": spec.to_json(), "trained_version": version}
                                for spec, version in zip(self.lookups, self.lookup_versions, strict=True)],
            "model_input": self.model_input,
        }
        (folder / "chain.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        return folder

    @classmethod
    def load(cls, path: str | Path) -> FittedChain:
        """Read a chain written by :meth:`save`."""
        import joblib

        folder = Path(path)
        meta = json.loads((folder / "chain.json").read_text())
        sealed = meta.get("model_input", "dense")  # chains saved before the setting fed dense arrays
        if sealed not in containers.MODEL_INPUTS:
            raise InputError(f"{folder / 'chain.json'}: model_input must be one of {list(containers.MODEL_INPUTS)}; "
                             f"got {sealed!r}. Train the model again", model_input=sealed)
        return cls(
            input_columns=tuple(meta["input_columns"]), feature_columns=tuple(meta["feature_columns"]),
            steps=tuple(FittedStep.from_json(s) for s in meta["steps"]),
            model=joblib.load(folder / "model.joblib"), task=meta["task"], classes=meta["classes"],
            rules=tuple(EligibilityRule.from_json(r) for r in meta["rules"]), engine=meta["engine"],
            model_class=meta["model_class"],
            pre_split=tuple(FittedStep.from_json(s) for s in meta.get("pre_split", [])),
            eligibility_mode=meta.get("eligibility_mode", "combined"),
            pre_split_skipped=tuple(meta.get("pre_split_skipped", [])),
            output_rules=tuple(OutputRule.from_json(r) for r in meta.get("output_rules", [])),
            threshold=Threshold.from_json(meta["threshold"]) if meta.get("threshold") else None,
            lookups=tuple(FeatureLookup.from_json(x["spec"]) for x in meta.get("feature_lookups", [])),
            lookup_versions=tuple(int(x["trained_version"]) for x in meta.get("feature_lookups", [])),
            model_input=sealed,
        )


def _finite_checked(matrix: Any, finite: bool | None = None) -> AbstractContextManager[Any]:
    """scikit-learn's ``assume_finite`` for a model call on ``matrix`` when every value of it is
    finite (``finite`` when known, else :func:`lakescore.model_input.all_finite`: one sum):
    scikit-learn's own check of each call would pass, so it is skipped. A matrix with NaN or an
    infinity goes to the model with the check on, so the model raises or takes NaN exactly as it
    would without lakescore."""
    if not (containers.all_finite(matrix) if finite is None else finite):
        return nullcontext()
    import sklearn  # already imported by the model that is being called

    return sklearn.config_context(assume_finite=True)


@lru_cache(maxsize=1)
def _statuses() -> Any:
    """``[excluded, predicted]`` as a pandas ``string`` array: a row's status is ``take`` of 0 or 1
    (the same array ``pd.array(texts, dtype="string")`` gives, without checking each text)."""
    return pd.array([STATUS_EXCLUDED, STATUS_PREDICTED], dtype="string")


def _masked(values: np.ndarray | None, rows: np.ndarray, n_rows: int, dtype: str) -> Any:
    """A nullable array of ``dtype`` and length ``n_rows``: ``values`` at positions ``rows``, NA elsewhere."""
    if dtype == "string":
        filled = np.full(n_rows, None, dtype=object)
        if values is not None:
            filled[rows] = np.asarray(values).astype(str)
        return pd.array(filled, dtype="string")
    numeric = np.zeros(n_rows, dtype="int64" if dtype == "Int64" else "float64")
    mask = np.ones(n_rows, dtype=bool)
    if values is not None:
        numeric[rows] = values
        mask[rows] = False
    cls = pd.arrays.IntegerArray if dtype == "Int64" else pd.arrays.FloatingArray
    return cls(numeric, mask)


def pre_split_role(step: FittedStep, *, mode: EligibilityMode,
                   skipped: tuple[str, ...] | list[str]) -> PreSplitRole:
    """What a pre-split step does at scoring: ``"skip"`` (it reads the target, or it is a row filter
    that is not re-used), ``"eligibility"`` (a row-local filter re-applied under ``mode: pre_split |
    combined``: its flagged rows get ``ineligible:<step>``) or ``"apply"`` (a fixed edit)."""
    if step.name in skipped:
        return "skip"
    if not (step.training_only or step.impl.exclusion):
        return "apply"
    reused = mode in ("pre_split", "combined") and step.reusable_as_eligibility
    return "eligibility" if reused else "skip"


def _run_step(step: FittedStep, data: pd.DataFrame, rows: np.ndarray, reasons: np.ndarray,
              prefix: str | None) -> tuple[np.ndarray, pd.DataFrame]:
    """Exclude the rows ``step`` flags (reason ``<prefix>:<step>``; the first reason stays), then
    apply it to the rest."""
    if prefix is not None:
        flagged = step.flags(data)
        if flagged.any():
            reasons[rows[flagged]] = f"{prefix}:{step.name}"
            rows, data = rows[~flagged], data[~flagged]
    return rows, step.apply(data)
