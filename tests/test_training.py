"""Training: the recipe learned in order, pre-split steps, the label's columns, and config checks."""

from pathlib import Path

import pytest
import yaml

from lakescore.config import load_project
from lakescore.errors import ConfigError, StepError
from lakescore.training import _target_columns, fit_chain

FEATURES = ["month", "hour", "dep_delay", "distance", "carrier", "origin"]


def _options(recipe):
    return dict(recipe=recipe, model_class="LogisticRegression", model_params={"max_iter": 1000},
                feature_columns=FEATURES)


def _labelled(flights):
    rows = flights[flights["arr_delay"].notna()]
    return rows, (rows["arr_delay"] > 15).astype("int64")


def test_outlier_rows_are_left_out_of_later_steps_and_counted(flights_sample):
    rows, label = _labelled(flights_sample)
    recipe = [{"step": "ManualBounds", "name": "short", "columns": ["distance"], "upper": 1000},
              {"step": "StandardScaler", "name": "scale", "columns": ["distance", "hour", "month", "dep_delay"]},
              {"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay"]},
              {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier", "origin"]}]
    chain = fit_chain(rows, label, **_options(recipe))
    kept = rows[rows["distance"] <= 1000]
    assert (chain.steps[0].rows_in, chain.steps[0].rows_out) == (len(rows), len(kept))
    # the scaler learned on the kept rows only
    assert chain.steps[1].state["mean"][0] == pytest.approx(kept["distance"].mean(), rel=1e-12)
    assert chain.steps[1].rows_in == len(kept)


def test_a_text_column_left_after_the_recipe_is_an_error(flights_sample):
    rows, label = _labelled(flights_sample)
    with pytest.raises(StepError, match=r"column\(s\) \['carrier', 'origin'\] are not numeric; add an encoder"):
        fit_chain(rows, label, **_options([{"step": "SimpleImputer", "name": "i", "columns": ["dep_delay"]}]))


def test_the_ten_percent_rule_stops_training(flights_sample):
    rows, label = _labelled(flights_sample)
    recipe = [{"step": "PowerTransformer", "name": "box_cox", "columns": ["dep_delay"], "method": "box-cox"}]
    share = (rows["dep_delay"] <= 0).mean()  # most flights leave early or on time
    with pytest.raises(StepError, match=f"{share:.1%} of its {len(rows)} training rows"):
        fit_chain(rows, label, **_options(recipe))


def test_target_columns_include_what_the_label_expression_reads():
    class Data:
        label_column, label_expression = "is_late", "arr_delay > 15 and dep_delay >= 0"

    assert _target_columns(Data) == ["is_late", "arr_delay", "dep_delay"]


def _scoring(project_dir: Path, **changes):
    path = project_dir / "scoring.yml"
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data))


def test_pre_split_mode_with_eligibility_rules_is_a_config_error(project_dir):
    _scoring(project_dir, mode="pre_split")
    with pytest.raises(ConfigError, match="scoring.yml: mode with mode 'pre_split' eligibility comes from the "
                                          "pre-split recipe only.*use mode 'combined'"):
        load_project(project_dir)


def test_output_rule_columns_must_be_new_names(project_dir):
    _scoring(project_dir, output=[{"name": "band", "function": "has_departed",
                                   "outputs": {"probability": "double"}}])
    with pytest.raises(ConfigError, match="output column 'probability' of rule 'band' must be a new name"):
        load_project(project_dir)
