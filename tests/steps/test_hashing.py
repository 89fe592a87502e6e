"""HashEncoder: sklearn FeatureHasher's rule, row by row."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.steps import learn_step


@pytest.mark.parametrize("raw", cases("HashEncoder"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_one_row_by_hand():
    from sklearn.utils import murmurhash3_32

    fitted = learn_step({"step": "HashEncoder", "name": "h", "columns": ["carrier"], "n_components": 8},
                        pd.DataFrame({"carrier": ["UA"]}), None)
    h = murmurhash3_32("carrier=UA", seed=0)  # signed 32-bit MurmurHash3 of the feature name
    want = np.zeros(8)
    want[abs(h) % 8] = 1.0 if h >= 0 else -1.0
    out = fitted.apply(pd.DataFrame({"carrier": ["UA"], "other": [1]}))
    assert list(out.columns) == ["other"] + [f"h_{i}" for i in range(8)]
    assert out[[f"h_{i}" for i in range(8)]].to_numpy()[0].tolist() == want.tolist()


def test_matches_sklearn_feature_hasher_and_the_kernel(flights_sample):
    from sklearn.feature_extraction import FeatureHasher

    rows = flights_sample[["carrier", "dest", "tailnum"]].head(300)
    fitted = learn_step({"step": "HashEncoder", "name": "h", "columns": ["carrier", "dest", "tailnum"],
                         "n_components": 5, "prefix": "bucket"}, rows.head(3), None)
    tokens = [[f"{c}={v}" for c, v in row.items() if v is not None and v == v] for _, row in rows.iterrows()]
    want = FeatureHasher(n_features=5, input_type="string").transform(tokens).toarray()
    names = [f"bucket_{i}" for i in range(5)]
    np.testing.assert_array_equal(fitted.apply(rows)[names].to_numpy(), want)
    batch = Columns.from_frame(rows, rows.columns)
    fitted.kernel().apply(batch)
    np.testing.assert_array_equal(np.column_stack([batch.array(n) for n in names]), want)
    assert rows["tailnum"].isna().any()  # a missing value adds nothing


def test_unseen_missing_and_empty_rows_keep_the_columns_and_dtypes():
    fitted = learn_step({"step": "HashEncoder", "name": "h", "columns": ["dest"], "n_components": 3,
                         "alternate_sign": False}, pd.DataFrame({"dest": ["LAX"]}), None)
    out = fitted.apply(pd.DataFrame({"dest": [None, "never seen"]}, dtype=object))
    assert out.to_numpy().sum(axis=1).tolist() == [0.0, 1.0]
    empty = fitted.apply(pd.DataFrame({"dest": pd.Series([], dtype=object)}))
    assert list(empty.columns) == ["h_0", "h_1", "h_2"] and set(empty.dtypes) == {np.dtype("float64")}


def test_new_column_names_that_exist_are_refused_with_a_fix():
    with pytest.raises(StepError, match=r"new column\(s\) \['h_0'\] already exist in the frame; set prefix:"):
        learn_step({"step": "HashEncoder", "name": "h", "columns": ["dest"], "n_components": 2},
                   pd.DataFrame({"dest": ["LAX"], "h_0": [1.0]}), None)
