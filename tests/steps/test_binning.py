"""KBinsDiscretizer, CustomBinning and GeneralBinning."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract, learning_frame

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.frames import floats_close
from lakescore.steps import learn_step, parse_params


@pytest.mark.parametrize("raw", cases("KBinsDiscretizer", "CustomBinning", "GeneralBinning"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_bins_match_sklearn_transform(flights_sample):
    from sklearn.preprocessing import KBinsDiscretizer

    train, _ = learning_frame(flights_sample)
    fitted = learn_step({"step": "KBinsDiscretizer", "name": "b", "columns": ["distance"], "n_bins": 4},
                        train, None)
    reference = KBinsDiscretizer(n_bins=4, encode="ordinal", random_state=0).fit(train[["distance"]])
    ours = fitted.apply(flights_sample[["distance"]])["distance"].to_numpy()
    assert floats_close(ours, reference.transform(flights_sample[["distance"]])[:, 0]).all()


def test_uniform_bins_by_hand_and_missing_stays_missing():
    train = pd.DataFrame({"hour": [0.0, 10.0, 20.0]})
    fitted = learn_step({"step": "KBinsDiscretizer", "name": "b", "columns": ["hour"], "n_bins": 4,
                         "strategy": "uniform"}, train, None)
    assert fitted.state["edges"] == [[0.0, 5.0, 10.0, 15.0, 20.0]]
    out = fitted.apply(pd.DataFrame({"hour": [-3.0, 5.0, 14.9, 99.0, None]}))["hour"].tolist()
    assert out[:4] == [0.0, 1.0, 2.0, 3.0] and np.isnan(out[4])


def test_the_kernel_bins_nullable_integers_by_hand():
    train = pd.DataFrame({"hour": [0.0, 10.0, 20.0]})
    fitted = learn_step({"step": "KBinsDiscretizer", "name": "b", "columns": ["hour"], "n_bins": 4,
                         "strategy": "uniform"}, train, None)
    batch = Columns.from_frame(pd.DataFrame({"hour": pd.array([-3, 5, 14, 99, None], dtype="Int64")}), ["hour"])
    fitted.kernel().apply(batch)
    out = batch.array("hour")
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [0.0, 1.0, 2.0, 3.0, np.nan])  # edges 0, 5, 10, 15, 20; 5 opens bin 1


def _both(fitted, frame, column):
    """The reference apply's and the kernel's output column, as lists (they must agree)."""
    batch = Columns.from_frame(frame, frame.columns)
    fitted.kernel().apply(batch)
    return fitted.apply(frame)[column].tolist(), batch.array(column).tolist()


VALUES = pd.DataFrame({"d": [0.0, 1.0, 500.0, 501.0, 5000.0, 6000.0, None, -5.0]})


@pytest.mark.parametrize("closed,outside,want", [
    # (0, 500], (500, 1000], (1000, 5000]: 0 and -5 are below, 6000 above
    ("right", "missing", [None, 0, 0, 1, 2, None, None, None]),
    ("right", "clip", [0, 0, 0, 1, 2, 2, None, 0]),
    # [0, 500), [500, 1000), [1000, 5000): 5000 is on the open end
    ("left", "missing", [0, 0, 1, 1, None, None, None, None]),
    ("left", "clip", [0, 0, 1, 1, 2, 2, None, 0]),
])
def test_custom_bins_by_hand(closed, outside, want):
    fitted = learn_step({"step": "CustomBinning", "name": "b", "columns": ["d"], "edges": [0, 500, 1000, 5000],
                         "closed": closed, "outside": outside}, VALUES.head(1), None)
    expected = [np.nan if w is None else float(w) for w in want]
    for got in _both(fitted, VALUES, "d"):
        np.testing.assert_array_equal(got, expected)


def test_custom_bins_with_labels_give_text_and_none():
    fitted = learn_step({"step": "CustomBinning", "name": "b", "columns": ["d"], "edges": {"d": [0, 500, 1000, 5000]},
                         "labels": ["short", "medium", "long"]}, VALUES.head(1), None)
    for got in _both(fitted, VALUES, "d"):
        assert got == [None, "short", "short", "medium", "long", None, None, None]
    assert fitted.apply(VALUES.iloc[:0])["d"].dtype == object


@pytest.mark.parametrize("raw,message", [
    ({"edges": 4}, r"edges: Value error, must be a list of edges, not a number of bins \(4\): pandas would compute "
                   r"equal-width edges from each batch.*use GeneralBinning"),
    ({"edges": [0, 5, 5]}, "edges of 'd' must be 2 or more strictly increasing numbers"),
    ({"edges": {"e": [0, 1]}}, r"edges must name exactly the step's columns \['d'\]; extra \['e'\], missing \['d'\]"),
    ({"edges": [0, 1, 2], "labels": ["a"]}, "labels has 1 entries but the edges of 'd' make 2 bins"),
    ({"edges": [0, 1, 2], "labels": ["a", "a"]}, "labels repeat a value"),
])
def test_custom_binning_config_is_strict(raw, message):
    with pytest.raises(StepError, match=message):
        parse_params({"step": "CustomBinning", "name": "b", "columns": ["d"], **raw})


def test_general_bins_learn_uniform_edges_by_hand():
    train = pd.DataFrame({"hour": [0.0, 10.0, 20.0]})
    fitted = learn_step({"step": "GeneralBinning", "name": "g", "columns": ["hour"], "n_bins": 4,
                         "strategy": "uniform"}, train, None)
    assert fitted.state["edges"] == [[0.0, 5.0, 10.0, 15.0, 20.0]]
    rows = pd.DataFrame({"hour": [-3.0, 0.0, 5.0, 5.1, 14.9, 20.0, 99.0, None]})
    # (0, 5], (5, 10], (10, 15], (15, 20]; beyond the training range: the first or last bin
    for got in _both(fitted, rows, "hour"):
        np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 3.0, np.nan])


def test_general_bins_with_labels_refuse_merged_bins():
    train = pd.DataFrame({"x": [1.0] * 8 + [2.0]})  # quantile edges 1, 1, 1, 2: sklearn merges to one bin
    with pytest.raises(StepError, match=r"column 'x' got 1 bins at training .* but labels has 4; give 1 labels"):
        learn_step({"step": "GeneralBinning", "name": "g", "columns": ["x"], "n_bins": 4,
                    "labels": ["a", "b", "c", "d"]}, train, None)
