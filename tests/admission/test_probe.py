"""Every probe check catches its deliberately broken fixture, and names the part, check and fix."""

import numpy as np
import pandas as pd
import pytest
from sklearn.dummy import DummyClassifier

from lakescore.admission.compare import compare
from lakescore.admission.fresh import check_fresh_module
from lakescore.admission.parts import Part, chain_parts
from lakescore.admission.perturb import blanked, perturbed
from lakescore.admission.probe import (
    check_empty,
    check_index_shift,
    check_perturb,
    check_repeat,
    check_reverse,
    make_check_chunks,
)
from lakescore.chain import FittedChain
from lakescore.errors import ProbeError
from lakescore.steps.base import FittedStep


@pytest.fixture
def sample(flights_sample):
    rows = flights_sample.head(64).copy()
    rows["code"] = rows["flight"].astype(str)
    rows.loc[rows.index[::10], "code"] = "n/a"
    return rows


def step_part(kind, columns, sample):
    step = FittedStep(kind, kind.lower(), {"columns": columns})

    def run(frame):
        return step.apply(frame).assign(__flagged__=step.flags(frame))

    return Part("builtin", "step:0", f"Step '{step.name}' ({kind})", run, sample)


def test_a_step_that_fills_with_the_batch_mean_fails_chunks(broken, sample):
    result = make_check_chunks(1)(step_part("BrokenBatchMean", ["dep_delay"], sample))
    assert result.status == "failed"
    assert result.message == ("Step 'brokenbatchmean' (BrokenBatchMean) partition probe failed chunks:1: "
                              "output_mismatch. Use a stable dtype or another setting, so a row's answer does "
                              "not depend on its batch.")


def test_a_batch_statistic_moves_other_rows_when_one_row_changes(broken, sample):
    result = check_perturb(step_part("BrokenBatchMean", ["dep_delay"], sample))
    assert (result.status, result.reason) == ("failed", "other_rows_moved")
    assert "(e.g. handle_unknown: ignore)" in result.message


def test_a_running_total_fails_reverse(broken, sample):
    result = check_reverse(step_part("BrokenCumulative", ["dep_delay"], sample))
    assert (result.check, result.status, result.reason) == ("reverse", "failed", "output_mismatch")
    assert result.message.endswith("Read column values only, never the row order.")


def test_a_step_that_reads_the_index_fails_index_shift(broken, sample):
    result = check_index_shift(step_part("BrokenReadsIndex", ["dep_delay"], sample))
    assert (result.status, result.reason) == ("failed", "output_mismatch")
    assert "never the index" in result.message


def test_a_step_that_fails_on_empty_input_fails_empty(broken, sample):
    result = check_empty(step_part("BrokenFailsOnEmpty", ["carrier"], sample))
    assert result.status == "failed"
    assert result.reason.startswith("raised IndexError")
    assert "partition probe failed empty: raised IndexError" in result.message


def test_a_dtype_that_follows_the_data_fails_chunks(broken, sample):
    result = make_check_chunks(7)(step_part("BrokenDtypeFollowsData", ["code"], sample))
    assert (result.check, result.status, result.reason) == ("chunks:7", "failed", "dtype_mismatch")


def test_a_step_that_sorts_fails(broken, sample):
    part = step_part("BrokenSorts", ["dep_delay"], sample)
    assert make_check_chunks(2)(part).reason == "index_mismatch"
    assert check_reverse(part).status == "failed"


def test_a_model_with_randomness_at_predict_time_fails_repeat(sample):
    x = sample[["dep_delay", "distance"]].fillna(0).astype("float64")
    model = DummyClassifier(strategy="stratified").fit(x, np.arange(len(x)) % 2)
    part = Part("model", "model", "Model", lambda f: pd.DataFrame({"p": model.predict(f)}, index=f.index), x)
    result = check_repeat(part)
    assert result.message == ("Model partition probe failed repeat: output_mismatch. Fix random_state (or any "
                              "randomness) so a second call gives the same answer.")


def test_state_that_a_fresh_process_cannot_reproduce_fails_fresh_module(broken, small_chain, flights_sample, monkeypatch):
    step = FittedStep("BrokenModuleState", "module_state", {"columns": ["dep_delay"]})
    chain = FittedChain(small_chain.input_columns, small_chain.feature_columns, (step, *small_chain.steps),
                        small_chain.model, small_chain.task, small_chain.classes, small_chain.rules)
    monkeypatch.setattr(broken, "SCALE", 3.0)  # this process differs from a fresh import
    parts = chain_parts(chain, flights_sample.iloc[1000:1256])
    results = check_fresh_module(chain, parts)
    assert results["step:0"].message == (
        "Step 'module_state' (BrokenModuleState) partition probe failed fresh_module: output_mismatch; module "
        "variable broken_steps.SCALE is 3.0 in this process but 1.0 in a fresh import. Keep everything apply() "
        "reads in the saved state (learn()'s return value), never in module variables that training or scoring "
        "changes.")
    assert results["step:1"].status == "passed"  # the built-in steps reload exactly
    assert results["chain"].status == "failed"


def test_every_check_passes_on_the_demo_like_chain(small_chain, flights_sample):
    from lakescore.admission.probe import probe_parts

    parts = chain_parts(small_chain, flights_sample.iloc[1000:1256])
    assert [p.kind for p in parts] == ["rule", "builtin", "builtin", "builtin", "builtin", "model", "compiled",
                                       "chain"]
    results = probe_parts(parts)
    failed = [r.message for rs in results.values() for r in rs if r.status != "passed"]
    assert failed == []
    assert [r.check for r in results["model"]] == ["repeat", "chunks:1", "chunks:2", "chunks:7", "reverse",
                                                    "index_shift", "empty", "perturb"]
    assert [r.check for r in results["chain"]] == ["repeat", "chunks:1", "chunks:7"]
    assert [r.check for r in results["compiled"]] == ["agree:whole", "agree:rows", "agree:empty", "agree:nulls"]


def test_too_few_rows_reaching_the_model_fails_naming_where(small_chain, flights_sample):
    cancelled = flights_sample[flights_sample["dep_time"].isna()]
    with pytest.raises(ProbeError, match=r"only 0 probe rows reach Step 'distance_outlier' \(IQR\) \(need 16\)"):
        chain_parts(small_chain, cancelled)


def test_perturb_moves_numbers_by_half_flips_booleans_and_replaces_text():
    frame = pd.DataFrame({"i": pd.array([4, 4], dtype="int8"), "f": [2.0, 2.0], "b": [True, True], "s": ["a", "a"],
                          "z": [0.0, 0.0]})
    out = perturbed(frame, 1)
    assert out.iloc[1].tolist() == [6, 3.0, False, "__lakescore_unseen__", 1.0]
    assert out.iloc[0].tolist() == [4, 2.0, True, "a", 0.0]
    big = pd.DataFrame({"i": pd.array([120], dtype="int8")})
    assert perturbed(big, 0)["i"].iloc[0] == 60  # stays within int8


def test_compare_is_exact_on_labels_and_tolerant_on_floats():
    a = pd.DataFrame({"x": [1.0, np.nan], "y": ["a", "b"]})
    assert compare(a.assign(x=[1.0 + 1e-10, np.nan]), a) is None
    assert compare(a.assign(x=[1.0 + 1e-10, np.nan]), a, exact=True) == "output_mismatch"
    assert compare(a.assign(x=[1.0, 0.0]), a) == "output_mismatch"
    assert compare(a.assign(y=["a", "c"]), a) == "output_mismatch"
    assert compare(a.astype({"x": "float32"}), a) == "dtype_mismatch"
    assert compare(a.iloc[::-1], a) == "index_mismatch"


def test_compare_reads_the_text_steps_sparse_columns_like_their_dense_values():
    sparse = pd.SparseDtype("float64", 0)
    a = pd.DataFrame({"w": pd.arrays.SparseArray([0.0, 0.5, np.nan, 0.0], dtype=sparse), "n": [1, 2, 3, 4]})
    assert compare(a.copy(), a) is None
    close = a.assign(w=pd.arrays.SparseArray([0.0, 0.5 + 1e-13, np.nan, 0.0], dtype=sparse))
    assert compare(close, a) is None and compare(close, a, exact=True) == "output_mismatch"
    # a value where the other has none (its fill value), and a missing value where the other has 0
    assert compare(a.assign(w=pd.arrays.SparseArray([0.0, 0.5, np.nan, 0.25], dtype=sparse)), a) == "output_mismatch"
    assert compare(a.assign(w=pd.arrays.SparseArray([0.0, 0.5, 0.0, 0.0], dtype=sparse)), a) == "output_mismatch"
    assert compare(a.assign(w=a["w"].sparse.to_dense()), a) == "dtype_mismatch"  # dense is another dtype


@pytest.mark.parametrize("model_class", ["LGBMClassifier", "XGBClassifier"])
def test_the_selectable_boosted_models_pass_every_check(model_class, flights_sample):
    from lakescore.admission.evidence import admit
    from lakescore.frames import derive_label
    from lakescore.training import ChainRecipe, fit_chain

    recipe = [{"step": "SimpleImputer", "name": "imp", "columns": ["dep_delay", "distance", "hour"], "strategy": "median"},
              {"step": "OneHotEncoder", "name": "oh", "columns": ["carrier", "origin"], "max_categories": None,
               "include_missing": False, "column_names": "slug"}]
    rows = flights_sample[flights_sample["dep_time"].notna()]
    chain = fit_chain(rows, derive_label(rows, column="y", expression="arr_delay > 15"),
                      ChainRecipe(steps=recipe, model_class=model_class, model_params={"n_estimators": 10},
                                  feature_columns=["dep_delay", "distance", "hour", "carrier", "origin"]))
    evidence = admit(chain, rows.iloc[1000:])
    assert evidence["model"]["class"] == model_class and evidence["model"]["needs_probe"]
    assert {c["status"] for c in evidence["model"]["checks"]} == {"passed"}


def test_a_forward_fill_fails_perturb_when_a_row_is_blanked(broken, sample):
    rows = sample[sample["dep_delay"].notna()]  # like the holdout: no gap to fill
    part = step_part("BrokenForwardFill", ["dep_delay"], rows)
    assert [check(part).status for check in (make_check_chunks(1), make_check_chunks(7), check_reverse)] == \
        ["passed"] * 3
    result = check_perturb(part)
    assert result.message == (
        "Step 'brokenforwardfill' (BrokenForwardFill) partition probe failed perturb: blanked_row_reads_neighbours. "
        "Fill a missing value from a value learned in learn() and kept in state, never from other rows (ffill, "
        "bfill, interpolate, batch statistics).")


def test_a_count_of_the_batch_gaps_fails_perturb_when_a_row_is_blanked(broken, sample):
    rows = sample[sample["dep_delay"].notna()]
    result = check_perturb(step_part("BrokenCountsMissing", ["dep_delay"], rows))
    assert (result.status, result.reason) == ("failed", "blank_moved_other_rows")


def test_blanking_uses_each_columns_own_missing_value():
    frame = pd.DataFrame({"f": [1.0, 2.0], "i": [1, 2], "I": pd.array([1, 2], dtype="Int64"), "o": ["a", "b"],
                          "s": pd.array(["a", "b"], dtype="string"), "b": [True, False],
                          "d": pd.to_datetime(["2013-01-01", "2013-01-02"])})
    out = blanked(frame, 1)
    assert [str(t) for t in out.dtypes] == [str(t) for t in frame.dtypes]
    assert out.iloc[0].tolist() == frame.iloc[0].tolist()
    assert [v is pd.NA or v is None or v is pd.NaT or (isinstance(v, float) and np.isnan(v))
            for v in out.iloc[1]] == [True, False, True, True, True, False, True]
    assert (out["i"].iloc[1], out["b"].iloc[1]) == (2, False)  # int64 and bool have no missing value of their own


def test_a_step_that_refuses_missing_values_passes_the_blank_part_of_perturb(sample):
    x = sample[["dep_delay", "distance"]].fillna(0).astype("float64")
    model = DummyClassifier(strategy="prior").fit(x, np.arange(len(x)) % 2)

    def run(frame):
        if frame.isna().any().any():
            raise ValueError("Input X contains NaN.")
        return pd.DataFrame({"p": model.predict(frame)}, index=frame.index)

    assert check_perturb(Part("model", "model", "Model", run, x)).status == "passed"


def test_a_module_cache_filled_at_training_fails_fresh_module_naming_the_cache(broken, small_chain, flights_sample):
    step = FittedStep("BrokenModuleCache", "module_cache", {"columns": ["dep_delay"]})
    chain = FittedChain(small_chain.input_columns, small_chain.feature_columns, (step, *small_chain.steps),
                        small_chain.model, small_chain.task, small_chain.classes, small_chain.rules)
    broken.CACHE.clear()
    try:
        step.apply(flights_sample.head(3).assign(dep_delay=[1.0, 4.0, 5.0]))  # "training" fills the cache
        results = check_fresh_module(chain, chain_parts(chain, flights_sample.iloc[1000:1256]))
    finally:
        broken.CACHE.clear()
    assert results["step:0"].reason == ("output_mismatch; module variable broken_steps.CACHE is "
                                        "{'dep_delay': 2.0} in this process but {} in a fresh import")
