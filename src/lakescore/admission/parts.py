"""The parts of a fitted chain that the probe checks, each with the sample rows that reach it.

A part is a function ``frame -> frame`` (same index, one row per row) plus its sample: each
eligibility rule on the raw rows it sees, each prediction-time step — pre-split edits and filters
that run at scoring first, then the recipe — on the rows that reach it (its output plus a
``__flagged__`` column for the rows it would exclude), the model on the feature matrix, each output
rule on the predicted rows with their predictions, and the whole chain on the raw rows. The model
part labels rows as the chain does, through its decision threshold when it has one
(``FittedChain.decide``), so the probe checks the threshold with the model. Parent and
fresh process build parts the same way. After the model comes the compiled plan on the raw rows,
compared with the chain's reference walk (:mod:`lakescore.admission.agreement`), so a part that runs
the whole chain and fails because of the plan blames it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from lakescore.chain import FittedChain
from lakescore.errors import ProbeError
from lakescore.frames import frame_of

PartKind = Literal["builtin", "custom", "rule", "model", "chain", "compiled"]
MIN_ROWS = 16


@dataclass(frozen=True)
class Part:
    """One probed part: its kind, a key to rebuild it in another process, a label for messages.

    ``runs_chain`` marks the parts that score through the whole chain (output rules, the chain, the
    compiled plan), so a failure of any earlier part shows in them too. ``reference`` is what the
    ``compiled`` part is compared against: the chain's step-by-step walk."""

    kind: PartKind
    key: str
    label: str
    run: Callable[[pd.DataFrame], pd.DataFrame]
    sample: pd.DataFrame
    runs_chain: bool = False
    reference: Callable[[pd.DataFrame], pd.DataFrame] | None = None


def is_custom(step: Any) -> bool:
    """True for user-code steps (their ``apply`` is linted and listed under ``custom``)."""
    return bool(getattr(step.impl, "user_code", False))


def step_label(step: Any) -> str:
    """How messages name a fitted step: ``Custom step 'name'`` or ``Step 'name' (Kind)``."""
    return f"Custom step '{step.name}'" if is_custom(step) else f"Step '{step.name}' ({step.kind})"


def _rule_run(rule: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    return lambda frame: frame_of({"eligible": rule.eligible(frame)}, frame.index)


def step_run(step: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A step as a probed part runs it: its output plus ``__flagged__``, the rows it excludes."""
    def run(frame: pd.DataFrame) -> pd.DataFrame:
        flagged = step.flags(frame)
        out = step.apply(frame)  # a new frame (apply works on a copy): the column is added in place
        out["__flagged__"] = flagged
        return out

    return run


def _model_run(chain: FittedChain) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def run(frame: pd.DataFrame) -> pd.DataFrame:
        out = pd.DataFrame(index=frame.index)
        if len(frame) == 0:
            out["prediction"] = pd.Series([], dtype=chain.label_dtype)
            if chain.task == "classification":
                out[[f"p{i}" for i in range(len(chain.classes or []))]] = 0.0
            return out
        matrix = chain.model_matrix(frame)  # the sealed container, as every route gives it
        if chain.task != "classification":
            return frame_of({"prediction": pd.array(chain.model.predict(matrix)).astype(chain.label_dtype)},
                            frame.index)
        proba = chain.model.predict_proba(matrix)
        columns = {"prediction": pd.array(chain.decide(matrix, proba)).astype(chain.label_dtype)}  # with its threshold
        for i in range(proba.shape[1]):
            columns[f"p{i}"] = proba[:, i].astype("float64")  # XGBoost gives float32; lossless
        return frame_of(columns, frame.index)  # as setting each column of an empty frame in turn

    return run


def chain_parts(chain: FittedChain, raw: pd.DataFrame) -> list[Part]:
    """Every part of ``chain`` with the rows of ``raw`` that reach it, in scoring order.

    Raises
    ------
    lakescore.errors.ProbeError
        When fewer than 16 rows reach a step or the model (naming where rows were lost).
    """

    parts = []
    rows = raw
    for i, rule in enumerate(chain.rules):
        parts.append(Part("rule", f"rule:{i}", f"Rule '{rule.name}'", _rule_run(rule), rows))
        rows = rows[rule.eligible(rows)]
    data = rows[list(chain.input_columns)]
    scored_steps = [(f"pre_split:{i}", s) for i, s in enumerate(chain.pre_split) if chain.pre_split_role(s) != "skip"]
    scored_steps += [(f"step:{i}", s) for i, s in enumerate(chain.steps) if not s.impl.training_only]
    for key, step in scored_steps:
        label = step_label(step)
        if len(data) < MIN_ROWS:
            raise ProbeError([f"only {len(data)} probe rows reach {label} (need {MIN_ROWS}); rows were lost "
                              "before it. Give more holdout rows, or loosen the rules/outlier steps before it."])
        parts.append(Part("custom" if is_custom(step) else "builtin", key, label, step_run(step), data))
        flagged = step.flags(data)
        data = step.apply(data[~flagged])
    if len(data) < MIN_ROWS:
        raise ProbeError([f"only {len(data)} probe rows get a prediction (need {MIN_ROWS}); rows were lost in "
                          "the rules and steps. Give more holdout rows, or loosen them."])
    features = data[list(chain.feature_columns)].astype("float64")
    parts.append(Part("model", "model", "Model", _model_run(chain), features))
    parts.append(Part("compiled", "compiled", "Compiled plan", chain.predict, raw, runs_chain=True,
                      reference=chain.reference_predict))
    if chain.output_rules:
        predicted = chain.predict(raw)
        reached = raw[(predicted["scoring_status"] == "predicted").to_numpy()]
        for i, rule in enumerate(chain.output_rules):  # type: ignore[assignment]  # the name is reused for the output rules
            parts.append(Part("rule", f"output_rule:{i}", f"Output rule '{rule.name}'",
                              _output_rule_run(chain, rule), reached, runs_chain=True))
    parts.append(Part("chain", "chain", "Chain", chain.predict, raw, runs_chain=True))
    return parts


def set_parts(model_set: Any, raw: pd.DataFrame) -> list[Part]:
    """The parts a model set adds to its components' (each admitted as a chain of its own): each
    combined rule on the rows the whole set predicts, its sample the rule's declared columns (the
    rows' inputs and component predictions, so the probe's ``perturb`` moves both), then the whole
    set on the raw rows (kind ``chain``: repeat, chunks).

    Raises
    ------
    lakescore.errors.ProbeError
        When fewer than 16 rows of ``raw`` get a prediction from every component.
    """
    parts = []
    if model_set.combined_rules:
        scored = model_set.predict(raw)
        predicted = (scored["scoring_status"] == "predicted").to_numpy()
        if predicted.sum() < MIN_ROWS:
            raise ProbeError([f"only {int(predicted.sum())} probe rows get a prediction from every component of the "
                              f"model set (need {MIN_ROWS}); rows were lost in the rules and steps. Give more "
                              "holdout rows, or loosen them."])
        reached = model_set.rule_frame(raw, scored)[predicted]
        for i, rule in enumerate(model_set.combined_rules):
            parts.append(Part("rule", f"combined_rule:{i}", f"Combined rule '{rule.name}'", _combined_rule_run(rule),
                              reached[list(rule.columns)]))
    parts.append(Part("chain", "set", "Model set", model_set.predict, raw, runs_chain=True))
    return parts


def _combined_rule_run(rule: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A combined rule on rows of its declared columns (inputs and component predictions)."""

    def run(frame: pd.DataFrame) -> pd.DataFrame:
        return rule.compute(frame, frame.iloc[:, :0])

    return run


def _output_rule_run(chain: FittedChain, rule: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """An output rule on predicted raw rows, fed the model's predictions for those rows."""
    columns = [c for c in ("prediction", "probability") if c in chain.output_columns]

    def run(frame: pd.DataFrame) -> pd.DataFrame:
        return rule.compute(frame, chain.predict(frame)[columns])

    return run
