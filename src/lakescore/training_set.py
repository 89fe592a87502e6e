"""Training a model set (training.yml ``model_set``): every component fitted on the same rows.

The rows are the project's: the same filter, feature lookups, pre-split recipe and train/holdout
split as a single model. Each component learns its own recipe and model on them (with its own
label when it declares one; rows whose label is missing are left out of that component's fit, as
for a single model), gets its own decision threshold on the holdout, and is measured on it.
The set's eligibility rules are every component's, so each component is a whole chain that
admission checks on its own (:func:`lakescore.admission.combined.admit_set`).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from lakescore.config import ComponentConfig, ProjectConfig
from lakescore.frames import derive_label
from lakescore.model_set import Composed, ModelSet
from lakescore.models import task_of
from lakescore.rules import load_output_rules, load_rules
from lakescore.steps.recipe import PreSplit
from lakescore.training import ChainRecipe, fit_chain, holdout_metrics, model_problems, with_threshold


def _label_of(project: ProjectConfig, component: ComponentConfig) -> tuple[str, str | None]:
    """A component's label column and expression: its own when it gives either, else ``data``'s."""
    data = project.training.data
    if component.label_column is None and component.label_expression is None:
        return data.label_column, data.label_expression
    return component.label_column or data.label_column, component.label_expression


def component_labels(project: ProjectConfig, frame: pd.DataFrame) -> dict[str, pd.Series]:
    """Each component's label of the rows of ``frame`` (aligned with it), in declared order."""
    components = project.training.model_set.components  # type: ignore[union-attr]
    labels = {}
    for name, component in components.items():
        column, expression = _label_of(project, component)
        labels[name] = derive_label(frame, column=column, expression=expression).set_axis(frame.index)
    return labels


def composed_of(project: ProjectConfig) -> tuple[Composed, ...]:
    """training.yml ``model_set.composed`` as :class:`~lakescore.model_set.Composed` columns."""
    entries = project.training.model_set.composed  # type: ignore[union-attr]
    return tuple(Composed(e.name, e.kind, tuple((*term.split(".", 1), w) for term, w in e.weights.items()))
                 for e in entries)


def fit_project_set(project: ProjectConfig, frame: pd.DataFrame, labels: dict[str, pd.Series],
                    pre: PreSplit) -> ModelSet:
    """Fit every component of the project's ``model_set`` on ``frame`` (the training rows).

    Parameters
    ----------
    project : ProjectConfig
        A project whose training.yml declares ``model_set``.
    frame : DataFrame of shape (n_rows, n_columns)
        The training rows (after the filter, lookups and pre-split recipe).
    labels : dict of str to Series of shape (n_rows,)
        Each component's label (:func:`component_labels`), aligned with ``frame``.
    pre : PreSplit
        The learned pre-split recipe (:func:`lakescore.training.prepare_rows`), shared by every component.

    Returns
    -------
    ModelSet
        Components in declared order (no decision thresholds yet: :func:`with_set_thresholds`),
        the composed columns and scoring.yml's ``combined_rules``.
    """
    cfg = project.training
    rules = load_rules(project.scoring)
    fitted = []
    for name in cfg.model_set.components:  # type: ignore[union-attr]
        recipe = ChainRecipe.from_project(project, component=name, rules=rules)
        fitted.append((name, fit_chain(frame, labels[name], recipe, pre_split=pre)))
    return ModelSet(tuple(fitted), composed=composed_of(project),
                    combined_rules=tuple(load_output_rules(project.scoring, key="combined_rules")))


def with_set_thresholds(model_set: ModelSet, project: ProjectConfig, holdout: pd.DataFrame,
                        labels: dict[str, pd.Series]) -> ModelSet:
    """Each component with the decision threshold its ``model.threshold`` asks for
    (:func:`lakescore.training.with_threshold` on its own holdout labels)."""
    components = project.training.model_set.components  # type: ignore[union-attr]
    shown = project.shown("training")
    return replace(model_set, components=tuple(
        (name, with_threshold(chain, components[name].model.threshold, holdout, labels[name], shown=shown,
                              key=f"model_set.components.{name}.model"))
        for name, chain in model_set.components))


def set_metrics(model_set: ModelSet, holdout: pd.DataFrame, labels: dict[str, pd.Series]) -> dict[str, float]:
    """Each component's :func:`lakescore.training.holdout_metrics`, keyed ``<component>.<metric>``."""
    return {f"{name}.{key}": value for name, chain in model_set.components
            for key, value in holdout_metrics(chain, holdout, labels[name]).items()}


def numeric_outputs(model_class: str) -> tuple[str, ...]:
    """The component columns a composed column may weigh: a classifier's ``probability``, a
    regressor's ``prediction`` (a classifier's ``prediction`` is a label, not a quantity)."""
    return ("probability",) if task_of(model_class) == "classification" else ("prediction",)


def set_problems(project: ProjectConfig, empty: pd.DataFrame) -> list[str]:
    """Everything a model set's training can check without rows: each component's model, label and
    feature columns; each composed term a numeric output of its component; scoring.yml's output
    rules (a set has combined rules instead) and the columns its combined rules read.

    Parameters
    ----------
    project : ProjectConfig
        A project whose training.yml declares ``model_set``.
    empty : DataFrame of shape (0, n_columns)
        The training table's columns (with the feature lookups' outputs), no rows.

    Returns
    -------
    list of str
        Every problem, each naming the file, the key, the bad value and the fix.
    """
    from lakescore.models import MODEL_CLASSES

    cfg = project.training
    model_set = cfg.model_set
    if model_set is None:
        return []
    shown, scoring = project.shown("training"), project.shown("scoring")
    available = set(empty.columns)
    problems: list[str] = []
    outputs: set[str] = set()
    for name, component in model_set.components.items():
        key = f"model_set.components.{name}"
        problems += model_problems(component.model, key=f"{key}.model", shown=shown,
                                   random_state=cfg.defaults.random_state)
        column, expression = _label_of(project, component)
        needed = ([column] if expression is None else []) + list(component.feature_columns or [])
        problems += [f"{shown}: {key} names unknown column {c!r} of {cfg.data.table}; available: "
                     f"{', '.join(sorted(available))}" for c in needed if c not in available]
        if expression is not None:
            try:
                empty.eval(expression)
            except Exception as err:  # pandas raises several types for a bad expression
                problems.append(f"{shown}: {key}.label_expression {expression!r} cannot be evaluated on "
                                f"{cfg.data.table} ({type(err).__name__}: {err}); write a pandas expression")
        if component.model.class_name in MODEL_CLASSES:
            task = task_of(component.model.class_name)
            outputs.update(f"{name}_{c}" for c in (("prediction", "probability") if task == "classification"
                                                    else ("prediction",)))
    for entry in model_set.composed:
        for term in entry.weights:
            component, column = term.split(".", 1)  # type: ignore[assignment]  # the name is reused for the term's component
            model = model_set.components[component].model.class_name  # type: ignore[index]  # as above: a str here
            if model in MODEL_CLASSES and column not in numeric_outputs(model):
                problems.append(f"{shown}: model_set.composed {entry.name!r} weighs {term!r}, which is not a numeric "
                                f"output of {component} ({model}); use {component}.{numeric_outputs(model)[0]}")
    if project.scoring.output:
        problems.append(f"{scoring}: output rules {[r.name for r in project.scoring.output]} apply to a single "
                        f"model; {shown} declares model_set: write them under combined_rules, reading "
                        "<component>_probability / <component>_prediction")
    problems += [f"{shown}: model_set.composed {entry.name!r} is the name of a component's own output column; give "
                 f"the composed column a new name (e.g. {entry.name}_composed)"
                 for entry in model_set.composed if entry.name in outputs]
    outputs.update(entry.name for entry in model_set.composed)
    problems += [f"{scoring}: combined rule {rule.name!r} outputs {name!r}, which the set already gives (a component "
                 "or composed column); give the rule's output a new name"
                 for rule in project.scoring.combined_rules for name in rule.outputs if name in outputs]
    for rule in project.scoring.combined_rules:
        problems += [f"{scoring}: combined rule {rule.name!r} reads unknown column {c!r}: neither an output of the "
                     f"set ({', '.join(sorted(outputs))}) nor a column of {cfg.data.table}"
                     for c in rule.columns if c not in outputs and c not in available]
    return problems
