"""PastingEnsemble: the mean of the slice chains, a single chain's columns, saved as a set folder."""

import numpy as np
import pandas as pd
import pytest

from lakescore.errors import SplitTrainingError
from lakescore.frames import derive_label
from lakescore.pasting import PastingEnsemble, paste
from lakescore.saved_models import load_saved
from lakescore.thresholds import Threshold
from lakescore.training import ChainRecipe, fit_chain
from lakescore.transport_codes import code_tables

FEATURES = ["dep_delay", "distance", "hour", "carrier", "origin"]


def _members(flights, demo_recipe, *, model_class="LogisticRegression", label="arr_delay > 15", params=None):
    y = derive_label(flights, column="is_late", expression=label) if label else flights["arr_delay"]
    halves = [flights.iloc[:1000], flights.iloc[1000:1600]]
    recipe = ChainRecipe(steps=demo_recipe, model_class=model_class, model_params=params or {},
                         feature_columns=FEATURES)
    return [(f"slice_{i:02d}", fit_chain(h, y.loc[h.index], recipe)) for i, h in enumerate(halves)]


def _values(series):
    return series.to_numpy(dtype="float64", na_value=np.nan)


def test_probability_is_the_members_mean_and_the_label_comes_from_the_mean(flights_sample, demo_recipe):
    members = _members(flights_sample.dropna(subset=["arr_delay"]), demo_recipe, params={"max_iter": 300})
    ensemble = paste(members, threshold=Threshold(value=0.3), coverage={"rows": 1600, "slices": 2})
    rows = flights_sample.iloc[1700:1900].copy()
    rows.iloc[:5, rows.columns.get_loc("distance")] = 99_999.0  # outliers for every slice's IQR step
    got = ensemble.predict(rows)
    outs = [chain.predict(rows) for _, chain in members]
    excluded = (outs[0]["scoring_status"] == "excluded").to_numpy() | (outs[1]["scoring_status"] == "excluded").to_numpy()
    assert excluded.any() and list(got.columns) == ["prediction", "probability", "scoring_status", "exclusion_reason"]
    assert got["scoring_status"].eq("excluded").to_numpy().tolist() == excluded.tolist()
    mean = (_values(outs[0]["probability"]) + _values(outs[1]["probability"])) / 2
    assert _values(got["probability"])[~excluded] == pytest.approx(mean[~excluded], abs=1e-15)
    assert got["prediction"][~excluded].astype(bool).tolist() == (mean[~excluded] >= 0.3).tolist()
    first = np.where(outs[0]["scoring_status"] == "excluded", outs[0]["exclusion_reason"], outs[1]["exclusion_reason"])
    assert got["exclusion_reason"][excluded].tolist() == list(first[excluded])
    assert got.dtypes.astype(str).to_dict() == ensemble.output_dtypes == members[0][1].output_dtypes


def test_without_a_threshold_a_row_is_positive_above_one_half(flights_sample, demo_recipe):
    members = _members(flights_sample.dropna(subset=["arr_delay"]), demo_recipe, params={"max_iter": 300})
    got = paste(members, threshold=None, coverage={}).predict(flights_sample.iloc[1700:1800])
    kept = got["scoring_status"] == "predicted"
    assert got["prediction"][kept].astype(bool).tolist() == (_values(got["probability"][kept]) > 0.5).tolist()


def test_a_regressor_pastes_the_mean_prediction(flights_sample, demo_recipe):
    rows = flights_sample.dropna(subset=["arr_delay"])
    members = _members(rows, demo_recipe, model_class="LinearRegression", label=None)
    got = paste(members, threshold=None, coverage={}).predict(rows.iloc[1600:1700])
    each = [_values(chain.predict(rows.iloc[1600:1700])["prediction"]) for _, chain in members]
    kept = got["scoring_status"].eq("predicted").to_numpy()
    assert _values(got["prediction"])[kept] == pytest.approx(((each[0] + each[1]) / 2)[kept], abs=1e-9)
    assert "probability" not in got.columns


def test_it_saves_as_a_set_folder_and_loads_back_as_a_pasting_ensemble(flights_sample, demo_recipe, tmp_path):
    members = _members(flights_sample.dropna(subset=["arr_delay"]), demo_recipe, params={"max_iter": 300})
    ensemble = paste(members, threshold=Threshold(value=0.3), coverage={"rows": 1600, "slices": 2, "note": "n"})
    folder = ensemble.save(tmp_path / "chain")
    assert (folder / "set.json").exists() and (folder / "components" / "slice_01" / "chain.json").exists()
    loaded = load_saved(folder)
    assert isinstance(loaded, PastingEnsemble) and loaded.coverage["note"] == "n"
    assert loaded.decision_rule == ensemble.decision_rule == Threshold(value=0.3).describe()
    rows = flights_sample.iloc[1700:1800]
    pd.testing.assert_frame_equal(loaded.predict(rows), ensemble.predict(rows))
    tables = code_tables(loaded)
    assert set(tables) == {"scoring_status", "exclusion_reason"}  # integer classes: no prediction table
    assert "outlier:distance_outlier" in tables["exclusion_reason"]


def test_paste_refuses_one_member_and_members_of_other_classes(flights_sample, demo_recipe):
    members = _members(flights_sample.dropna(subset=["arr_delay"]), demo_recipe, params={"max_iter": 300})
    with pytest.raises(SplitTrainingError, match="pasting needs at least 2 slice chains; got 1"):
        paste(members[:1], threshold=None, coverage={})
    rows = flights_sample.dropna(subset=["arr_delay"]).iloc[:1600]
    three = pd.Series(np.select([rows["arr_delay"] > 60, rows["arr_delay"] > 15], [2, 1], 0), index=rows.index)
    recipe = ChainRecipe(steps=demo_recipe, model_class="LogisticRegression", model_params={"max_iter": 300},
                         feature_columns=FEATURES)
    multi = [(f"slice_{i:02d}", fit_chain(part, three.loc[part.index], recipe))
             for i, part in enumerate([rows[:800], rows[800:]])]
    with pytest.raises(SplitTrainingError, match="slice chain slice_01 learned other classes than slice_00"):
        paste([members[0], multi[1]], threshold=None, coverage={})
    with pytest.raises(SplitTrainingError, match="LogisticRegression has 3 classes"):
        paste(multi, threshold=None, coverage={})


def test_a_pasting_ensemble_and_a_model_set_read_what_every_member_shares_from_the_first_one(
        flights_sample, demo_recipe, small_set):
    from lakescore.members import FirstMemberDelegation
    from lakescore.model_set import ModelSet

    members = _members(flights_sample, demo_recipe, model_class="Ridge", label=None)
    ensemble = paste(members, threshold=None, coverage={})
    first = members[0][1]
    assert isinstance(ensemble, FirstMemberDelegation) and isinstance(small_set, FirstMemberDelegation)
    assert (ensemble.task, ensemble.classes, ensemble.model_class, ensemble.label_dtype) == (
        "regression", None, "Ridge", first.label_dtype)
    assert ensemble.output_dtypes == first.output_dtypes and ensemble.output_rules == first.output_rules
    delay = small_set.component("delay_model")
    assert (small_set.engine, small_set.rules, small_set.lookups, small_set.lookup_versions) == (
        "pandas", delay.rules, (), ())
    assert [r.name for r in small_set.rules] == ["cancelled"]  # the fixture's eligibility rule
    assert small_set.task == "model_set" and isinstance(small_set, ModelSet)
