"""Model families by exact class name, and fingerprints of fitted models.

A model is chosen in training.yml by its exact class name (``model.class``); lakescore builds that
class and nothing else. XGBoost and LightGBM fingerprints hash their native trees (the booster's
saved model), not only their Python parameters.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

import numpy as np

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


# classifiers whose own ``predict`` is the argmax of scores that their ``predict_proba`` maps by one
# non-decreasing function (softmax, the logistic function, dividing by the row's sum) or the argmax
# of ``predict_proba`` itself; a binary one's ``score > 0`` (``>= 0``: GradientBoosting;
# ``p > 0.5``: XGBoost) splits where the two probabilities tie. Read from each class's ``predict``
# and ``predict_proba`` (scikit-learn 1.9, LightGBM 4.7, XGBoost 3.2). Left out: SVC (Platt
# scaling is fitted apart from the decision function), SGDClassifier, k-NN, Voting and Stacking.
PROBA_ARGMAX_CLASSES = frozenset({
    "LogisticRegression", "DecisionTreeClassifier", "RandomForestClassifier", "ExtraTreesClassifier",
    "HistGradientBoostingClassifier", "GradientBoostingClassifier", "AdaBoostClassifier", "GaussianNB",
    "BernoulliNB", "MultinomialNB", "CalibratedClassifierCV", "LGBMClassifier", "XGBClassifier",
})
_XGB_PROBA_OBJECTIVES = ("binary:logistic", "multi:softprob")


def labels_follow_proba(model: Any) -> bool:
    """True when the fitted classifier's ``predict`` labels are those of :func:`proba_labels`: its
    exact class is in :data:`PROBA_ARGMAX_CLASSES` and it has a ``classes_`` array, a LightGBM
    model's objective is not a Python function (its ``predict`` then returns raw scores) and an
    XGBoost model's is ``binary:logistic`` or ``multi:softprob``."""
    if type(model).__name__ not in PROBA_ARGMAX_CLASSES or not isinstance(getattr(model, "classes_", None), np.ndarray):
        return False
    if native_library(model) == "lightgbm":
        return not callable(getattr(model, "objective", None))
    if native_library(model) == "xgboost":
        return getattr(model, "objective", None) in _XGB_PROBA_OBJECTIVES
    return True


def proba_labels(model: Any, matrix: Any, proba: np.ndarray) -> np.ndarray:
    """The labels ``model.predict(matrix)`` gives, from its ``predict_proba(matrix)`` ``proba``
    (n_rows, n_classes), for a model that :func:`labels_follow_proba`: ``classes_`` at the row's
    largest probability when exactly one class has it; the rows where two or more classes tie (or
    a probability is NaN) are labelled by ``model.predict`` on those rows alone, since there the
    probabilities no longer tell which side of the model's own rule the row fell (a score of 1e-17
    gives probabilities 0.5 and 0.5).

    Parameters
    ----------
    model : fitted classifier
    matrix : float64 array or scipy CSR of shape (n_rows, n_features)
        What ``proba`` was computed on.
    proba : float array of shape (n_rows, n_classes)

    Returns
    -------
    array of shape (n_rows,), of ``model.classes_``'s dtype.
    """
    top = proba.max(axis=1)
    single = np.count_nonzero(proba == top[:, None], axis=1) == 1
    labels = model.classes_.take(proba.argmax(axis=1))
    if not single.all():
        ties = np.flatnonzero(~single)
        labels[ties] = model.predict(matrix[ties])
    return labels


def native_library(model: Any) -> str | None:
    """``"xgboost"`` or ``"lightgbm"`` when the model is from that library, else None."""
    top = type(model).__module__.split(".")[0]
    return top if top in ("xgboost", "lightgbm") else None


def fingerprint(model: Any) -> str:
    """SHA-256 (hex) of the model's learned content, stable across processes and save/load.

    XGBoost: the booster's saved JSON model; LightGBM: the booster's model string; scikit-learn:
    the exact class and its whole saved state (what pickle keeps: parameters, public and private
    fitted attributes, ``Tree`` nodes, members of ensembles), digested by
    :func:`lakescore.content_digest.content_digest`, which never reads ``repr``, ``id`` or an
    address. A retrained, edited or swapped part changes it.

    Raises
    ------
    FingerprintError
        The model holds a value that cannot be saved (named by its path in the model).
    """
    from lakescore.content_digest import content_digest

    return content_digest(model, special=_native_model)


def _native_model(value: Any) -> bytes | None:
    """The saved native model of a fitted XGBoost or LightGBM estimator, else None (unfitted ones,
    such as an ensemble's ``estimators`` parameter, are digested by their saved parameters)."""
    fitted = hasattr(value, "get_params") and getattr(value, "_Booster", None) is not None
    library = native_library(value) if fitted else None
    if library == "xgboost":
        return bytes(value.get_booster().save_raw(raw_format="json"))
    if library == "lightgbm":
        return value.booster_.model_to_string().encode()
    return None


def runtime_versions(model: Any) -> dict[str, str]:
    """Exact versions a fitted model depends on: scikit-learn always, xgboost/lightgbm when used."""
    import sklearn

    versions = {"scikit-learn": sklearn.__version__}
    library = native_library(model)
    if library:
        versions[library] = importlib.import_module(library).__version__
    return versions
