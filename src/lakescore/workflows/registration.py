"""Registering a trained model: one MLflow run, one registry version, and what ``lakescore train`` returns.

:func:`register` logs an admitted chain, model set or pasting ensemble (params, metrics, drift
profile, summary), registers it with its certificate, points the alias at it and records the
training fingerprint; :class:`TrainResult` is what it returns and ``train_summary.json``
(:data:`SUMMARY_ARTIFACT`) what a reused version reads back. Both
:mod:`lakescore.workflows.train` and :mod:`lakescore.workflows.split_train` register through it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from lakescore import progress
from lakescore.chain import FittedChain
from lakescore.config import ProjectConfig
from lakescore.model_set import ModelSet
from lakescore.monitoring.drift import training_profile
from lakescore.packaging import log_and_register, null_counts
from lakescore.training_fingerprint import TrainingFingerprint, record_fingerprint


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
    components: list[dict[str, str]] = field(default_factory=list)  # a model set's: packaging.component_record
    split: dict[str, Any] = field(default_factory=dict)  # split training's record (workflows.split_train)

    def summary(self) -> dict[str, Any]:
        return {"model": f"{self.model_name} v{self.version}", "run_id": self.run_id,
                "metrics": self.metrics, "rows": self.rows, "steps": self.steps,
                **({"feature_lookups": self.feature_lookups} if self.feature_lookups else {}),
                **({"components": self.components} if self.components else {}),
                **({"split": self.split} if self.split else {}),
                "decision_threshold": self.decision_threshold,
                "certificate": self.certificate, "reused": self.reused, "note": self.note}


SUMMARY_ARTIFACT = "train_summary.json"


def register(project: ProjectConfig, mlflow: Any, model: FittedChain | ModelSet, *, evidence: dict[str, Any],
             metrics: dict[str, float], training: pd.DataFrame, holdout: pd.DataFrame,
             fingerprint: TrainingFingerprint, features: Any, note: str, split: dict[str, Any] | None = None,
             description: str = "") -> TrainResult:
    """Log the admitted ``model`` in one MLflow run (params, ``metrics``, drift profile, summary),
    register it with its certificate, point the alias at it and record the training fingerprint.

    Parameters
    ----------
    training, holdout : DataFrame
        The rows the model was trained on (counted, profiled, null-counted) and measured on.
    features : FeatureTables
        The feature tables read (:func:`lakescore.workflows.lookups.read_feature_tables`).
    note : str
        The summary's note (why training ran).
    split : dict, optional
        Split training's record (:mod:`lakescore.workflows.split_train`): in the summary, the model
        config (``split_training``) and, with ``description``, the version's description.
    """
    cfg = project.training
    with progress.step("train: log and register"), mlflow.start_run(run_name="train") as run:
        models = [(f"{name}.", c) for name, c in model.components] if isinstance(model, ModelSet) else [("", model)]
        mlflow.log_params({**{f"{prefix}model_class": c.model_class for prefix, c in models},
                           "training_table": cfg.data.table,
                           "training_version": fingerprint.source_version,
                           **{f"feature_table.{name}": v for name, v in features.versions.items()},
                           "training_rows": len(training), "holdout_rows": len(holdout),
                           "decision_threshold": model.decision_rule,
                           **{f"{prefix}model.{k}": v for prefix, c in models
                              for k, v in _model_params(project, prefix).items()}})
        mlflow.log_metrics({k: v for k, v in metrics.items()})
        predictions = model.predict(holdout)
        profile = training_profile(training, feature_columns=_profiled(project),
                                   predictions=predictions, prediction_column=_profiled_prediction(model))
        mlflow.log_dict(profile, "drift_profile.json")  # PSI bins for lakescore monitor
        registered = log_and_register(model, example=holdout.head(5), name=cfg.registry.model_name,
                                      alias=cfg.registry.alias, evidence=evidence,
                                      training_nulls=null_counts(training, model.input_columns),
                                      log_model=features.model_logger(model.input_columns),
                                      note=description, extra_config={"split_training": split} if split else None)
        result = TrainResult(
            model_name=registered.name, version=registered.version, run_id=run.info.run_id, metrics=metrics,
            rows={"training": len(training), "holdout": len(holdout)},
            steps=[{"name": f"{prefix.replace('.', '/')}{s.name}", "step": s.kind, "rows_in": s.rows_in,
                    "rows_out": s.rows_out}
                   for i, (prefix, c) in enumerate(models) for s in (*(c.pre_split if i == 0 else ()), *c.steps)],
            certificate={"artifact_sha256": registered.certificate.artifact_sha256,
                         "digest": registered.certificate.digest},
            note=note, decision_threshold=model.decision_rule, feature_lookups=features.record(),
            components=list(registered.components), split=dict(split or {}),
        )
        mlflow.log_dict({k: v for k, v in asdict(result).items() if k not in ("reused", "note")}, SUMMARY_ARTIFACT)
    record_fingerprint(mlflow.MlflowClient(), registered.name, registered.version, fingerprint)
    return result


def _model_params(project: ProjectConfig, prefix: str) -> dict[str, Any]:
    """training.yml's model params (of component ``prefix`` = ``<name>.``, for a model set)."""
    cfg = project.training
    if cfg.model_set is not None:
        return dict(cfg.model_set.components[prefix.rstrip(".")].model.params)
    return dict(cfg.model.params) if cfg.model else {}


def _profiled(project: ProjectConfig) -> list[str]:
    """The columns the drift profile bins: data.feature_columns, and every component's own."""
    cfg = project.training
    columns = list(cfg.data.feature_columns)
    for component in (cfg.model_set.components.values() if cfg.model_set else []):
        columns += [c for c in component.feature_columns or [] if c not in columns]
    return columns


def _profiled_prediction(model: FittedChain | ModelSet) -> str | None:
    """The scored column the drift profile bins: None (a chain's own choice), or for a model set its
    first component's probability (classifier) or prediction (regressor), as the set names it."""
    if model.task != "model_set":  # a chain, or a pasting ensemble (a chain's columns)
        return None
    name, chain = model.components[0]  # type: ignore[union-attr]  # task 'model_set' is a ModelSet
    return f"{name}_probability" if chain.task == "classification" else f"{name}_prediction"
