"""Text steps: tokenizer, count_vectorizer, tfidf_vectorizer, hashing_vectorizer."""

import math

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import assert_same, cases, check_contract

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.steps import learn_step

SPARSE = pd.SparseDtype("float64", 0)
TRAIN = pd.DataFrame({"text": ["red fox", "red dog", "blue fox"], "n": [1, 2, 3]})


def learned(step, **params):
    return learn_step({"step": step, "name": "v", "columns": ["text"], **params}, TRAIN, None)


def kernel_frame(fitted, frame):
    batch = Columns.from_frame(frame, frame.columns)
    fitted.kernel().apply(batch)
    return batch.frame(list(batch.arrays))


@pytest.mark.parametrize("raw", cases("tokenizer", "count_vectorizer", "tfidf_vectorizer", "hashing_vectorizer"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_tokenizer_one_text_by_hand():
    fitted = learn_step({"step": "tokenizer", "name": "t", "columns": ["text"], "ngram_range": [1, 2]},
                        TRAIN, None)
    frame = pd.DataFrame({"text": ["The Quick-brown fox, a fox!", None]})
    out = fitted.apply(frame)
    # lowercase; tokens of 2+ word characters ("a" goes); unigrams, then bigrams joined by "_"
    assert out["text"].tolist() == ["the quick brown fox fox the_quick quick_brown brown_fox fox_fox", pd.NA]
    assert out["text"].dtype == "string"
    assert_same(kernel_frame(fitted, frame), out, "tokenizer kernel")


def test_count_vectorizer_one_document_by_hand():
    fitted = learned("count_vectorizer")
    out = fitted.apply(pd.DataFrame({"text": ["Red red fox cat"], "n": [9]}, index=[7]))
    # vocabulary sorted: blue, dog, fox, red; "cat" was never seen: ignored
    assert list(out.columns) == ["n", "v__blue", "v__dog", "v__fox", "v__red"]
    assert out.iloc[0, 1:].tolist() == [0.0, 0.0, 1.0, 2.0]
    assert set(out.dtypes.iloc[1:]) == {SPARSE}


def test_tfidf_weights_by_hand_with_l2_norm():
    fitted = learned("tfidf_vectorizer")
    # 3 training documents; df(red) = 2, df(blue) = 1 -> smooth idf = ln((1 + 3) / (1 + df)) + 1
    idf_red, idf_blue = math.log(4 / 3) + 1, math.log(4 / 2) + 1
    norm = math.sqrt(idf_red ** 2 + idf_blue ** 2)
    assert fitted.state["idf"].tolist() == pytest.approx([idf_blue, idf_blue, idf_red, idf_red], abs=1e-15)
    out = fitted.apply(pd.DataFrame({"text": ["blue red zebra"]}))
    assert out.iloc[0].tolist() == pytest.approx([idf_blue / norm, 0.0, 0.0, idf_red / norm], abs=1e-15)
    assert out.iloc[0].tolist() == pytest.approx([0.795961, 0.0, 0.0, 0.605349], abs=1e-6)  # worked on paper


def test_tfidf_equals_sklearn_fit_transform_and_the_kernel(flights_sample):
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = flights_sample[["carrier", "origin", "dest", "tailnum"]].astype("string").fillna("").agg(" ".join, axis=1)
    frame = pd.DataFrame({"text": docs})
    fitted = learn_step({"step": "tfidf_vectorizer", "name": "v", "columns": ["text"], "ngram_range": [1, 2],
                         "sublinear_tf": True, "min_df": 3}, frame, None)
    want = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=3).fit_transform(docs).toarray()
    np.testing.assert_allclose(fitted.apply(frame).to_numpy(dtype="float64"), want, rtol=1e-12, atol=1e-15)
    assert_same(kernel_frame(fitted, frame), fitted.apply(frame), "tfidf kernel")


def test_hashing_one_document_by_hand():
    from sklearn.utils import murmurhash3_32

    fitted = learned("hashing_vectorizer", n_features=8, norm=None)
    out = fitted.apply(pd.DataFrame({"text": ["red fox red"]}))
    want = np.zeros(8)
    for token, count in (("red", 2), ("fox", 1)):
        h = murmurhash3_32(token, seed=0)  # signed 32-bit MurmurHash3 of the token's UTF-8 bytes
        want[abs(h) % 8] += count if h >= 0 else -count
    assert list(out.columns) == [f"v__{i}" for i in range(8)]
    assert out.iloc[0].tolist() == want.tolist()
    l2 = learned("hashing_vectorizer", n_features=8).apply(pd.DataFrame({"text": ["red fox red"]}))
    np.testing.assert_allclose(l2.iloc[0].to_numpy(dtype="float64"), want / np.linalg.norm(want), rtol=1e-15)


@pytest.mark.parametrize("step", ["count_vectorizer", "tfidf_vectorizer", "hashing_vectorizer"])
def test_one_row_empty_all_null_and_unseen_batches_keep_columns_and_dtypes(step):
    fitted = learned(step, **({"n_features": 4} if step == "hashing_vectorizer" else {}))
    whole = fitted.apply(TRAIN)
    batches = {"one row": TRAIN.iloc[[1]], "empty": TRAIN.iloc[:0],
               "all null": pd.DataFrame({"text": [None, None], "n": [1, 2]}),
               "unseen": pd.DataFrame({"text": ["zebra okapi", "RED"], "n": [1, 2]})}
    for what, batch in batches.items():
        out = fitted.apply(batch)
        assert list(out.columns) == list(whole.columns), what
        assert list(out.dtypes) == list(whole.dtypes), what
        assert_same(kernel_frame(fitted, batch)[list(out.columns)], out, f"{step} kernel {what}")
    null = fitted.apply(batches["all null"]).drop(columns="n").to_numpy(dtype="float64")
    assert (null == 0).all()  # a missing text is an empty document
    if step != "hashing_vectorizer":
        unseen = fitted.apply(batches["unseen"]).drop(columns="n").to_numpy(dtype="float64")
        assert (unseen[0] == 0).all() and unseen[1, -1] > 0  # unseen tokens ignored; "RED" is "red"


def test_a_batch_vocabulary_is_refused_with_the_setting_and_a_fix():
    with pytest.raises(StepError, match=r"vocabulary: batch would learn the vocabulary from each scored batch.*"
                                        r"use vocabulary: learned"):
        learned("tfidf_vectorizer", vocabulary="batch")


def test_trimming_a_declared_vocabulary_is_refused():
    with pytest.raises(StepError, match=r"min_df, max_features cannot trim a declared vocabulary.*remove it"):
        learned("count_vectorizer", vocabulary=["red"], min_df=2, max_features=3)


def test_an_empty_or_too_wide_vocabulary_is_refused_with_a_fix(monkeypatch):
    with pytest.raises(StepError, match=r"could not learn a vocabulary from column 'text'.*Lower min_df"):
        learned("count_vectorizer", min_df=5)
    import lakescore.steps.text as text

    monkeypatch.setattr(text, "MAX_WIDTH", 3)
    with pytest.raises(StepError, match=r"learned 4 tokens, more than 3 columns; set max_features:"):
        learned("tfidf_vectorizer")


@pytest.mark.parametrize("params, key", [({"columns": ["text", "n"]}, "columns"),
                                         ({"ngram_range": [2, 1]}, "ngram_range"),
                                         ({"token_pattern": "(a)(b)"}, "token_pattern"),
                                         ({"max_features": 100_000}, "max_features")])
def test_bad_settings_name_the_key(params, key):
    with pytest.raises(StepError, match=rf"step 'v' \(tfidf_vectorizer\): {key}"):
        learn_step({"step": "tfidf_vectorizer", "name": "v", "columns": ["text"], **params}, TRAIN, None)


@pytest.mark.parametrize("step", ["count_vectorizer", "tfidf_vectorizer"])
@pytest.mark.parametrize("key, value", [("min_df", 0), ("max_df", 5.0), ("min_df", 1.5), ("max_df", True),
                                        ("max_df", -0.1)])
def test_document_frequencies_outside_sklearns_range_are_refused_when_the_recipe_is_read(step, key, value):
    from lakescore.steps import parse_params

    with pytest.raises(StepError, match=rf"step 'v' \({step}\): {key}: .*must be a whole number of documents >= 1 "
                                        rf"\(e\.g\. 2\) or a fraction of the documents in \[0\.0, 1\.0\].* "
                                        rf"\(got {value!r}\)"):
        parse_params({"step": step, "name": "v", "columns": ["text"], key: value})


@pytest.mark.parametrize("key, value", [("min_df", 1), ("min_df", 0.0), ("max_df", 1.0), ("max_df", 3)])
def test_document_frequencies_sklearn_allows_are_kept_as_written(key, value):
    from lakescore.steps import parse_params

    got = getattr(parse_params({"step": "count_vectorizer", "name": "v", "columns": ["text"], key: value}), key)
    assert (got, type(got)) == (value, type(value))  # 1 document and 1.0 (every document) differ in scikit-learn


def test_new_columns_that_exist_are_refused_with_a_fix():
    frame = TRAIN.assign(v__red=1.0)
    with pytest.raises(StepError, match=r"new column\(s\) \['v__red'\] already exist in the frame; set prefix:"):
        learn_step({"step": "count_vectorizer", "name": "v", "columns": ["text"]}, frame, None)
