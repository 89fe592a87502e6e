"""PowerTransformer: per-value transform, invalid values excluded, and the 10% rule."""

import math

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract, learning_frame

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.frames import floats_close
from lakescore.steps import learn_step


@pytest.mark.parametrize("raw", cases("PowerTransformer"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def _box_cox(standardize=False):
    return {"step": "PowerTransformer", "name": "bc", "columns": ["distance"], "method": "box-cox",
            "standardize": standardize}


def test_box_cox_with_a_zero_excludes_only_that_row():
    train = pd.DataFrame({"distance": [1.0, 2.0, 3.0, 4.0, 5.0, 8.0, 13.0, 21.0]})
    fitted = learn_step(_box_cox(), train, None)
    lam = fitted.state["lambdas"][0]
    score = pd.DataFrame({"distance": [1.0, 0.0, -2.0, None, 4.0]})
    assert fitted.flags(score).tolist() == [False, True, True, False, False]
    out = fitted.apply(score)["distance"].to_numpy()
    assert out[0] == 0.0  # Box-Cox of 1 is (1^lambda - 1) / lambda = 0 for every lambda
    assert np.isnan(out[3])  # missing stays missing, for a later imputer
    assert math.isclose(out[4], (4.0 ** lam - 1) / lam, rel_tol=1e-9)


def test_box_cox_training_with_ten_percent_zeros_is_allowed():
    values = [0.0] + [float(v) for v in range(1, 10)]  # 1 of 10 rows invalid: 10%, not more
    fitted = learn_step(_box_cox(), pd.DataFrame({"distance": values}), None)
    assert (fitted.rows_in, fitted.rows_out) == (10, 9)


def test_more_than_ten_percent_invalid_training_rows_stop_training():
    values = [0.0, -1.0, 0.0] + [float(v) for v in range(1, 18)] + [None] * 5  # 3 of 25 rows = 12.0%
    with pytest.raises(StepError) as err:
        learn_step(_box_cox(), pd.DataFrame({"distance": values}), None)
    assert "12.0% of its 25 training rows (3)" in str(err.value)
    assert "Use method: yeo-johnson, or repair those rows" in str(err.value)


def test_missing_values_do_not_count_as_invalid():
    values = [None] * 8 + [1.0, 2.0, 3.0, 4.0]
    fitted = learn_step(_box_cox(), pd.DataFrame({"distance": values}), None)
    assert fitted.rows_out == 12


def test_yeo_johnson_matches_sklearn_transform(flights_sample):
    from sklearn.preprocessing import PowerTransformer

    train, _ = learning_frame(flights_sample)
    columns = ["dep_delay", "distance"]
    fitted = learn_step({"step": "PowerTransformer", "name": "yj", "columns": columns}, train, None)
    reference = PowerTransformer().fit(train[columns].to_numpy(dtype="float64"))
    whole = flights_sample[columns].to_numpy(dtype="float64")
    assert floats_close(fitted.apply(flights_sample[columns]).to_numpy(), reference.transform(whole)).all()


def test_an_infinite_value_or_overflowing_result_is_invalid():
    from lakescore.steps import FittedStep

    train = pd.DataFrame({"x": [1.0, 2.0, 4.0, 8.0, 16.0]})
    fitted = learn_step({"step": "PowerTransformer", "name": "p", "columns": ["x"], "standardize": False},
                        train, None)
    steep = FittedStep(fitted.kind, fitted.name, {**fitted.state, "lambdas": [3.0]})
    # Yeo-Johnson with lambda 3: ((x + 1)^3 - 1) / 3 overflows for x = 1e200; 1.0 gives 7/3
    score = pd.DataFrame({"x": [1e200, np.inf, 1.0]})
    assert steep.flags(score).tolist() == [True, True, False]
    assert math.isclose(steep.apply(score)["x"].iloc[2], 7 / 3, rel_tol=1e-12)


def test_the_kernel_flags_and_transforms_as_by_hand():
    from lakescore.steps import FittedStep

    train = pd.DataFrame({"x": [1.0, 2.0, 4.0, 8.0, 16.0]})
    fitted = learn_step({"step": "PowerTransformer", "name": "p", "columns": ["x"], "standardize": False},
                        train, None)
    steep = FittedStep(fitted.kind, fitted.name, {**fitted.state, "lambdas": [3.0]})
    kernel = steep.kernel()
    batch = Columns.from_frame(pd.DataFrame({"x": [1e200, np.inf, 1.0, None, -1.0]}), ["x"])
    flagged = kernel.flags(batch)
    assert flagged.tolist() == [True, True, False, False, False]
    batch.keep(~flagged)
    kernel.apply(batch)
    # kept: 1.0 -> ((1 + 1)^3 - 1) / 3 = 7/3; missing stays missing; -1.0 -> -((2)^(2-3) - 1)/(2-3) = -0.5
    out = batch.array("x")
    assert out.dtype == np.float64 and math.isclose(out[0], 7 / 3, rel_tol=1e-12)
    assert np.isnan(out[1]) and math.isclose(out[2], -0.5, rel_tol=1e-12)
