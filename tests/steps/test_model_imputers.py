"""KNNImputer and IterativeImputer: sklearn's fitted imputation, reproduced row by row."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract, learning_frame

from lakescore.errors import StepError
from lakescore.frames import floats_close
from lakescore.steps import learn_step, parse_params

COLUMNS = ["dep_delay", "arr_delay", "air_time", "distance"]


@pytest.mark.parametrize("raw", cases("KNNImputer", "IterativeImputer"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def _rows_with_gaps(flights):
    """Rows with some but not all values missing, plus complete rows with one value blanked."""
    rows = flights[COLUMNS].copy()
    rows.loc[rows.index[::7], "air_time"] = np.nan
    return rows


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_knn_matches_sklearn_transform(weights, flights_sample):
    from sklearn.impute import KNNImputer

    train, _ = learning_frame(flights_sample)
    fitted = learn_step({"step": "KNNImputer", "name": "k", "columns": COLUMNS, "weights": weights}, train, None)
    reference = KNNImputer(weights=weights).fit(train[COLUMNS].to_numpy(dtype="float64"))
    rows = _rows_with_gaps(flights_sample)
    ours = fitted.apply(rows).to_numpy()
    theirs = reference.transform(rows.to_numpy(dtype="float64"))
    close = floats_close(ours, theirs).all(axis=1)
    # sklearn breaks a tie at the k-th neighbour in an unspecified order (argpartition); we take
    # the earlier reference row. Every row that differs must have such a tie.
    assert close.mean() > 0.95
    reference_rows = fitted.state["reference"]
    for i in np.flatnonzero(~close):
        assert _tied_at_k(rows.to_numpy(dtype="float64")[i], reference_rows, k=5), f"row {i} differs without a tie"


def _tied_at_k(row, reference, k):
    """Independent check: some missing column's k-th and (k+1)-th nearest donors are equally far."""
    for j in np.flatnonzero(np.isnan(row)):
        donors = reference[~np.isnan(reference[:, j])]
        shared = ~np.isnan(donors) & ~np.isnan(row)
        squares = np.where(shared, (donors - np.nan_to_num(row)) ** 2, 0.0).sum(axis=1)
        counts = shared.sum(axis=1)
        dist = np.sort(np.sqrt(squares[counts > 0] * len(row) / counts[counts > 0]))
        if len(dist) > k and np.isclose(dist[k - 1], dist[k], rtol=1e-12, atol=0):
            return True
    return False


def test_knn_breaks_an_exact_tie_by_reference_position_in_any_batch_order():
    from lakescore.columns import Columns

    # x = 1 is exactly 1 away from x = 0 and x = 2 (nan-Euclidean: sqrt(2/1 * 1^2) for both)
    query = pd.DataFrame({"x": [1.0, 3.0, 1.0, 4.0], "z": [np.nan, np.nan, 7.0, np.nan]})
    for train, tie in [(pd.DataFrame({"x": [0.0, 2.0, 5.0], "z": [10.0, 20.0, 30.0]}), 10.0),
                       (pd.DataFrame({"x": [2.0, 0.0, 5.0], "z": [20.0, 10.0, 30.0]}), 20.0)]:
        fitted = learn_step({"step": "KNNImputer", "name": "k", "columns": ["x", "z"], "n_neighbors": 1},
                            train, None)
        # x = 3: 2.0 is nearest (1 away; 5.0 is 2 away); x = 4: 5.0 is nearest (1 away; 2.0 is 2 away)
        want = [tie, 20.0, 7.0, 30.0]
        assert fitted.apply(query)["z"].tolist() == want
        assert fitted.apply(query.iloc[::-1])["z"].tolist() == want[::-1]
        for i in range(len(query)):
            assert fitted.apply(query.iloc[[i]])["z"].tolist() == [want[i]]
        batch = Columns.from_frame(query.iloc[::-1], ["x", "z"])
        fitted.kernel().apply(batch)
        assert batch.array("z").tolist() == want[::-1]


def test_knn_keeps_at_most_max_reference_rows(flights_sample):
    train, _ = learning_frame(flights_sample)
    fitted = learn_step({"step": "KNNImputer", "name": "k", "columns": COLUMNS, "max_reference_rows": 50},
                        train, None)
    assert fitted.state["reference"].shape == (50, 4)


def test_knn_row_with_no_shared_value_gets_the_column_mean():
    train = pd.DataFrame({"a": [1.0, 3.0, None], "b": [None, None, 5.0]})
    fitted = learn_step({"step": "KNNImputer", "name": "k", "columns": ["a", "b"]}, train, None)
    # row (None, 7): only b is present, and no reference row with a has b -> mean of a = 2
    assert fitted.apply(pd.DataFrame({"a": [None], "b": [7.0]}))["a"].tolist() == [2.0]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # the reference fit's
def test_iterative_matches_sklearn_transform(flights_sample):
    from sklearn.experimental import enable_iterative_imputer  # noqa: F401
    from sklearn.impute import IterativeImputer

    train, _ = learning_frame(flights_sample)
    fitted = learn_step({"step": "IterativeImputer", "name": "it", "columns": COLUMNS}, train, None)
    reference = IterativeImputer(random_state=0).fit(train[COLUMNS].to_numpy(dtype="float64"))
    rows = _rows_with_gaps(flights_sample)
    assert floats_close(fitted.apply(rows).to_numpy(), reference.transform(rows.to_numpy(dtype="float64"))).all()


def test_iterative_runs_its_rounds_in_an_all_missing_batch(flights_sample):
    train, _ = learning_frame(flights_sample)
    fitted = learn_step({"step": "IterativeImputer", "name": "it", "columns": COLUMNS}, train, None)
    empty_row = pd.DataFrame({c: [np.nan] for c in COLUMNS})
    alone = fitted.apply(empty_row).to_numpy()
    # the same row among rows with values is filled the same way
    mixed = pd.concat([flights_sample[COLUMNS].head(5), empty_row], ignore_index=True)
    assert floats_close(alone[0], fitted.apply(mixed).to_numpy()[-1]).all()
    # and not with the initial means only, which is where sklearn's transform stops for this batch
    assert not floats_close(alone[0], np.asarray(fitted.state["initial"])).all()


def test_iterative_rejects_sample_posterior():
    with pytest.raises(StepError, match="sample_posterior: Value error, must be false"):
        parse_params({"step": "IterativeImputer", "name": "it", "columns": COLUMNS, "sample_posterior": True})
