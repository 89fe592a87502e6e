"""Identity: exact classes only; subclasses and patched instances are refused."""

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV

from lakescore.admission.identity import identity_problems, needs_model_probe
from lakescore.models import fingerprint

X = np.random.RandomState(0).rand(60, 3)
Y = (X[:, 0] > 0.5).astype(int)


class MyLogisticRegression(LogisticRegression):
    def predict(self, X):
        return super().predict(X)


def test_the_exact_class_passes_and_reviewed_classes_need_no_model_probe():
    model = LogisticRegression().fit(X, Y)
    assert identity_problems(model) == []
    assert not needs_model_probe(model)


def test_a_subclass_with_a_replaced_predict_is_refused():
    problems = identity_problems(MyLogisticRegression().fit(X, Y))
    assert problems == [f"Model class {__name__}.MyLogisticRegression is not a supported exact class (subclasses "
                        "are refused); use one of " + problems[0].split("use one of ")[1]]


def test_a_look_alike_with_the_same_name_is_refused():
    LookAlike = type("LogisticRegression", (LogisticRegression,), {})
    assert "is not sklearn.linear_model._logistic.LogisticRegression" in identity_problems(LookAlike().fit(X, Y))[0]


def test_an_instance_with_a_patched_predict_is_refused():
    model = LogisticRegression().fit(X, Y)
    model.predict = lambda X: np.zeros(len(X))
    assert identity_problems(model) == ["Model instance replaces predict() on the instance; fit the library class "
                                        "without patching it"]


def test_tuning_wrappers_are_unwrapped_to_the_refit_estimator():
    search = GridSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=2).fit(X, Y)
    assert identity_problems(search) == []


def test_swapping_one_ensemble_member_changes_the_fingerprint():
    forest = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, Y)
    before = fingerprint(forest)
    other = RandomForestClassifier(n_estimators=3, random_state=1).fit(X, Y)
    forest.estimators_[1] = other.estimators_[1]
    assert fingerprint(forest) != before


def test_an_ensemble_passes_only_when_every_member_does():
    from sklearn.ensemble import StackingClassifier, VotingClassifier

    voting = VotingClassifier([("lr", LogisticRegression()), ("rf", RandomForestClassifier(n_estimators=3))]).fit(X, Y)
    assert identity_problems(voting) == [] and needs_model_probe(voting)
    voting.estimators_[0] = MyLogisticRegression().fit(X, Y)  # a swapped member
    assert identity_problems(voting)[0].startswith("VotingClassifier member 0: Model class ")
    stacking = StackingClassifier([("lr", LogisticRegression())], final_estimator=MyLogisticRegression(), cv=2).fit(X, Y)
    assert [p.split(":")[0] for p in identity_problems(stacking)] == ["StackingClassifier member 1"]


def test_boosted_trees_fingerprint_their_native_trees():
    from lightgbm import LGBMClassifier
    from xgboost import XGBClassifier

    for cls in (LGBMClassifier, XGBClassifier):
        a = cls(n_estimators=3, n_jobs=1, verbosity=0 if cls is XGBClassifier else -1).fit(X, Y)
        b = cls(n_estimators=4, n_jobs=1, verbosity=0 if cls is XGBClassifier else -1).fit(X, Y)
        assert identity_problems(a) == [] and fingerprint(a) != fingerprint(b)
