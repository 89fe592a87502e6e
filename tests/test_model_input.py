"""The model's input container: built one way on every path, sealed in the chain, refused otherwise."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from lakescore import model_input
from lakescore.chain import FittedChain
from lakescore.errors import ConfigError, InputError
from lakescore.frames import derive_label
from lakescore.steps import learn_step
from lakescore.training import ChainRecipe, fit_chain

TEXT = [{"step": "tfidf_vectorizer", "name": "words", "columns": ["route"], "min_df": 2}]


@pytest.fixture(scope="module")
def routes(flights_sample):
    frame = flights_sample.copy()
    frame["route"] = frame[["carrier", "origin", "dest"]].astype("string").fillna("").agg(" ".join, axis=1)
    y = derive_label(frame, column="is_late", expression="arr_delay > 15")
    return frame[y.notna()], y[y.notna()]


def test_sparse_build_is_canonical_csr_with_nan_stored_and_zeros_implicit():
    column = pd.arrays.SparseArray([0.0, 2.0, 0.0], fill_value=0)
    matrix = model_input.build([np.array([0.0, np.nan, 3.0]), column], 3, "sparse")
    assert isinstance(matrix, sparse.csr_matrix) and matrix.has_sorted_indices
    # row 0 holds only zeros: nothing stored; row 1: NaN (stored) and 2.0; row 2: 3.0
    assert matrix.indptr.tolist() == [0, 0, 2, 3] and matrix.indices.tolist() == [0, 1, 0]
    assert np.isnan(matrix.data[0]) and matrix.data[1:].tolist() == [2.0, 3.0]
    dense = model_input.build([np.array([0.0, np.nan, 3.0]), column], 3, "dense")
    np.testing.assert_array_equal(dense, [[0.0, 0.0], [np.nan, 2.0], [3.0, 0.0]])


def test_nan_rows_and_first_nan_feature_agree_on_both_containers():
    columns = [np.array([1.0, 0.0, 0.0]), np.array([np.nan, 0.0, np.nan]), np.array([np.nan, 1.0, 0.0])]
    for container in ("dense", "sparse"):
        bad, first = model_input.nan_features(model_input.build(columns, 3, container))
        assert bad.tolist() == [True, False, True] and first.tolist() == [1, 1], container


def test_auto_seals_sparse_after_a_vectorizer_only_for_a_model_that_takes_it(routes):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    step = learn_step({"step": "tfidf_vectorizer", **{k: v for k, v in TEXT[0].items() if k != "step"}},
                      routes[0], None)
    scaler = learn_step({"step": "StandardScaler", "name": "s", "columns": ["distance"]}, routes[0], None)
    assert model_input.choose("auto", [step], LogisticRegression()) == "sparse"
    assert model_input.choose("auto", [scaler], LogisticRegression()) == "dense"
    assert model_input.choose("auto", [step], HistGradientBoostingClassifier()) == "dense"
    assert model_input.choose("dense", [step], LogisticRegression()) == "dense"
    with pytest.raises(ConfigError, match=r"model.input is sparse but HistGradientBoostingClassifier does not "
                                          r"take sparse input.*set model.input: dense or auto"):
        model_input.choose("sparse", [step], HistGradientBoostingClassifier())


def test_the_model_is_fitted_and_called_on_the_sealed_container(routes, tmp_path):
    frame, y = routes
    chain = fit_chain(frame.iloc[:1200], y.iloc[:1200],
                      ChainRecipe(steps=TEXT, model_class="XGBClassifier", model_params={"n_estimators": 20},
                                  feature_columns=["route", "distance"]))
    assert chain.model_input == "sparse"
    holdout = frame.iloc[1200:]
    scored = chain.predict(holdout)
    # independently: the step's sparse columns and distance as one CSR, straight into the booster
    features = chain.steps[0].apply(holdout)[list(chain.feature_columns)]
    want = chain.model.predict_proba(sparse.csr_matrix(features.to_numpy(dtype="float64")))[:, 1]
    np.testing.assert_allclose(scored["probability"].to_numpy(dtype="float64"), want, rtol=0, atol=0)
    # XGBoost reads an implicit sparse entry as missing, a dense 0.0 as zero: the container matters
    dense = chain.model.predict_proba(features.to_numpy(dtype="float64"))[:, 1]
    assert not np.array_equal(dense, want)
    loaded = FittedChain.load(chain.save(tmp_path / "chain"))
    assert json.loads((tmp_path / "chain" / "chain.json").read_text())["model_input"] == "sparse"
    assert loaded.model_input == "sparse"
    pd.testing.assert_frame_equal(loaded.predict(holdout), scored)


def test_a_matrix_in_another_container_is_refused_at_the_model(routes):
    frame, y = routes
    chain = fit_chain(frame.iloc[:600], y.iloc[:600],
                      ChainRecipe(steps=TEXT, model_class="LogisticRegression", model_params={"max_iter": 300},
                                  feature_columns=["route"]))
    dense = chain.model_matrix(chain.steps[0].apply(frame.iloc[:5])).toarray()
    with pytest.raises(InputError, match=r"fitted on model_input='sparse' but was handed a dense matrix"):
        chain._model_call(dense)


def test_an_unknown_saved_container_is_refused_at_load(routes, tmp_path):
    frame, y = routes
    chain = fit_chain(frame.iloc[:600], y.iloc[:600],
                      ChainRecipe(steps=[], model_class="LogisticRegression", model_params={"max_iter": 300},
                                  feature_columns=["distance"]))
    assert chain.model_input == "dense"
    folder = chain.save(tmp_path / "chain")
    meta = json.loads((folder / "chain.json").read_text())
    (folder / "chain.json").write_text(json.dumps({**meta, "model_input": "csc"}))
    with pytest.raises(InputError, match=r"model_input must be one of \['dense', 'sparse'\]; got 'csc'"):
        FittedChain.load(folder)


@pytest.mark.parametrize("container", ["dense", "sparse"])
def test_all_finite_is_true_only_when_every_value_is_finite(container):
    def matrix(*rows):
        return model_input.build([np.array(column, dtype="float64") for column in zip(*rows)], len(rows), container)

    assert model_input.all_finite(matrix([1.0, 0.0], [0.0, -2.5]))
    for bad in (np.nan, np.inf, -np.inf):
        assert not model_input.all_finite(matrix([1.0, 0.0], [0.0, bad]))
    assert not model_input.all_finite(matrix([np.inf, 0.0], [-np.inf, 1.0]))  # inf - inf: NaN, still caught
    # finite values whose sum overflows: False (the caller checks each value), and no row is bad
    huge = matrix([1e308, 0.0], [1e308, 1.0])
    assert not model_input.all_finite(huge)
    bad, first = model_input.nan_features(huge)
    assert bad.tolist() == [False, False] and first.tolist() == []
