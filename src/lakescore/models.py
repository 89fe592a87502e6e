"""Model families by exact class name, and fingerprints of fitted models.

A model is chosen in training.yml by its exact class name (``model.class``); lakescore builds that
class and nothing else. XGBoost and LightGBM fingerprints hash their native trees (the booster's
saved model), not only their Python parameters.
"""

from __future__ import annotations

import hashlib
import importlib
from typing import Any, Literal

from lakescore.errors import ConfigError

Task = Literal["classification", "regression"]

# exact class name -> (module, task)
MODEL_CLASSES: dict[str, tuple[str, Task]] = {
    "LogisticRegression": ("sklearn.linear_model", "classification"),
    "LinearRegression": ("sklearn.linear_model", "regression"),
    "Ridge": ("sklearn.linear_model", "regression"),
    "Lasso": ("sklearn.linear_model", "regression"),
    "ElasticNet": ("sklearn.linear_model", "regression"),
    "DecisionTreeClassifier": ("sklearn.tree", "classification"),
    "DecisionTreeRegressor": ("sklearn.tree", "regression"),
    "RandomForestClassifier": ("sklearn.ensemble", "classification"),
    "RandomForestRegressor": ("sklearn.ensemble", "regression"),
    "ExtraTreesClassifier": ("sklearn.ensemble", "classification"),
    "ExtraTreesRegressor": ("sklearn.ensemble", "regression"),
    "HistGradientBoostingClassifier": ("sklearn.ensemble", "classification"),
    "HistGradientBoostingRegressor": ("sklearn.ensemble", "regression"),
    "LGBMClassifier": ("lightgbm", "classification"),
    "LGBMRegressor": ("lightgbm", "regression"),
    "XGBClassifier": ("xgboost", "classification"),
    "XGBRegressor": ("xgboost", "regression"),
    "GradientBoostingClassifier": ("sklearn.ensemble", "classification"),
    "GradientBoostingRegressor": ("sklearn.ensemble", "regression"),
    "AdaBoostClassifier": ("sklearn.ensemble", "classification"),
    "AdaBoostRegressor": ("sklearn.ensemble", "regression"),
    "KNeighborsClassifier": ("sklearn.neighbors", "classification"),
    "KNeighborsRegressor": ("sklearn.neighbors", "regression"),
    "BernoulliNB": ("sklearn.naive_bayes", "classification"),
    "GaussianNB": ("sklearn.naive_bayes", "classification"),
    "MultinomialNB": ("sklearn.naive_bayes", "classification"),
    "CalibratedClassifierCV": ("sklearn.calibration", "classification"),
    "SGDClassifier": ("sklearn.linear_model", "classification"),
    "SVC": ("sklearn.svm", "classification"),
    "SVR": ("sklearn.svm", "regression"),
    "VotingClassifier": ("sklearn.ensemble", "classification"),
    "VotingRegressor": ("sklearn.ensemble", "regression"),
    "StackingClassifier": ("sklearn.ensemble", "classification"),
    "StackingRegressor": ("sklearn.ensemble", "regression"),
}

# ensembles: every member, calibration estimator and final estimator passes its own identity check
ENSEMBLES = {"VotingClassifier", "VotingRegressor", "StackingClassifier", "StackingRegressor",
             "CalibratedClassifierCV"}

# parameters that make a fit repeatable, set from defaults.random_state when the class takes them
_SEEDS = ("random_state",)


def task_of(class_name: str) -> Task:
    """Classification or regression, for an exact class name in :data:`MODEL_CLASSES`."""
    return MODEL_CLASSES[class_name][1]


def build_model(class_name: str, params: dict[str, Any], *, random_state: int) -> Any:
    """Construct the exact model class ``class_name`` with ``params``.

    ``random_state`` is set when the class accepts it and ``params`` does not give one; XGBoost and
    LightGBM are pinned to one thread per model call (``n_jobs=1``) unless ``params`` says otherwise,
    so a Spark worker's cores are not oversubscribed.

    Raises
    ------
    ConfigError
        Unknown class name (the message lists the supported ones) or parameters the class rejects.
    """
    if class_name not in MODEL_CLASSES:
        raise ConfigError([
            f"config/training.yml: model.class must be one of {', '.join(sorted(MODEL_CLASSES))}; "
            f"got {class_name!r}"
        ])
    module, _ = MODEL_CLASSES[class_name]
    cls = getattr(importlib.import_module(module), class_name)
    params = dict(params)
    accepted = cls().get_params()
    for seed in _SEEDS:
        if seed in accepted and seed not in params:
            params[seed] = random_state
    if module in ("xgboost", "lightgbm"):
        params.setdefault("n_jobs", 1)
    if module == "lightgbm":
        params.setdefault("verbosity", -1)
    try:
        return cls(**params)
    except TypeError as err:
        raise ConfigError([f"config/training.yml: model.params rejected by {class_name}: {err}"]) from err


def native_library(model: Any) -> str | None:
    """``"xgboost"`` or ``"lightgbm"`` when the model is from that library, else None."""
    top = type(model).__module__.split(".")[0]
    return top if top in ("xgboost", "lightgbm") else None


def fingerprint(model: Any) -> str:
    """SHA-256 of the model's learned content, stable across save and load.

    XGBoost: the booster's saved JSON model; LightGBM: the booster's model string; scikit-learn:
    the exact class, its parameters and every fitted attribute (``name_``), members of ensembles
    included, arrays by dtype, shape and bytes. A retrained, edited or swapped part changes it.
    """
    library = native_library(model)
    if library == "xgboost":
        payload = bytes(model.get_booster().save_raw(raw_format="json"))
    elif library == "lightgbm":
        payload = model.booster_.model_to_string().encode()
    else:
        digest = hashlib.sha256()
        _feed(digest, model)
        return digest.hexdigest()
    return hashlib.sha256(payload).hexdigest()


def _feed(digest: Any, value: Any) -> None:
    import numpy as np

    if hasattr(value, "get_params") and hasattr(value, "fit"):
        cls = type(value)
        digest.update(f"<{cls.__module__}.{cls.__qualname__}>".encode())
        if native_library(value):
            digest.update(fingerprint(value).encode())
            return
        _feed(digest, value.get_params(deep=False))
        fitted = {k: v for k, v in vars(value).items() if k.endswith("_") and not k.startswith("_")}
        _feed(digest, fitted)
    elif isinstance(value, np.ndarray):
        digest.update(f"<ndarray {value.dtype} {value.shape}>".encode())
        digest.update(value.tobytes() if value.dtype != object else repr(value.tolist()).encode())
    elif isinstance(value, dict):
        for key in sorted(value, key=repr):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"<seq {len(value)}>".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(repr(value).encode())


def runtime_versions(model: Any) -> dict[str, str]:
    """Exact versions a fitted model depends on: scikit-learn always, xgboost/lightgbm when used."""
    import sklearn

    versions = {"scikit-learn": sklearn.__version__}
    library = native_library(model)
    if library:
        versions[library] = importlib.import_module(library).__version__
    return versions
