"""Decision thresholds: labels flip exactly where hand-worked probabilities cross them, the saved form
round-trips exactly, and optimize picks what a count over the rows by hand picks."""

import json
from fractions import Fraction

import numpy as np
import pytest

from lakescore.thresholds import Threshold, optimal_threshold, saved_decision_rule


def test_a_binary_threshold_labels_the_positive_class_at_or_above_it():
    proba = np.array([[0.66, 0.34], [0.65, 0.35], [0.64, 0.36]])
    assert Threshold(value=0.35).labels(proba, [0, 1]).tolist() == [0, 1, 1]  # p >= t: 0.35 itself is positive
    assert Threshold(value=0.36).labels(proba, [0, 1]).tolist() == [0, 0, 1]
    assert Threshold(value=0.345).labels(proba, ["on_time", "late"]).tolist() == ["on_time", "late", "late"]


def test_a_multiclass_map_picks_the_largest_p_over_t_and_the_first_class_on_a_tie():
    thresholds = Threshold(classes=(("A", 0.5), ("B", 0.25), ("C", 0.25)))
    proba = np.array([[0.6, 0.3, 0.1],   # p/t 1.2, 1.2, 0.4: A and B tie -> A (first in the model's order)
                      [0.5, 0.3, 0.2],   # 1.0, 1.2, 0.8 -> B (the argmax would say A)
                      [0.4, 0.2, 0.4],   # 0.8, 0.8, 1.6 -> C (the argmax would say A: first of a tie)
                      [0.2, 0.1, 0.7]])  # 0.4, 0.4, 2.8 -> C
    assert thresholds.labels(proba, ["A", "B", "C"]).tolist() == ["A", "B", "C", "C"]
    assert np.argmax(proba, axis=1).tolist() == [0, 0, 0, 2]  # what the thresholds changed
    equal = Threshold(classes=((0, 0.3), (1, 0.3), (2, 0.3)))
    assert equal.labels(proba, [0, 1, 2]).tolist() == [0, 0, 0, 2]  # equal thresholds: the argmax


def test_the_saved_form_round_trips_exactly_with_integer_labels():
    for threshold in (Threshold(value=0.1 + 0.2, method="f1", holdout_rows=1204),
                      Threshold(classes=((0, 0.5), (1, 0.3), (2, 0.2)))):
        back = Threshold.from_json(json.loads(json.dumps(threshold.to_json())))
        assert back == threshold
    assert Threshold.from_json(json.loads(json.dumps(Threshold(classes=((7, 0.5), (9, 0.5))).to_json()))).classes[0][0] == 7


def test_the_description_names_the_value_in_full_and_how_it_was_chosen():
    assert (Threshold(value=0.30000000000000004, method="f1", holdout_rows=1204).describe()
            == "threshold 0.30000000000000004 (optimize: f1 on 1,204 holdout rows; positive when p >= 0.30000000000000004)")
    assert Threshold(value=0.35).describe() == "threshold 0.35 (fixed in training.yml; positive when p >= 0.35)"
    assert Threshold(classes=(("A", 0.5), ("B", 0.3))).describe() == (
        "class thresholds A: 0.5, B: 0.3 (fixed in training.yml; the class with the largest p/threshold wins)")
    assert saved_decision_rule({"task": "classification", "classes": [0, 1]}) == (
        "default 0.5 (the model's own predict: argmax)")  # chain.json saved before thresholds existed
    assert saved_decision_rule({"task": "regression", "classes": None, "threshold": None}) == (
        "no decision threshold (regressor)")


def _by_hand(positive, score, method):
    """Every distinct score as a threshold (p >= t), counted with numpy masks; exact fractions; a
    tie goes to the highest threshold."""
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    best = None
    for t in sorted(set(score.tolist()), reverse=True):
        predicted = score >= t
        tp, fp = int((predicted & positive).sum()), int((predicted & ~positive).sum())
        fn = n_pos - tp
        value = (Fraction(2 * tp, 2 * tp + fp + fn) if method == "f1"
                 else Fraction(tp, n_pos) - Fraction(fp, n_neg))
        if best is None or value > best[0]:
            best = (value, t)
    return best[1]


@pytest.mark.parametrize("method", ["f1", "youden"])
def test_optimize_picks_the_threshold_a_count_by_hand_picks(method):
    rng = np.random.default_rng(5)
    score = np.round(rng.uniform(size=400), 2)  # rounded: many rows share a score, so ties of counts happen
    positive = rng.uniform(size=400) < score * 0.8
    assert optimal_threshold(positive, score, method) == _by_hand(positive, score, method)


def test_optimize_on_a_small_hand_worked_holdout():
    # scores 0.9 0.8 0.7 0.6 0.4 0.3 with labels 1 1 0 1 0 0 (P = 3, N = 3)
    score = np.array([0.9, 0.8, 0.7, 0.6, 0.4, 0.3])
    positive = np.array([True, True, False, True, False, False])
    # t=0.8: TP 2 FP 0 -> F1 4/5, J 2/3; t=0.6: TP 3 FP 1 -> F1 6/7, J 2/3 (a tie: the higher, 0.8, wins J)
    assert optimal_threshold(positive, score, "f1") == 0.6
    assert optimal_threshold(positive, score, "youden") == 0.8


def test_optimize_needs_both_classes():
    with pytest.raises(ValueError, match="3 positive and 0 negative"):
        optimal_threshold(np.array([True, True, True]), np.array([0.2, 0.5, 0.9]), "f1")
