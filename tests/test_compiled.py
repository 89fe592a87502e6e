"""The compiled plan equals the reference walk for whole chains: the demo recipe, a chain with user
steps, pre-split eligibility and a model that cannot take NaN, and a regression chain; on whole
frames, single rows, the empty frame and every null pattern (labels and strings exact, floats within
the tolerance rule)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lakescore.admission.agreement import AGREEMENT_CHECKS
from lakescore.admission.parts import Part
from lakescore.chain import FittedChain
from lakescore.steps.recipe import learn_pre_split
from lakescore.training import ChainRecipe, fit_chain

FEATURES = ["month", "hour", "dep_delay", "distance", "carrier", "origin"]
USER_STEPS = [
    {"step": "custom", "name": "dep_clock", "ref": "lakescore_project.preprocessing:dep_clock_step", "columns": ["hour", "minute"]},
    {"step": "custom", "name": "positive_distance", "ref": "lakescore_project.preprocessing:positive_distance",
     "columns": ["distance"]},
    {"step": "OrdinalEncoder", "name": "ordinal", "columns": ["carrier", "origin"]},
]


def agreement(chain: FittedChain, sample: pd.DataFrame) -> dict[str, str]:
    part = Part("compiled", "compiled", "Compiled plan", chain.predict, sample, reference=chain.reference_predict)
    return {r.check: r.reason for r in (check(part) for check in AGREEMENT_CHECKS) if r.status != "passed"}


def labelled(flights: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    rows = flights[flights["arr_delay"].notna()]
    return rows, (rows["arr_delay"] > 15).astype("int64")


def test_the_demo_chain(small_chain, flights_sample):
    assert agreement(small_chain, flights_sample.iloc[1000:1200]) == {}


def test_user_steps_pre_split_eligibility_and_nan_exclusion(flights_sample):
    pre = learn_pre_split(flights_sample, target_columns=["arr_delay"], recipe=[
        {"step": "DropMissingRows", "name": "has_delay", "columns": ["dep_delay"]},
        {"step": "ManualBounds", "name": "plausible_delay", "columns": ["dep_delay"], "upper": 600}])
    rows, label = labelled(flights_sample.loc[pre.kept])
    chain = fit_chain(rows, label, ChainRecipe(steps=USER_STEPS, model_class="LogisticRegression",
                                               model_params={"max_iter": 300},
                                               feature_columns=["dep_delay", "distance", "hour", "minute", "carrier", "origin"]),
                      pre_split=pre)
    assert not chain.model_takes_nan
    assert chain.plan.kernels["dep_clock"] == "reference"  # user steps run as written
    cancelled = flights_sample[flights_sample["dep_delay"].isna()].head(10)
    sample = pd.concat([flights_sample.iloc[:100], cancelled])
    sample["hour"] = sample["hour"].astype("float64")
    sample.iloc[[3, 4], sample.columns.get_loc("hour")] = np.nan  # no step imputes hour
    scored = chain.predict(sample)
    reasons = set(scored["exclusion_reason"].dropna())
    assert {"ineligible:has_delay", "invalid:hour"} <= reasons
    assert agreement(chain, sample) == {}


def test_a_regression_chain_and_a_polars_request(flights_sample):
    rows, _ = labelled(flights_sample)
    recipe = [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay"], "strategy": "median"},
              {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier", "origin", "month"]}]
    chain = fit_chain(rows, rows["arr_delay"], ChainRecipe(steps=recipe, model_class="HistGradientBoostingRegressor",
                                                           model_params={"max_iter": 20}, feature_columns=FEATURES))
    assert agreement(chain, flights_sample.iloc[:120]) == {}
    pl = pytest.importorskip("polars", reason="polars is the optional engine")
    request = pl.from_pandas(flights_sample[FEATURES].head(30))
    pd.testing.assert_frame_equal(chain.predict(request), chain.reference_predict(request))


def test_the_plan_survives_pickling_and_is_compiled_once(small_chain, flights_sample):
    import pickle

    plan = small_chain.plan
    assert small_chain.plan is plan
    again = pickle.loads(pickle.dumps(small_chain))
    assert "plan" not in again.__dict__  # compiled again on first use
    pd.testing.assert_frame_equal(again.predict(flights_sample.head(20)), small_chain.predict(flights_sample.head(20)))


def test_a_missing_feature_after_the_steps_is_the_same_error_both_ways(small_chain, flights_sample):
    broken = FittedChain(small_chain.input_columns, (*small_chain.feature_columns, "nowhere"), small_chain.steps,
                         small_chain.model, small_chain.task, small_chain.classes, small_chain.rules)
    for predict in (broken.predict, broken.reference_predict):
        with pytest.raises(Exception, match=r"model feature\(s\) \['nowhere'\] are missing"):
            predict(flights_sample.iloc[1000:1010])


def test_a_frame_larger_than_one_pass_is_scored_pass_by_pass_with_the_same_answer(small_chain, flights_sample):
    cancelled = flights_sample[flights_sample["dep_time"].isna()].head(10)
    sample = pd.concat([flights_sample.iloc[:30], cancelled, flights_sample.iloc[30:50]])
    scored = small_chain.predict(sample, pass_rows=7)
    assert scored["scoring_status"].eq("excluded").any()  # excluded rows fall in several passes
    pd.testing.assert_frame_equal(scored, small_chain.reference_predict(sample))


def test_one_sum_per_pass_answers_both_the_nan_rows_and_the_models_finiteness_check(small_chain, flights_sample,
                                                                                   monkeypatch):
    import lakescore.model_input as containers

    sums, real = [], containers.all_finite
    monkeypatch.setattr(containers, "all_finite", lambda matrix: sums.append(matrix.shape[0]) or real(matrix))
    scored = small_chain.predict(flights_sample.iloc[:50], pass_rows=20)
    assert len(sums) == 3  # one per pass of 20, 20 and 10 rows, not one for the NaN rows and one for the model
    pd.testing.assert_frame_equal(scored, small_chain.reference_predict(flights_sample.iloc[:50]))
