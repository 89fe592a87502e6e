"""``lakescore train``: read the training rows at a pinned version, fit, admit, register.

Reads the table through the runtime, then strings the domain steps together: :mod:`lakescore.training`
(rows, recipe, model, decision threshold, holdout), :mod:`lakescore.admission` (identity, lint, probe, certificate)
and :mod:`lakescore.workflows.registration` (drift profile, pyfunc, registry, alias, summary). A project whose
training fingerprint is unchanged is not trained again; a table above training.yml ``max_rows`` is trained by
:mod:`lakescore.workflows.split_train`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from lakescore import progress
from lakescore.admission.combined import admit_set
from lakescore.admission.evidence import admit
from lakescore.chain import FittedChain
from lakescore.config import ProjectConfig
from lakescore.errors import ConfigError, LakescoreError
from lakescore.model_set import ModelSet
from lakescore.runtime import Runtime
from lakescore.training import fit_project_chain, holdout_metrics, prepare_rows, training_problems, with_threshold
from lakescore.training_fingerprint import TrainingFingerprint, recorded_fingerprint, training_fingerprint
from lakescore.training_set import component_labels, fit_project_set, set_metrics, set_problems, with_set_thresholds
from lakescore.workflows.lookups import lookup_problems, training_features
from lakescore.workflows.registration import SUMMARY_ARTIFACT, TrainResult, register
from lakescore.workflows.split_train import train_above_max_rows


def _unchanged_version(mlflow: Any, project: ProjectConfig, fingerprint: TrainingFingerprint) -> TrainResult | str:
    """The alias's version as a reused :class:`TrainResult` when it was trained from ``fingerprint``;
    otherwise why training runs (a note for the summary)."""
    reg = project.training.registry
    recorded = recorded_fingerprint(mlflow.MlflowClient(), reg.model_name, reg.alias)
    if recorded is None:
        return f"no version under alias {reg.alias} yet"
    version, before = recorded
    if before is None:
        return f"v{version} has no training fingerprint"
    if before.digest != fingerprint.digest:
        return f"changed since v{version}: " + "; ".join(fingerprint.changes(before))
    run_id = mlflow.MlflowClient().get_model_version(reg.model_name, str(version)).run_id
    try:
        saved = mlflow.artifacts.load_dict(f"runs:/{run_id}/{SUMMARY_ARTIFACT}")
    except Exception:  # mlflow raises several types for a missing artifact
        return f"v{version} has no {SUMMARY_ARTIFACT}"
    return TrainResult(**{**saved, "reused": True,
                          "note": f"unchanged since v{version} (source {fingerprint.source} version "
                                  f"{fingerprint.source_version}, same config, code and libraries): not retrained"})


def preflight(project: ProjectConfig, runtime: Runtime) -> None:
    """Check, before any work, everything training can check without reading rows
    (:func:`lakescore.training.training_problems` and, for a model set,
    :func:`lakescore.training_set.set_problems`, on the table's empty frame).

    Raises
    ------
    ConfigError
        Listing every problem, each naming the file, the key, the bad value and what is allowed;
        a training table that does not exist is one of them.
    """
    cfg = project.training
    try:
        empty = runtime.empty_frame(cfg.data.table)
    except LakescoreError as err:  # TableNotFoundError carries the fix
        raise ConfigError([f"{project.shown('training')}: data.table {cfg.data.table!r}: {err}"]) from err
    specs = [lookup.spec() for lookup in cfg.feature_lookups]
    empty, problems = lookup_problems(runtime, specs, empty, shown=project.shown("training"))
    problems += [f"{project.shown('training')}: feature_lookups[{i}] ({spec.table_name}) adds column {column!r}, "
                 f"which data.feature_columns does not list; add it there (the recipe then sees it) or drop it from "
                 "feature_names" for i, spec in enumerate(specs) for column in spec.output_columns
                 if column not in cfg.data.feature_columns]
    problems += training_problems(project, empty) + set_problems(project, empty)
    if problems:
        raise ConfigError(problems)


def train(project: ProjectConfig, runtime: Runtime, *,
          retrain: Literal["if_changed", "always"] = "if_changed") -> TrainResult:
    """Train, certify and register the project's model (``lakescore train``).

    Parameters
    ----------
    retrain : {"if_changed", "always"}, default "if_changed"
        ``if_changed`` returns the version the registry alias points at, untouched (``reused``),
        when its training fingerprint (:mod:`lakescore.training_fingerprint`: source table
        version, config, project code, lakescore and library versions) equals this one's.

    Raises
    ------
    ConfigError, StepError, TableNotFoundError
        Before any work when the config, recipe or table is wrong.
    """
    from sklearn.model_selection import train_test_split  # heavy: only when training runs

    cfg = project.training
    preflight(project, runtime)
    specs = tuple(lookup.spec() for lookup in cfg.feature_lookups)
    features = training_features(runtime, specs)  # each at its current version, recorded in the chain
    fingerprint = training_fingerprint(project, runtime.table_version(cfg.data.table),
                                       feature_tables=features.versions)
    mlflow = runtime.mlflow()
    found = _unchanged_version(mlflow, project, fingerprint)
    if isinstance(found, TrainResult) and retrain == "if_changed":
        return found
    note = "retrain: always" if isinstance(found, TrainResult) else found
    if cfg.max_rows is not None and runtime.row_count(cfg.data.table, version=fingerprint.source_version) > cfg.max_rows:
        return train_above_max_rows(project, runtime, fingerprint=fingerprint, features=features, note=note)
    with progress.step(f"train: read {cfg.data.table}@v{fingerprint.source_version}") as shown:
        rows = features.training_rows(runtime, cfg.data.table, version=fingerprint.source_version, specs=specs,
                                      label=cfg.data.label_column)  # pandas join, or Feature Engineering's
        frame_pd, y, pre = prepare_rows(project, rows)  # joined before the split: the recipe sees the features
        shown.total_rows(len(frame_pd))
    train_idx, hold_idx = train_test_split(np.arange(len(frame_pd)), test_size=cfg.split.holdout_fraction,
                                           random_state=cfg.split.random_state)
    holdout = frame_pd.iloc[hold_idx]
    versions = tuple(features.versions[spec.table_name] for spec in specs)
    with progress.step("train: fit recipe and model", total=len(train_idx)) as shown:
        if cfg.model_set is not None:
            model, metrics = _fit_set(project, frame_pd, pre, train_idx, hold_idx, specs, versions)
        else:
            model, metrics = _fit_chain(project, frame_pd, y, pre, train_idx, hold_idx, specs, versions)  # type: ignore[assignment]  # a ModelSet above, a FittedChain here
        shown.total_rows(len(train_idx))
    with progress.step("admission: identity, lint, probe, fresh-process check", total=len(holdout)) as shown:
        # raises ProbeError before anything is logged
        evidence = admit_set(model, holdout) if isinstance(model, ModelSet) else admit(model, holdout)
        shown.total_rows(len(holdout))
    return register(project, mlflow, model, evidence=evidence, metrics=metrics, training=frame_pd.iloc[train_idx],
                    holdout=holdout, fingerprint=fingerprint, features=features, note=f"trained: {note}")


def _fit_chain(project: ProjectConfig, frame: pd.DataFrame, y: pd.Series, pre: Any, train_idx: np.ndarray,
               hold_idx: np.ndarray, specs: tuple[Any, ...],
               versions: tuple[int, ...]) -> tuple[FittedChain, dict[str, float]]:
    """The project's one model: fitted on the training rows, its threshold and metrics on the holdout."""
    chain = replace(fit_project_chain(project, frame.iloc[train_idx], y.iloc[train_idx], pre), lookups=specs,
                    lookup_versions=versions)
    holdout, truth = frame.iloc[hold_idx], y.iloc[hold_idx]
    threshold = project.training.model.threshold if project.training.model else None
    chain = with_threshold(chain, threshold, holdout, truth, shown=project.shown("training"))
    return chain, holdout_metrics(chain, holdout, truth)


def _fit_set(project: ProjectConfig, frame: pd.DataFrame, pre: Any, train_idx: np.ndarray, hold_idx: np.ndarray,
             specs: tuple[Any, ...], versions: tuple[int, ...]) -> tuple[ModelSet, dict[str, float]]:
    """The project's model set: every component fitted on the same training rows, each with its own
    label, threshold and holdout metrics (``<component>.<metric>``)."""
    labels = component_labels(project, frame)
    fitted = fit_project_set(project, frame.iloc[train_idx], {n: y.iloc[train_idx] for n, y in labels.items()}, pre)
    fitted = replace(fitted, components=tuple((name, replace(chain, lookups=specs, lookup_versions=versions))
                                              for name, chain in fitted.components))
    holdout = frame.iloc[hold_idx]
    truth = {name: y.iloc[hold_idx] for name, y in labels.items()}
    fitted = with_set_thresholds(fitted, project, holdout, truth)
    return fitted, set_metrics(fitted, holdout, truth)
