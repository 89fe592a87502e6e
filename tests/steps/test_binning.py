"""KBinsDiscretizer."""

import numpy as np
import pandas as pd
import pytest

from lakescore.columns import Columns
from lakescore.frames import floats_close
from lakescore.steps import learn_step
from step_contract import cases, check_contract, learning_frame


@pytest.mark.parametrize("raw", cases("KBinsDiscretizer"))
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
