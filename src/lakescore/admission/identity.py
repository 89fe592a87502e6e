"""Identity: admission checks the exact fitted model class, not a family name.

A model passes when its class is exactly the registered class of that name (no subclass, no
look-alike from another module), no method is replaced on the instance, and family conditions hold
(XGBRegressor: gbtree booster, ``reg:squarederror`` or ``reg:logistic``, no custom objective or
callbacks). Tuning wrappers (``GridSearchCV`` ...) are unwrapped to their refit estimator. Voting,
stacking and calibrated models pass only when every member, calibration estimator and final
estimator passes its own check; the model fingerprint covers the members, so replacing one
invalidates the certificate.
"""

from __future__ import annotations

import importlib
from typing import Any

from lakescore.models import ENSEMBLES, MODEL_CLASSES

# admitted on identity alone; every other registered class needs model probe evidence
REVIEWED = {"LinearRegression", "LogisticRegression", "DecisionTreeClassifier", "DecisionTreeRegressor",
            "RandomForestClassifier", "RandomForestRegressor", "ExtraTreesClassifier", "ExtraTreesRegressor",
            "XGBRegressor"}
REPLACEABLE = ("predict", "predict_proba", "decision_function", "transform", "score_samples")


def unwrap(model: Any) -> Any:
    """The refit estimator of a tuning wrapper (``best_estimator_``), or the model itself."""
    return getattr(model, "best_estimator_", model)


def members(model: Any) -> list[Any]:
    """The fitted members of an ensemble: voting/stacking ``estimators_`` (and stacking's
    ``final_estimator_``), each calibrated classifier's ``estimator``; empty for other models."""
    found = list(getattr(model, "estimators_", []) if type(model).__name__ in ENSEMBLES else [])
    if hasattr(model, "final_estimator_"):
        found.append(model.final_estimator_)
    for calibrated in getattr(model, "calibrated_classifiers_", []):
        found.append(calibrated.estimator)
    return [m for m in found if m is not None and m != "drop"]


def identity_problems(model: Any) -> list[str]:
    """Why ``model`` fails the identity check (empty when it passes); ensembles are checked member
    by member, each problem prefixed with where the member sits."""
    model = unwrap(model)
    problems = _own_problems(model)
    for i, member in enumerate(members(model)):
        problems += [f"{type(model).__name__} member {i}: {p}" for p in identity_problems(member)]
    return problems


def _own_problems(model: Any) -> list[str]:
    cls = type(model)
    name = cls.__name__
    if name not in MODEL_CLASSES:
        return [f"Model class {cls.__module__}.{name} is not a supported exact class (subclasses are refused); "
                f"use one of {', '.join(sorted(MODEL_CLASSES))}"]
    expected = getattr(importlib.import_module(MODEL_CLASSES[name][0]), name)
    if cls is not expected:
        return [f"Model class {cls.__module__}.{name} is not {expected.__module__}.{name} (a subclass or "
                "look-alike); fit the library class itself"]
    problems = [f"Model instance replaces {m}() on the instance; fit the library class without patching it"
                for m in REPLACEABLE if m in vars(model)]
    if name == "XGBRegressor":
        params = model.get_params()
        if params.get("booster") not in (None, "gbtree"):
            problems.append(f"XGBRegressor booster must be gbtree; got {params.get('booster')!r}")
        if params.get("objective") not in ("reg:squarederror", "reg:logistic"):
            problems.append(f"XGBRegressor objective must be reg:squarederror or reg:logistic; got {params.get('objective')!r}")
        if params.get("callbacks"):
            problems.append("XGBRegressor must have no callbacks")
    return problems


def needs_model_probe(model: Any) -> bool:
    """True when the class is admitted only with model probe evidence (ensembles always are)."""
    return type(unwrap(model)).__name__ not in REVIEWED or bool(members(unwrap(model)))
