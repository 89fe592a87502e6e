"""``lakescore train``: read the training rows at a pinned version, fit, admit, register.

Reads the table through the runtime, then strings the domain steps together: :mod:`lakescore.training`
(rows, recipe, model, decision threshold, holdout), :mod:`lakescore.admission` (identity, lint, probe, certificate),
:mod:`lakescore.monitoring.drift` (the drift profile) and :mod:`lakescore.packaging` (pyfunc,
registry, alias). A project whose training fingerprint is unchanged is not trained again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from lakescore import progress
from lakescore.admission.evidence import admit
from lakescore.config import ProjectConfig
from lakescore.errors import ConfigError, LakescoreError
from lakescore.monitoring.drift import training_profile
from lakescore.packaging import log_and_register, null_counts
from lakescore.runtime import Runtime
from lakescore.training import fit_project_chain, holdout_metrics, prepare_rows, training_problems, with_threshold
from lakescore.workflows.lookups import lookup_problems, training_features
from lakescore.training_fingerprint import (TrainingFingerprint, record_fingerprint, recorded_fingerprint,
                                            training_fingerprint)


@dataclass(frozen=True)
class TrainResult:
    """What ``lakescore train`` did."""

    model_name: str
    version: int
    run_id: str
    metrics: dict[str, float]
    rows: dict[str, int]
    steps: list[dict[str, Any]] = field(default_factory=list)
    certificate: dict[str, Any] = field(default_factory=dict)
    reused: bool = False
    note: str = ""
    decision_threshold: str = ""  # FittedChain.decision_rule: which threshold is in force
    feature_lookups: list[dict[str, Any]] = field(default_factory=list)  # [{table, version}] training joined

    def summary(self) -> dict[str, Any]:
        return {"model": f"{self.model_name} v{self.version}", "run_id": self.run_id,
                "metrics": self.metrics, "rows": self.rows, "steps": self.steps,
                **({"feature_lookups": self.feature_lookups} if self.feature_lookups else {}),
                "decision_threshold": self.decision_threshold,
                "certificate": self.certificate, "reused": self.reused, "note": self.note}


SUMMARY_ARTIFACT = "train_summary.json"


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
    (:func:`lakescore.training.training_problems` on the table's empty frame).

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
    problems += training_problems(project, empty)
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
    with progress.step(f"train: read {cfg.data.table}@v{fingerprint.source_version}") as shown:
        rows = features.training_rows(runtime, cfg.data.table, version=fingerprint.source_version, specs=specs,
                                      label=cfg.data.label_column)  # pandas join, or Feature Engineering's
        frame_pd, y, pre = prepare_rows(project, rows)  # joined before the split: the recipe sees the features
        shown.total_rows(len(frame_pd))
    train_idx, hold_idx = train_test_split(np.arange(len(frame_pd)), test_size=cfg.split.holdout_fraction,
                                           random_state=cfg.split.random_state)
    with progress.step("train: fit recipe and model", total=len(train_idx)) as shown:
        chain = replace(fit_project_chain(project, frame_pd.iloc[train_idx], y.iloc[train_idx], pre), lookups=specs,
                        lookup_versions=tuple(features.versions[spec.table_name] for spec in specs))
        shown.total_rows(len(train_idx))
    holdout = frame_pd.iloc[hold_idx]
    chain = with_threshold(chain, cfg.model.threshold, holdout, y.iloc[hold_idx], shown=project.shown("training"))
    metrics = holdout_metrics(chain, holdout, y.iloc[hold_idx])
    with progress.step("admission: identity, lint, probe, fresh-process check", total=len(holdout)) as shown:
        evidence = admit(chain, holdout)  # raises ProbeError before anything is logged
        shown.total_rows(len(holdout))
    with progress.step("train: log and register"), mlflow.start_run(run_name="train") as run:
        mlflow.log_params({"model_class": cfg.model.class_name, "training_table": cfg.data.table,
                           "training_version": fingerprint.source_version,
                           **{f"feature_table.{name}": v for name, v in features.versions.items()},
                           "training_rows": len(train_idx), "holdout_rows": len(hold_idx),
                           "decision_threshold": chain.decision_rule,
                           **{f"model.{k}": v for k, v in cfg.model.params.items()}})
        mlflow.log_metrics({k: v for k, v in metrics.items()})
        profile = training_profile(frame_pd.iloc[train_idx], feature_columns=list(cfg.data.feature_columns),
                                   predictions=chain.predict(holdout))
        mlflow.log_dict(profile, "drift_profile.json")  # PSI bins for lakescore monitor
        registered = log_and_register(chain, example=holdout.head(5), name=cfg.registry.model_name,
                                      alias=cfg.registry.alias, evidence=evidence,
                                      training_nulls=null_counts(frame_pd.iloc[train_idx], chain.input_columns),
                                      log_model=features.model_logger(chain.input_columns))
        result = TrainResult(
            model_name=registered.name, version=registered.version, run_id=run.info.run_id, metrics=metrics,
            rows={"training": len(train_idx), "holdout": len(hold_idx)},
            steps=[{"name": s.name, "step": s.kind, "rows_in": s.rows_in, "rows_out": s.rows_out}
                   for s in (*chain.pre_split, *chain.steps)],
            certificate={"artifact_sha256": registered.certificate.artifact_sha256,
                         "digest": registered.certificate.digest},
            note=f"trained: {note}", decision_threshold=chain.decision_rule, feature_lookups=features.record(),
        )
        mlflow.log_dict({k: v for k, v in asdict(result).items() if k not in ("reused", "note")}, SUMMARY_ARTIFACT)
    record_fingerprint(mlflow.MlflowClient(), registered.name, registered.version, fingerprint)
    return result
