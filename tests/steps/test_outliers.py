"""IQR, ZScore, ManualBounds and EllipticEnvelope: flags from learned bounds, nothing dropped."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract, learning_frame

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.steps import learn_step, parse_params


@pytest.mark.parametrize("raw", cases("IQR", "ZScore", "ManualBounds", "EllipticEnvelope"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_iqr_exclusion_by_hand():
    train = pd.DataFrame({"distance": [100, 200, 300, 400, 500]})
    fitted = learn_step({"step": "IQR", "name": "far", "columns": ["distance"]}, train, None)
    # q1 = 200, q3 = 400, iqr = 200: fences 200 - 300 = -100 and 400 + 300 = 700
    assert fitted.state["low"] == [-100.0] and fitted.state["high"] == [700.0]
    score = pd.DataFrame({"distance": [700, 701, -101, None, 300]})
    assert fitted.flags(score).tolist() == [False, True, True, False, False]
    assert fitted.apply(score).equals(score)  # an outlier step never changes a value


def test_zscore_by_hand():
    train = pd.DataFrame({"dep_delay": [0.0, 2.0, 4.0]})  # mean 2, std sqrt(8/3)
    fitted = learn_step({"step": "ZScore", "name": "z", "columns": ["dep_delay"], "threshold": 1.0}, train, None)
    edge = np.sqrt(8 / 3)
    assert fitted.flags(pd.DataFrame({"dep_delay": [2 + edge * 0.999, 2 + edge * 1.001, 2.0]})).tolist() == [
        False, True, False]


def test_manual_bounds_need_a_bound():
    with pytest.raises(StepError, match="set lower, upper or both"):
        parse_params({"step": "ManualBounds", "name": "b", "columns": ["x"]})


def test_elliptic_envelope_agrees_with_sklearn_predict(flights_sample):
    from sklearn.covariance import EllipticEnvelope

    train, _ = learning_frame(flights_sample)
    columns = ["dep_delay", "distance"]
    fitted = learn_step({"step": "EllipticEnvelope", "name": "e", "columns": columns, "contamination": 0.05},
                        train, None)
    complete = flights_sample[columns].dropna()
    data = train[columns].dropna().to_numpy(dtype="float64")
    reference = EllipticEnvelope(contamination=0.05, random_state=0).fit(data)
    expected = reference.predict(complete.to_numpy(dtype="float64")) == -1
    assert (fitted.flags(complete) == expected).all()
    assert fitted.flags(complete).sum() > 0
    assert (fitted.kernel().flags(Columns.from_frame(complete, columns)) == expected).all()
