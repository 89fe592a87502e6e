"""StandardScaler, MinMaxScaler, RobustScaler, MaxAbsScaler, ClipValues and Winsorize."""

import math

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract, learning_frame

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.frames import floats_close
from lakescore.steps import learn_step, parse_params

SCALERS = ["StandardScaler", "MinMaxScaler", "RobustScaler", "MaxAbsScaler"]


@pytest.mark.parametrize("raw", cases(*SCALERS, "ClipValues", "Winsorize"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_standard_scaler_by_hand():
    train = pd.DataFrame({"distance": [100, 200, 300]})
    fitted = learn_step({"step": "StandardScaler", "name": "s", "columns": ["distance"]}, train, None)
    # mean 200, population std sqrt((100^2 + 0 + 100^2) / 3) = 100 * sqrt(2/3)
    out = fitted.apply(pd.DataFrame({"distance": [300, 200, None]}))["distance"].to_numpy()
    assert math.isclose(out[0], math.sqrt(1.5), rel_tol=1e-12)
    assert out[1] == 0.0 and np.isnan(out[2])


@pytest.mark.parametrize("kind", SCALERS)
def test_scalers_match_sklearn_transform(kind, flights_sample):
    import sklearn.preprocessing as skp

    train, _ = learning_frame(flights_sample)
    columns = ["dep_delay", "distance"]
    fitted = learn_step({"step": kind, "name": "s", "columns": columns}, train, None)
    ours = fitted.apply(flights_sample[columns]).to_numpy()
    reference = getattr(skp, kind)().fit(train[columns].to_numpy(dtype="float64"))
    assert floats_close(ours, reference.transform(flights_sample[columns].to_numpy(dtype="float64"))).all()


def test_minmax_clip_keeps_values_in_range():
    train = pd.DataFrame({"hour": [5, 10, 15]})
    fitted = learn_step({"step": "MinMaxScaler", "name": "m", "columns": ["hour"], "clip": True}, train, None)
    assert fitted.apply(pd.DataFrame({"hour": [0, 10, 23]}))["hour"].tolist() == [0.0, 0.5, 1.0]


def test_clip_values_by_hand_with_a_per_column_bound():
    fitted = learn_step({"step": "ClipValues", "name": "c", "columns": ["dep_delay", "arr_delay"],
                         "lower": -30, "upper": 120, "bounds": {"arr_delay": [None, 60]}},
                        pd.DataFrame({"dep_delay": [0.0], "arr_delay": [0.0]}), None)
    out = fitted.apply(pd.DataFrame({"dep_delay": [-45.0, 500.0, None], "arr_delay": [-500.0, 90.0, 1.0]}))
    assert out["dep_delay"].tolist()[:2] == [-30.0, 120.0] and np.isnan(out["dep_delay"].iloc[2])
    assert out["arr_delay"].tolist() == [-500.0, 60.0, 1.0]


@pytest.mark.parametrize("raw,message", [
    ({"lower": 5, "upper": 1}, "lower 5.0 is above upper 1.0"),
    ({}, "has neither a lower nor an upper bound"),
    ({"lower": 0, "bounds": {"other": [0, 1]}}, r"bounds name column\(s\) \['other'\]"),
])
def test_clip_values_config_is_strict(raw, message):
    with pytest.raises(StepError, match=message):
        parse_params({"step": "ClipValues", "name": "c", "columns": ["x"], **raw})


def test_winsorize_clips_to_training_quantiles():
    train = pd.DataFrame({"dep_delay": np.arange(101, dtype="float64")})  # 0..100
    fitted = learn_step({"step": "Winsorize", "name": "w", "columns": ["dep_delay"],
                         "lower_quantile": 0.1, "upper_quantile": 0.9}, train, None)
    assert fitted.apply(pd.DataFrame({"dep_delay": [-5.0, 50.0, 1000.0]}))["dep_delay"].tolist() == [10.0, 50.0, 90.0]


def kernel_frame(fitted, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` through the step's compiled kernel (a Columns batch of all its columns)."""
    batch = Columns.from_frame(frame, frame.columns)
    fitted.kernel().apply(batch)
    return batch.frame(list(batch.arrays))


def test_minmax_kernel_takes_nullable_and_number_text_columns_by_hand():
    train = pd.DataFrame({"a": [0, 10], "b": [0.0, 4.0], "c": [0.0, 2.0]})
    fitted = learn_step({"step": "MinMaxScaler", "name": "m", "columns": ["a", "b", "c"]}, train, None)
    frame = pd.DataFrame({"a": pd.array([5, None, 20], dtype="Int64"),
                          "b": pd.array([1.0, 2.0, None], dtype="Float64"),
                          "c": np.array(["1.5", None, "4"], dtype=object)})
    out = kernel_frame(fitted, frame)
    assert list(out.dtypes) == [np.dtype("float64")] * 3
    np.testing.assert_array_equal(out["a"].to_numpy(), [0.5, np.nan, 2.0])
    np.testing.assert_array_equal(out["b"].to_numpy(), [0.25, 0.5, np.nan])
    np.testing.assert_array_equal(out["c"].to_numpy(), [0.75, np.nan, 2.0])


def test_clip_kernel_leaves_the_batch_arrays_it_read_unchanged():
    fitted = learn_step({"step": "ClipValues", "name": "c", "columns": ["x"], "lower": 0, "upper": 1},
                        pd.DataFrame({"x": [0.5]}), None)
    x = np.array([-2.0, 0.5, 7.0])
    out = kernel_frame(fitted, pd.DataFrame({"x": x}, copy=False))
    assert out["x"].tolist() == [0.0, 0.5, 1.0]
    assert x.tolist() == [-2.0, 0.5, 7.0]


def test_winsorize_kernel_refuses_text_naming_the_step():
    fitted = learn_step({"step": "Winsorize", "name": "w", "columns": ["x"]},
                        pd.DataFrame({"x": [1.0, 2.0, 3.0]}), None)
    with pytest.raises(StepError, match="step 'Winsorize' needs numbers in column 'x' but found 'n/a'"):
        kernel_frame(fitted, pd.DataFrame({"x": np.array(["4500.0", "n/a"], dtype=object)}))
