"""Training: the rows from a table frame, the recipe learned in order, the model fitted, the holdout measured.

The recipe is learned step by step on the training rows: each step learns on the output of the
steps before it; rows an outlier step flags are left out of everything after it (and of the fit),
and each step records ``rows_in``/``rows_out``. Rows an eligibility rule refuses are not trained on,
since they would never be scored. The ``pre_split:`` recipe (fixed steps only, see
:mod:`lakescore.steps.recipe`) runs on the whole table before the split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from lakescore import model_input as containers
from lakescore.chain import FittedChain, pre_split_role
from lakescore.config import (
    EligibilityMode,
    FrameEngine,
    ModelConfig,
    ModelInputSetting,
    ProjectConfig,
    ThresholdSetting,
)
from lakescore.errors import ConfigError, LakescoreError, StepError
from lakescore.frames import derive_label, expression_columns, to_pandas
from lakescore.models import build_model, task_of
from lakescore.rules import EligibilityRule, OutputRule, load_output_rules, load_rules
from lakescore.steps import learn_step, parse_params, step_kind
from lakescore.steps.base import StepParams
from lakescore.steps.recipe import PreSplit, learn_pre_split
from lakescore.thresholds import Threshold, optimal_threshold


def _input_columns(features: list[str], rules: list[Any], *more: list[str]) -> list[str]:
    columns = list(features)
    for extra in [list(rule.columns) for rule in rules] + list(more):
        columns += [c for c in extra if c not in columns]
    return columns


def _target_columns(data: Any) -> list[str]:
    """The label column and every column its expression reads (a scoring request has none)."""
    return [data.label_column, *(expression_columns(data.label_expression) if data.label_expression else [])]


@dataclass(frozen=True)
class ChainRecipe:
    """What one chain is fitted from: training.yml's recipe, model and feature columns (or one
    ``model_set`` component's) and scoring.yml's rules and eligibility mode, as one value.

    Build it from a project with :meth:`from_project`; a test or a script may write it out.
    Sequences are kept as tuples and ``model_params`` as a copy, so a recipe does not change
    after it is built.

    Attributes
    ----------
    steps : tuple of dict
        The ``preprocessing:`` entries, in order (:func:`lakescore.steps.learn_step` reads each).
    model_class : str
        ``model.class``, e.g. ``"LogisticRegression"`` (:mod:`lakescore.models`).
    feature_columns : tuple of str
        ``data.feature_columns`` (or the component's): the columns the model may read.
    model_params : dict, default {}
        ``model.params``, passed to the model's constructor.
    model_input : {"auto", "dense", "sparse"}, default "auto"
        ``model.input``: the container the model is fitted on and sealed with
        (:func:`lakescore.model_input.choose`; auto: sparse after a text vectorizer when the model
        takes it).
    random_state : int, default 42
        ``defaults.random_state``, the model's seed.
    engine : {"pandas", "polars"} or None, default None
        ``defaults.engine``; None: the frame's own library.
    rules : tuple of EligibilityRule, default ()
        scoring.yml ``eligibility``: rows a rule refuses are not trained on (they are never scored).
    output_rules : tuple of OutputRule, default ()
        scoring.yml ``output``: typed columns added after the model.
    eligibility_mode : {"rules", "pre_split", "combined"}, default "combined"
        scoring.yml ``mode``: whether pre-split row filters become eligibility at scoring.
    """

    steps: Sequence[dict[str, Any]]
    model_class: str
    feature_columns: Sequence[str]
    model_params: Mapping[str, Any] = field(default_factory=dict)
    model_input: ModelInputSetting = "auto"
    random_state: int = 42
    engine: FrameEngine | None = None
    rules: Sequence[EligibilityRule] = ()
    output_rules: Sequence[OutputRule] = ()
    eligibility_mode: EligibilityMode = "combined"

    def __post_init__(self) -> None:
        for name in ("steps", "feature_columns", "rules", "output_rules"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "model_params", dict(self.model_params))

    @classmethod
    def from_project(cls, project: ProjectConfig, *, component: str | None = None,
                     rules: Sequence[EligibilityRule] | None = None) -> ChainRecipe:
        """The recipe the project's config files say for its model, or for one ``model_set`` component.

        Parameters
        ----------
        project : ProjectConfig
            The loaded config files (training.yml and scoring.yml are read).
        component : str, optional
            A ``model_set.components`` name: its recipe, model and feature columns (default
            ``data.feature_columns``), scoring.yml's eligibility rules and no output rules (a set's
            rules over its components are ``combined_rules``). None: training.yml's ``model``.
        rules : sequence of EligibilityRule, optional
            The eligibility rules, when already loaded (one load for every component of a set);
            default :func:`lakescore.rules.load_rules` of scoring.yml.

        Raises
        ------
        ConfigError
            ``component`` is None but training.yml declares ``model_set`` (no single ``model``).
        """
        cfg = project.training
        rules = load_rules(project.scoring) if rules is None else rules
        if component is not None:
            part = cfg.model_set.components[component]  # type: ignore[union-attr]
            return cls(steps=part.preprocessing, model_class=part.model.class_name,
                       feature_columns=part.feature_columns or cfg.data.feature_columns,
                       model_params=part.model.params, model_input=part.model.input,
                       random_state=cfg.defaults.random_state, engine=cfg.defaults.engine, rules=rules,
                       eligibility_mode=project.scoring.mode)
        if cfg.model is None:
            raise ConfigError([f"{project.shown('training')}: declares model_set; fit it with "
                               "lakescore.training_set.fit_project_set"])
        return cls(steps=cfg.preprocessing, model_class=cfg.model.class_name,
                   feature_columns=cfg.data.feature_columns, model_params=cfg.model.params,
                   model_input=cfg.model.input, random_state=cfg.defaults.random_state,
                   engine=cfg.defaults.engine, rules=rules, output_rules=load_output_rules(project.scoring),
                   eligibility_mode=project.scoring.mode)


def fit_chain(frame: Any, y: pd.Series, recipe: ChainRecipe, *, pre_split: PreSplit | None = None) -> FittedChain:
    """Learn the recipe and fit the model.

    Parameters
    ----------
    frame : pandas or Polars DataFrame of shape (n_rows, n_columns)
        Training rows with at least the feature columns and the columns the rules read.
    y : Series of shape (n_rows,)
        The label, aligned with ``frame``; rows with a missing label are dropped.
    recipe : ChainRecipe
        The steps, model, feature columns, rules and modes (:meth:`ChainRecipe.from_project`).
    pre_split : PreSplit, optional
        The learned pre-split recipe (:func:`lakescore.steps.recipe.learn_pre_split`): its steps are
        re-applied here to ``frame`` and sealed in the chain, with the names of its target-reading
        steps. None: no pre-split recipe.

    Returns
    -------
    FittedChain

    Raises
    ------
    StepError
        A recipe entry is invalid, names a column the frame lacks, or leaves a non-numeric column.
    ConfigError
        An unknown model class or rejected model parameters.
    """
    engine = recipe.engine or ("pandas" if isinstance(frame, pd.DataFrame) else "polars")
    pre_steps = pre_split.steps if pre_split is not None else ()
    pre_skipped = pre_split.skipped if pre_split is not None else ()
    feature_columns, mode = list(recipe.feature_columns), recipe.eligibility_mode
    frame = to_pandas(frame)
    rules = list(recipe.rules)
    y = pd.Series(y, index=frame.index)
    keep = y.notna().to_numpy()
    for rule in rules:
        keep &= rule.eligible(frame)
    output_rules = list(recipe.output_rules)
    scored_pre = [s.inputs for s in pre_steps if pre_split_role(s, mode=mode, skipped=pre_skipped) != "skip"]
    inputs = _input_columns(feature_columns, [*rules, *output_rules], *scored_pre)
    needed = _input_columns(inputs, [], *[s.inputs for s in pre_steps])
    data, y = frame.loc[keep, needed], y[keep]
    for step in pre_steps:  # learned on the whole table; its filters drop rows here too
        flagged = step.flags(data)
        data, y = data[~flagged].pipe(step.apply), y[~flagged]
    steps = []
    for raw in recipe.steps:
        step = learn_step(raw, data, y)
        steps.append(step)
        flagged = step.flags(data)
        data, y = data[~flagged], y[~flagged]
        data = step.apply_training(data, y)  # = apply, but out-of-fold for a cross-fitting step
    data = data.drop(columns=[c for c in needed if c not in feature_columns and c in data.columns])
    text = [c for c in data.columns if not pd.api.types.is_numeric_dtype(data[c].dtype)]
    if text:
        raise StepError(f"after preprocessing, column(s) {text} are not numeric; add an encoder "
                        "step (e.g. OneHotEncoder) for them or drop them from feature_columns")
    if len(data) == 0:
        raise StepError("no training rows are left after the eligibility rules and outlier steps")
    task = task_of(recipe.model_class)
    if task == "classification":
        y = y.astype("int64") if pd.api.types.is_integer_dtype(y.dtype) else y.astype(str)
    model = build_model(recipe.model_class, dict(recipe.model_params), random_state=recipe.random_state)
    sealed = containers.choose(recipe.model_input, steps, model)
    model.fit(containers.from_frame(data, list(data.columns), sealed), y.to_numpy())
    classes = [c.item() if hasattr(c, "item") else c for c in getattr(model, "classes_", [])] or None
    return FittedChain(
        input_columns=tuple(inputs), feature_columns=tuple(data.columns), steps=tuple(steps),
        model=model, task=task, classes=classes, rules=tuple(rules), engine=engine,
        model_class=recipe.model_class, pre_split=tuple(pre_steps), eligibility_mode=mode,
        pre_split_skipped=tuple(pre_skipped), output_rules=tuple(output_rules), model_input=sealed,
    )


def holdout_metrics(chain: FittedChain, frame: pd.DataFrame, y: pd.Series) -> dict[str, float]:
    """Accuracy, ROC AUC and log loss (classification) or RMSE and MAE on the predicted holdout rows."""
    from sklearn import metrics

    scored = chain.predict(frame)
    mask = (scored["scoring_status"] == "predicted").to_numpy() & y.notna().to_numpy()
    truth = y[mask].to_numpy()
    out: dict[str, float] = {"holdout_rows": float(len(frame)), "holdout_scored_rows": float(mask.sum())}
    if chain.task == "classification":
        labels = scored["prediction"][mask].to_numpy()
        out["accuracy"] = float(metrics.accuracy_score(truth.astype(labels.dtype), labels))
        if chain.classes is not None and len(chain.classes) == 2:
            prob = scored["probability"][mask].to_numpy(dtype="float64")
            positive = (truth == chain.classes[1]).astype(int)
            out["roc_auc"] = float(metrics.roc_auc_score(positive, prob))
            out["log_loss"] = float(metrics.log_loss(positive, prob, labels=[0, 1]))
    else:
        pred = scored["prediction"][mask].to_numpy(dtype="float64")
        out["rmse"] = float(np.sqrt(metrics.mean_squared_error(truth, pred)))
        out["mae"] = float(metrics.mean_absolute_error(truth, pred))
    return out


def _declared(raw: dict[str, Any]) -> tuple[StepParams, list[str]]:
    """Parse one recipe entry and name the columns it adds (``StepKind.outputs``).

    Raises
    ------
    LakescoreError
        A bad entry (StepError) or a custom step whose ``ref`` cannot be imported (UserCodeError).
    """
    params = parse_params(raw)
    return params, list(step_kind(params.step).outputs(params))


def recipe_problems(project: ProjectConfig, available: set[str] | list[str], *, source: str) -> list[str]:
    """Check the ``pre_split:`` and ``preprocessing:`` recipes in order, from config alone.

    Each entry must parse, and each column it reads must exist when it runs: a ``pre_split`` step
    reads the source's columns or an earlier pre-split step's outputs; a ``preprocessing`` step reads
    ``feature_columns`` or the outputs of any earlier step (built-in steps' declared outputs, e.g.
    FeatureInteraction's ``a_x_b``, and a user step's ``output=[...]``). A model set's components
    are each checked so, against their own ``feature_columns``. Training's preflight and the smoke
    probe both use it, so they accept the same recipes.

    Parameters
    ----------
    project : ProjectConfig
    available : set of str
        The source's columns (the training table, or the smoke probe's sample file).
    source : str
        How messages name the source (the table name or the sample path).

    Returns
    -------
    list of str
        One problem per bad entry or unknown column, each as ``config/training.yml: <key>[i] (<name>) ...``.
    """
    cfg = project.training
    shown = project.shown("training")
    problems: list[str] = []
    made: set[str] = set()
    recipes: list[tuple[str, list[dict[str, Any]], list[str] | None]] = [("pre_split", cfg.pre_split, None)]
    if cfg.model_set is None:
        recipes.append(("preprocessing", cfg.preprocessing, cfg.data.feature_columns))
    else:
        recipes += [(f"model_set.components.{name}.preprocessing", c.preprocessing,
                     c.feature_columns or cfg.data.feature_columns) for name, c in cfg.model_set.components.items()]
    pre_made: set[str] = set()
    for key, recipe, features in recipes:
        known = set(available) if features is None else set(features) | pre_made
        made = set(pre_made)
        for i, raw in enumerate(recipe):
            try:
                p, outputs = _declared(raw)
            except LakescoreError as err:
                problems.append(f"{shown}: {key}[{i}]: {err}")
                continue
            columns = p.input_columns() if key == "pre_split" else p.columns
            for column in columns:
                if column in known:
                    continue
                if key == "pre_split":
                    problems.append(f"{shown}: pre_split[{i}] ({p.name}) names unknown column {column!r} of {source}")
                else:
                    problems.append(f"{shown}: {key}[{i}] ({p.name}) names unknown column {column!r}: no "
                                    f"earlier step outputs it and feature_columns are "
                                    f"{', '.join(features or [])}; fix the name or add the step that "
                                    "makes it before this one")
            known.update(outputs)
            made.update(outputs)
        if key == "pre_split":
            pre_made = made
    return problems


def model_problems(model: ModelConfig, *, key: str, shown: str, random_state: int) -> list[str]:
    """The problems of one ``model:`` entry (training.yml ``model`` or a set component's, at ``key``):
    an unknown class, parameters the class refuses, a threshold on a regressor."""
    from lakescore.models import MODEL_CLASSES

    if model.class_name not in MODEL_CLASSES:
        return [f"{shown}: {key}.class must be one of {', '.join(sorted(MODEL_CLASSES))}; got {model.class_name!r}"]
    problems = []
    try:
        build_model(model.class_name, model.params, random_state=random_state)
    except ConfigError as err:
        problems += err.problems
    if model.threshold is not None and task_of(model.class_name) == "regression":
        problems.append(f"{shown}: {key}.threshold applies to classifiers only; {model.class_name} is a "
                        f"regressor; got {_shown_setting(model.threshold)} (delete {key}.threshold)")
    return problems


def training_problems(project: ProjectConfig, empty: pd.DataFrame) -> list[str]:
    """Everything training can check without reading rows, against the training table's columns:
    the feature, key and rule columns, the recipe's steps and columns, the row filter and label
    expression (evaluated on ``empty``) and a single model's class and parameters. A model set's
    components, composed columns and combined rules are :func:`lakescore.training_set.set_problems`'
    (:func:`lakescore.workflows.train.preflight` lists both).

    Parameters
    ----------
    project : ProjectConfig
    empty : DataFrame of shape (0, n_columns)
        The training table's columns and dtypes, no rows.

    Returns
    -------
    list of str
        Every problem, each naming the file, the key, the bad value and what is allowed (empty: none).
    """
    cfg = project.training
    shown = project.shown("training")
    problems = []
    available = set(empty.columns)
    for key in ("feature_columns", "record_keys"):
        for column in getattr(cfg.data, key):
            if column not in available:
                problems.append(f"{shown}: data.{key} names unknown column {column!r} "
                                f"of {cfg.data.table}; available: {', '.join(sorted(available))}")
    for rule in (*project.scoring.eligibility, *project.scoring.output):
        problems += [f"{project.shown('scoring')}: rule {rule.name!r} reads unknown column {c!r} of "  # type: ignore[attr-defined]  # eligibility and output rule configs both have name and columns
                     f"{cfg.data.table}" for c in rule.columns if c not in available]  # type: ignore[attr-defined]  # as above
    for key, text in (("filter", cfg.data.filter), ("label_expression", cfg.data.label_expression)):
        if text:
            try:
                empty.query(text, engine="python") if key == "filter" else empty.eval(text)
            except Exception as err:  # pandas raises several types for a bad expression
                problems.append(f"{shown}: data.{key} {text!r} cannot be evaluated on {cfg.data.table} "
                                f"({type(err).__name__}: {err}); write a pandas expression over its columns")
    problems += recipe_problems(project, available, source=cfg.data.table)
    if cfg.model_set is not None:
        return problems
    if cfg.model is not None:
        problems += model_problems(cfg.model, key="model", shown=shown, random_state=cfg.defaults.random_state)
    if project.scoring.combined_rules:
        problems.append(f"{project.shown('scoring')}: combined_rules apply to a model set only; got "
                        f"{[r.name for r in project.scoring.combined_rules]} (declare model_set in "
                        f"{shown}, or write them as output rules)")
    return problems


def _shown_setting(setting: ThresholdSetting) -> str:
    """The setting as training.yml writes it, for messages."""
    if setting.optimize:
        return f"{{optimize: {setting.optimize}}}"
    if setting.classes:
        return "{classes: {" + ", ".join(f"{c}: {t:g}" for c, t in setting.classes.items()) + "}}"
    return f"{setting.value:g}"


def with_threshold(chain: FittedChain, setting: ThresholdSetting | None, holdout: pd.DataFrame, y: pd.Series, *,
                   shown: str = "config/training.yml", key: str = "model") -> FittedChain:
    """``chain`` with the decision threshold that training.yml ``model.threshold`` asks for.

    A number is the binary threshold as written; ``{classes: ...}`` is the multiclass map, its
    labels matched to the model's classes (exactly, or by their text: ``"1"`` names class 1);
    ``{optimize: f1 | youden}`` is chosen by :func:`lakescore.thresholds.optimal_threshold` on the
    holdout rows the chain predicts and that have a label (the rows :func:`holdout_metrics` measures).
    The holdout metrics computed after it are those of the thresholded labels.

    Parameters
    ----------
    chain : FittedChain
        The fitted chain (without a threshold).
    setting : ThresholdSetting or None
        ``model.threshold``; None returns ``chain`` unchanged.
    holdout : DataFrame of shape (n_rows, >= len(chain.input_columns))
        Raw holdout rows.
    y : Series of shape (n_rows,)
        Their labels, aligned with ``holdout``.
    shown : str, default "config/training.yml"
        How messages name the file.
    key : str, default "model"
        How messages name the ``model:`` entry that holds the threshold, e.g.
        ``model_set.components.delay_model.model`` for a model set's component.

    Returns
    -------
    FittedChain

    Raises
    ------
    ConfigError
        A regressor; a number or ``optimize`` for a multiclass model, or a ``classes`` map for a
        binary one; a class the model does not have, or a class left out; ``optimize`` on a holdout
        whose predicted rows hold one class only.
    """
    if setting is None:
        return chain
    got = _shown_setting(setting)
    at = f"{key}.threshold"
    classes = list(chain.classes or [])
    if chain.task != "classification":
        raise ConfigError([f"{shown}: {at} applies to classifiers only; {chain.model_class} is a "
                           f"regressor; got {got} (delete {at})"])
    binary = len(classes) == 2
    if setting.classes is not None:
        if binary:
            raise ConfigError([f"{shown}: {at} classes is for a model of 3 or more classes; this one has "
                               f"{classes}; got {got} (write threshold: <p> for class {classes[1]!r})"])
        return replace(chain, threshold=Threshold(classes=_class_map(setting.classes, classes, f"{shown}: {at}", got)))
    if not binary:
        raise ConfigError([f"{shown}: {at} must be {{classes: {{...}}}} for a model of {len(classes)} classes "
                           f"{classes}; got {got} (give each class its threshold)"])
    if setting.value is not None:
        return replace(chain, threshold=Threshold(value=setting.value))
    scored = chain.predict(holdout)
    mask = (scored["scoring_status"] == "predicted").to_numpy() & pd.Series(y).notna().to_numpy()
    positive = (pd.Series(y)[mask].to_numpy().astype(str) == str(classes[1]))
    score = scored["probability"][mask].to_numpy(dtype="float64")
    try:
        value = optimal_threshold(positive, score, setting.optimize)  # type: ignore[arg-type]
    except ValueError as err:
        raise ConfigError([f"{shown}: {at} {got} cannot be chosen on the {int(mask.sum())} predicted "
                           f"holdout rows: {err} (raise split.holdout_fraction, or write a fixed threshold)"]) from err
    return replace(chain, threshold=Threshold(value=value, method=setting.optimize,  # type: ignore[arg-type]
                                              holdout_rows=int(mask.sum())))


def _class_map(given: dict[Any, float], classes: list[Any], where: str, got: str) -> tuple[tuple[Any, float], ...]:
    """The ``classes`` map in the model's class order; every class must be named, and only those
    (``where``: how messages name the file and the key)."""
    by_text = {str(c): c for c in classes}
    matched = {(label if label in classes else by_text.get(str(label))): t for label, t in given.items()}
    unknown = [label for label in given if label not in classes and str(label) not in by_text]
    missing = [c for c in classes if c not in matched]
    problems = [f"{where} classes names {label!r}, which is not a class of the model {classes}; "
                f"got {got} (use the labels the model learned)" for label in unknown]
    if missing:
        problems.append(f"{where} classes leaves out class(es) {missing} of {classes}; got {got} "
                        "(give every class a threshold)")
    if problems:
        raise ConfigError(problems)
    return tuple((c, matched[c]) for c in classes)


def prepare_rows(project: ProjectConfig, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, Any]:
    """The project's training rows from a raw table frame: the row filter, the label, the
    Polars boundary (``defaults.engine``) and the pre-split recipe, in that order.

    Returns
    -------
    (frame, y, pre)
        Rows kept (pandas), their labels (same index) and the learned pre-split recipe.
    """
    cfg = project.training
    if cfg.data.filter:
        frame = frame.query(cfg.data.filter, engine="python")
    y = derive_label(frame, column=cfg.data.label_column, expression=cfg.data.label_expression)
    if cfg.defaults.engine == "polars":
        import polars as pl  # only for polars projects: the frame crosses the boundary once

        frame = pl.from_pandas(frame)
    frame_pd = to_pandas(frame)
    y.index = frame_pd.index
    targets = _target_columns(cfg.data)
    for component in (cfg.model_set.components.values() if cfg.model_set else []):  # each component's label
        expression = expression_columns(component.label_expression) if component.label_expression else []
        targets += [c for c in (component.label_column, *expression) if c]
    pre = learn_pre_split(frame_pd, recipe=list(cfg.pre_split), target_columns=targets,
                          skip_target=project.scoring.skip_target_pre_split_steps)
    return frame_pd.loc[pre.kept], y.loc[pre.kept], pre


def fit_project_chain(project: ProjectConfig, frame: pd.DataFrame, y: pd.Series, pre: PreSplit) -> FittedChain:
    """:func:`fit_chain` with everything the project's config says (:meth:`ChainRecipe.from_project`:
    recipe, model, eligibility and output rules, mode, engine) and the learned pre-split recipe.
    Training and the smoke probe both use it, so the probe checks the chain training would admit."""
    return fit_chain(frame, y, ChainRecipe.from_project(project), pre_split=pre)
