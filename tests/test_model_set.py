"""ModelSet: prefixed component columns, composed columns by hand, one status and reason per row,
combined rules, save/load."""

import numpy as np
import pandas as pd
import pytest

from lakescore.model_set import Composed, ModelSet, component_reason
from lakescore.saved_models import load_saved


def test_weighted_sum_and_mean_by_hand():
    values = pd.DataFrame({"a_probability": pd.array([0.2, 0.5, None], dtype="Float64"),
                           "b_prediction": pd.array([10.0, -4.0, 1.0], dtype="Float64")})
    terms = (("a", "probability", 2.0), ("b", "prediction", 1.0))
    total = Composed("t", "weighted_sum", terms).compute(values)
    mean = Composed("m", "weighted_mean", terms).compute(values)
    assert total[:2].tolist() == pytest.approx([2 * 0.2 + 10.0, 2 * 0.5 - 4.0])  # 10.4, -3.0
    assert mean[:2].tolist() == pytest.approx([10.4 / 3, -3.0 / 3])
    assert np.isnan(total[2]) and np.isnan(mean[2])  # a null term: no value


def test_the_set_outputs_prefixed_components_composed_and_combined_columns(small_set, flights_sample):
    assert small_set.output_columns == ["delay_model_prediction", "delay_model_probability",
                                        "minutes_model_prediction", "late_risk", "total", "scoring_status",
                                        "exclusion_reason", "late_flag"]
    assert small_set.output_dtypes["late_risk"] == "Float64" and small_set.output_dtypes["late_flag"] == "boolean"
    rows = flights_sample.iloc[:300]
    got = small_set.predict(rows)
    delay = small_set.component("delay_model").predict(rows)  # independent: each component on its own
    minutes = small_set.component("minutes_model").predict(rows)
    both = (delay["scoring_status"] == "predicted") & (minutes["scoring_status"] == "predicted")
    assert both.sum() > 200 and (~both).sum() > 0
    p = delay["probability"][both].to_numpy(dtype="float64")
    m = minutes["prediction"][both].to_numpy(dtype="float64")
    assert got["late_risk"][both].to_numpy(dtype="float64") == pytest.approx(0.7 * p + 0.3 * m, abs=1e-12)
    assert got["total"][both].to_numpy(dtype="float64") == pytest.approx(2 * p + 0.5 * m, abs=1e-12)
    assert got["delay_model_probability"][both].to_numpy(dtype="float64").tolist() == p.tolist()
    assert got["late_flag"][both].tolist() == ((p >= 0.5) | (m >= 30)).tolist()
    assert got["scoring_status"].eq(np.where(both, "predicted", "excluded")).all()
    assert got.loc[~both, ["delay_model_probability", "minutes_model_prediction", "late_risk", "late_flag"]] \
        .isna().all().all()  # an excluded row holds no component's answer


def test_an_excluded_row_names_the_first_excluding_component_and_its_step(small_set, flights_sample):
    base = flights_sample[flights_sample["dep_time"].notna()].iloc[:4].reset_index(drop=True)
    request = base.assign(distance=[50_000.0, 500.0, 50_000.0, 500.0], dep_delay=[0.0, 900.0, 900.0, 0.0],
                          dep_time=[1.0, 1.0, 1.0, np.nan])
    reasons = small_set.predict(request)["exclusion_reason"].tolist()
    assert reasons == ["outlier:delay_model/distance_outlier",  # only delay_model excludes it
                       "outlier:minutes_model/delay_outlier",  # only minutes_model
                       "outlier:delay_model/distance_outlier",  # both: the first declared component
                       "ineligible:cancelled"]  # an eligibility rule keeps its own reason
    assert component_reason("m", "invalid:hour") == "invalid:m/hour"


def test_save_and_load_round_trip(small_set, flights_sample, tmp_path):
    folder = small_set.save(tmp_path / "set")
    assert sorted(p.name for p in (folder / "components").iterdir()) == ["delay_model", "minutes_model"]
    loaded = load_saved(folder)
    assert isinstance(loaded, ModelSet) and loaded.names == ["delay_model", "minutes_model"]
    assert loaded.composed == small_set.composed and loaded.combined_rules == small_set.combined_rules
    rows = flights_sample.iloc[:200]
    pd.testing.assert_frame_equal(loaded.predict(rows), small_set.predict(rows))
    assert loaded.decision_rule.startswith("delay_model: ")
