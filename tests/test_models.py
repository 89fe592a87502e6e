"""Model fingerprints: stable across save, load and a fresh process for every supported class."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import joblib
import numpy as np
import pytest

from lakescore.content_digest import content_digest
from lakescore.errors import FingerprintError
from lakescore.models import (
    ENSEMBLES,
    MODEL_CLASSES,
    PROBA_ARGMAX_CLASSES,
    build_model,
    fingerprint,
    labels_follow_proba,
    proba_labels,
    task_of,
)

RNG = np.random.RandomState(0)
X = RNG.rand(80, 3)
Y_CLASS = (X[:, 0] + 0.3 * X[:, 1] > 0.6).astype(int)
Y_REG = X @ np.array([1.5, -2.0, 0.5]) + 0.1 * RNG.rand(80)


def _ensemble(name: str):
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import (
        RandomForestClassifier,
        RandomForestRegressor,
        StackingClassifier,
        StackingRegressor,
        VotingClassifier,
        VotingRegressor,
    )
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    members_c = [("lr", LogisticRegression()), ("rf", RandomForestClassifier(n_estimators=3, random_state=0))]
    members_r = [("lr", LinearRegression()), ("rf", RandomForestRegressor(n_estimators=3, random_state=0))]
    return {
        "VotingClassifier": lambda: VotingClassifier(members_c, voting="soft"),
        "VotingRegressor": lambda: VotingRegressor(members_r),
        "StackingClassifier": lambda: StackingClassifier(members_c, cv=2),
        "StackingRegressor": lambda: StackingRegressor(members_r, cv=2),
        "CalibratedClassifierCV": lambda: CalibratedClassifierCV(DecisionTreeClassifier(random_state=0), cv=2),
    }[name]()


def _fitted(name: str):
    model = _ensemble(name) if name in ENSEMBLES else build_model(name, {}, random_state=0)
    y = Y_CLASS if task_of(name) == "classification" else Y_REG
    return model.fit(X, y)


@pytest.fixture(scope="module")
def fitted_models() -> dict:
    return {name: _fitted(name) for name in sorted(MODEL_CLASSES)}


def test_every_model_class_keeps_its_fingerprint_after_save_and_load_in_a_fresh_process(
        fitted_models: dict, tmp_path: Path) -> None:
    before = {name: fingerprint(model) for name, model in fitted_models.items()}
    for model in fitted_models.values():  # predicting must not change what is fingerprinted
        model.predict(X)
    assert {name: fingerprint(model) for name, model in fitted_models.items()} == before
    joblib.dump(fitted_models, tmp_path / "models.joblib")
    script = ("import json, sys, joblib; from lakescore.models import fingerprint; "
              "models = joblib.load(sys.argv[1]); "
              "print(json.dumps({n: fingerprint(m) for n, m in models.items()}))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "models.joblib")],
                          capture_output=True, text=True, check=True)
    after = json.loads(done.stdout)
    assert {n: fp for n, fp in after.items() if fp != before[n]} == {}
    assert set(after) == set(MODEL_CLASSES)


def test_fingerprints_tell_models_apart(fitted_models: dict) -> None:
    prints = {fingerprint(model) for model in fitted_models.values()}
    assert len(prints) == len(fitted_models)


def test_a_tree_refit_on_other_rows_changes_the_fingerprint_and_a_copy_keeps_it() -> None:
    import io

    from sklearn.tree import DecisionTreeClassifier

    a = DecisionTreeClassifier(random_state=0).fit(X, Y_CLASS)
    b = DecisionTreeClassifier(random_state=0).fit(X[:40], Y_CLASS[:40])
    assert fingerprint(a) != fingerprint(b)
    buffer = io.BytesIO()
    joblib.dump(a, buffer)
    buffer.seek(0)
    assert fingerprint(joblib.load(buffer)) == fingerprint(a)


def test_content_digest_orders_dicts_and_sets_by_content_not_insertion() -> None:
    assert content_digest({"a": 1, "b": [1.0, None]}) == content_digest({"b": [1.0, None], "a": 1})
    assert content_digest({3, 1, 2}) == content_digest({2, 3, 1})
    assert content_digest([1, 2]) != content_digest((1, 2))
    assert content_digest(0.0) != content_digest(-0.0)
    assert content_digest(np.arange(3, dtype="int64")) != content_digest(np.arange(3, dtype="int32"))
    assert content_digest(["ab", "c"]) != content_digest(["a", "bc"])


def test_a_value_that_cannot_be_saved_is_refused_with_its_path() -> None:
    with pytest.raises(FingerprintError, match=r"model\['cache'\] holds a _thread.lock") as err:
        content_digest({"cache": threading.Lock()})
    assert err.value.code == "fingerprint_unstable"


# --- labels read from predict_proba ------------------------------------------------------------

ROWS = np.random.RandomState(1).rand(3000, 3)
# ties on purpose: rows repeated many times, and features on a coarse grid (trees' leaves split
# 50/50, k equal scores)
ROWS_TIED = np.round(np.vstack([ROWS[:1000], np.repeat(ROWS[:20], 50, axis=0)]) * 4) / 4


MODEL_PARAMS = {name: build_model(name, {}, random_state=0).get_params() for name in PROBA_ARGMAX_CLASSES}


def _labels(kind: str, n_rows: int) -> np.ndarray:
    rng = np.random.RandomState(2)
    score = ROWS[:n_rows, 0] + 0.5 * ROWS[:n_rows, 1] + 0.4 * rng.rand(n_rows)
    if kind == "binary":
        return (score > 0.9).astype(int)
    if kind == "text":
        return np.where(score > 0.9, "late", "on time").astype(object)
    return np.digitize(score, [0.6, 0.9, 1.2])  # four classes


@pytest.mark.parametrize(("name", "kind"), [(name, kind) for name in sorted(PROBA_ARGMAX_CLASSES)
                                             for kind in ("binary", "text", "multiclass")
                                             if (name, kind) != ("XGBClassifier", "text")])  # XGBoost: labels 0..n-1 only
def test_labels_read_from_predict_proba_are_the_models_own_predict(name: str, kind: str) -> None:
    x = np.round(ROWS[:400] * 4) / 4  # a coarse grid: tied probabilities at training too
    small = {"HistGradientBoostingClassifier": {"max_iter": 5}, "CalibratedClassifierCV": {}}
    params = small.get(name, {"n_estimators": 5} if "n_estimators" in MODEL_PARAMS[name] else {})
    model = build_model(name, params, random_state=0).fit(x, _labels(kind, 400))
    assert labels_follow_proba(model)
    for rows in (ROWS, ROWS_TIED):
        proba = model.predict_proba(rows)
        native = model.predict(rows)
        labels = proba_labels(model, rows, proba)
        assert labels.tolist() == native.tolist()


def test_probabilities_that_tie_take_the_models_own_rule_not_the_first_class() -> None:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression().fit(ROWS[:400], _labels("binary", 400))
    # scores of about 1e-17 (positive: predict says class 1) and 0 (predict says class 0): the
    # probabilities are 0.5 and 0.5 either way, and argmax alone would give class 0 to both
    model.coef_ = np.array([[1e-17, 0.0, 0.0]])
    model.intercept_ = np.array([0.0])
    rows = np.vstack([np.ones((5, 3)), np.zeros((5, 3))])
    proba = model.predict_proba(rows)
    assert (proba == 0.5).all()
    assert model.predict(rows).tolist() == [1] * 5 + [0] * 5
    assert proba_labels(model, rows, proba).tolist() == [1] * 5 + [0] * 5
    sparse = pytest.importorskip("scipy.sparse")
    assert proba_labels(model, sparse.csr_matrix(rows), proba).tolist() == [1] * 5 + [0] * 5


def test_classes_whose_labels_do_not_follow_predict_proba_keep_their_predict() -> None:
    assert not labels_follow_proba(build_model("SVC", {"probability": True}, random_state=0)
                                   .fit(ROWS[:200], _labels("binary", 200)))
    assert not labels_follow_proba(build_model("KNeighborsClassifier", {}, random_state=0)
                                   .fit(ROWS[:200], _labels("binary", 200)))
    assert not labels_follow_proba(build_model("LogisticRegression", {}, random_state=0))  # not fitted
