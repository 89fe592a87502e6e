"""Training: the recipe learned in order, pre-split steps, the label's columns, and config checks."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from lakescore.config import load_project
from lakescore.errors import ConfigError, StepError
from lakescore.training import ChainRecipe, _target_columns, fit_chain

FEATURES = ["month", "hour", "dep_delay", "distance", "carrier", "origin"]


def _options(recipe):
    return ChainRecipe(steps=recipe, model_class="LogisticRegression", model_params={"max_iter": 1000},
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
    chain = fit_chain(rows, label, _options(recipe))
    kept = rows[rows["distance"] <= 1000]
    assert (chain.steps[0].rows_in, chain.steps[0].rows_out) == (len(rows), len(kept))
    # the scaler learned on the kept rows only
    assert chain.steps[1].state["mean"][0] == pytest.approx(kept["distance"].mean(), rel=1e-12)
    assert chain.steps[1].rows_in == len(kept)


def test_a_target_encoder_feeds_the_model_out_of_fold_encodings():
    frame = pd.DataFrame({"c": ["a", "a", "b", "a", "b", "b"]})
    y = pd.Series([1.0, 3.0, 5.0, 2.0, 6.0, 4.0])
    recipe = [{"step": "TargetEncoder", "name": "t", "columns": ["c"], "smooth": 1.0, "cv": 2,
               "target_type": "continuous", "shuffle": False}]
    chain = fit_chain(frame, y, ChainRecipe(steps=recipe, model_class="LinearRegression", model_params={},
                                            feature_columns=["c"]))
    # out-of-fold encodings worked by hand in tests/steps/test_encoders.py; the full-data ones are
    # 2.375 (a) and 4.625 (b): a line through those would give coefficient 1.0
    slope, intercept = np.polyfit([3.0, 3.0, 14 / 3, 7 / 3, 4.0, 4.0], y, 1)
    assert chain.model.coef_[0] == pytest.approx(slope, rel=1e-9)
    assert chain.model.intercept_ == pytest.approx(intercept, rel=1e-9)
    assert chain.steps[0].apply(frame)["c"].tolist() == [2.375, 2.375, 4.625, 2.375, 4.625, 4.625]


def test_a_text_column_left_after_the_recipe_is_an_error(flights_sample):
    rows, label = _labelled(flights_sample)
    with pytest.raises(StepError, match=r"column\(s\) \['carrier', 'origin'\] are not numeric; add an encoder"):
        fit_chain(rows, label, _options([{"step": "SimpleImputer", "name": "i", "columns": ["dep_delay"]}]))


def test_the_ten_percent_rule_stops_training(flights_sample):
    rows, label = _labelled(flights_sample)
    recipe = [{"step": "PowerTransformer", "name": "box_cox", "columns": ["dep_delay"], "method": "box-cox"}]
    share = (rows["dep_delay"] <= 0).mean()  # most flights leave early or on time
    with pytest.raises(StepError, match=f"{share:.1%} of its {len(rows)} training rows"):
        fit_chain(rows, label, _options(recipe))


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


def _count_by_hand(p, positive, method):
    """The best threshold over the rows' distinct probabilities, counted with numpy (p >= t), compared
    as exact fractions, ties to the highest threshold: independent of roc_curve."""
    from fractions import Fraction

    import numpy as np

    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    scores = {}
    for t in np.unique(p):
        tp, fp = int((positive & (p >= t)).sum()), int((~positive & (p >= t)).sum())
        scores[float(t)] = (Fraction(2 * tp, tp + fp + n_pos) if method == "f1"
                            else Fraction(tp * n_neg - fp * n_pos, n_pos * n_neg))
    best = max(scores.values())
    return max(t for t, s in scores.items() if s == best)


@pytest.mark.parametrize("method", ["f1", "youden"])
def test_optimize_on_the_holdout_picks_what_a_count_by_hand_picks(small_chain, flights_sample, method):
    from lakescore.config import ThresholdSetting
    from lakescore.frames import derive_label
    from lakescore.training import with_threshold

    holdout = flights_sample.iloc[1000:]
    y = derive_label(holdout, column="is_late", expression="arr_delay > 15")
    chain = with_threshold(small_chain, ThresholdSetting(optimize=method), holdout, y)
    scored = small_chain.predict(holdout)
    keep = (scored["scoring_status"] == "predicted").to_numpy() & y.notna().to_numpy()
    p = scored["probability"].to_numpy(dtype="float64")[keep]
    positive = y.to_numpy(dtype="float64", na_value=0)[keep] == 1
    expected = _count_by_hand(p, positive, method)
    assert chain.threshold.value == expected
    assert chain.threshold.holdout_rows == int(keep.sum()) == 968
    assert chain.decision_rule == (f"threshold {expected!r} (optimize: {method} on 968 holdout rows; "
                                   f"positive when p >= {expected!r})")
    labels = chain.predict(holdout)["prediction"].to_numpy(dtype="float64", na_value=-1)[keep]
    assert (labels == (p >= expected)).all()


def _three_class_chain():
    import numpy as np
    import pandas as pd

    label = np.repeat(["A", "B", "C"], 20)
    return fit_chain(pd.DataFrame({"x": np.arange(60.0)}), pd.Series(label),
                     ChainRecipe(steps=[], model_class="DecisionTreeClassifier", model_params={"max_depth": 2},
                                 feature_columns=["x"]))


def test_a_threshold_that_does_not_fit_the_model_names_the_key_the_value_and_the_classes(small_chain, flights_sample):
    import pandas as pd

    from lakescore.config import ThresholdSetting
    from lakescore.training import with_threshold

    three = _three_class_chain()
    rows, y = pd.DataFrame({"x": [1.0]}), pd.Series(["A"])
    with pytest.raises(ConfigError) as err:
        with_threshold(three, ThresholdSetting(classes={"A": 0.5, "B": 0.3, "Z": 0.2}), rows, y)
    assert err.value.problems == [
        "config/training.yml: model.threshold classes names 'Z', which is not a class of the model ['A', 'B', 'C']; "
        "got {classes: {A: 0.5, B: 0.3, Z: 0.2}} (use the labels the model learned)",
        "config/training.yml: model.threshold classes leaves out class(es) ['C'] of ['A', 'B', 'C']; got "
        "{classes: {A: 0.5, B: 0.3, Z: 0.2}} (give every class a threshold)"]
    with pytest.raises(ConfigError, match=r"model.threshold must be \{classes: \{...\}\} for a model of 3 classes "
                                          r"\['A', 'B', 'C'\]; got \{optimize: f1\}"):
        with_threshold(three, ThresholdSetting(optimize="f1"), rows, y)
    with pytest.raises(ConfigError, match=r"classes is for a model of 3 or more classes; this one has \[0, 1\]; got "
                                          r"\{classes: \{0: 0.6, 1: 0.4\}\} \(write threshold: <p> for class 1\)"):
        with_threshold(small_chain, ThresholdSetting(classes={0: 0.6, 1: 0.4}), flights_sample, flights_sample["month"])
    mapped = with_threshold(three, ThresholdSetting(classes={"C": 0.2, "A": 0.5, "B": 0.3}), rows, y)
    assert mapped.threshold.classes == (("A", 0.5), ("B", 0.3), ("C", 0.2))  # in the model's class order


def test_optimize_on_a_holdout_of_one_class_says_how_to_fix_it(small_chain, flights_sample):
    import pandas as pd

    from lakescore.config import ThresholdSetting
    from lakescore.training import with_threshold

    holdout = flights_sample.iloc[1000:1100]
    with pytest.raises(ConfigError, match=r"model.threshold \{optimize: youden\} cannot be chosen on the \d+ predicted "
                                          r"holdout rows: the rows hold 0 positive and \d+ negative label\(s\); both are "
                                          r"needed \(raise split.holdout_fraction, or write a fixed threshold\)"):
        with_threshold(small_chain, ThresholdSetting(optimize="youden"), holdout,
                       pd.Series(0, index=holdout.index, dtype="int64"))


def test_a_threshold_on_a_regressor_is_found_before_any_work_with_the_other_problems(project_dir, flights_sample):
    from lakescore.training import training_problems

    path = project_dir / "training.yml"
    body = yaml.safe_load(path.read_text())
    body["model"] = {"class": "Ridge", "params": {}, "threshold": {"optimize": "f1"}}
    body["data"]["feature_columns"] = [*body["data"]["feature_columns"], "no_such_column"]
    path.write_text(yaml.safe_dump(body))
    problems = training_problems(load_project(project_dir), flights_sample.head(0))
    assert "config/training.yml: model.threshold applies to classifiers only; Ridge is a regressor; got " \
           "{optimize: f1} (delete model.threshold)" in problems
    assert any("no_such_column" in p for p in problems)


def test_text_vectorizer_document_frequencies_outside_sklearns_range_are_listed_before_any_work(project_dir,
                                                                                              flights_sample):
    from lakescore.training import training_problems

    path = project_dir / "training.yml"
    body = yaml.safe_load(path.read_text())
    body["preprocessing"] += [{"step": "count_vectorizer", "name": "carrier_words", "columns": ["carrier"], "min_df": 0},
                              {"step": "tfidf_vectorizer", "name": "dest_words", "columns": ["dest"], "max_df": 5.0}]
    path.write_text(yaml.safe_dump(body))
    problems = training_problems(load_project(project_dir), flights_sample.head(0))
    rule = ("must be a whole number of documents >= 1 (e.g. 2) or a fraction of the documents in [0.0, 1.0] "
            "(e.g. 0.95), as scikit-learn's CountVectorizer allows")
    assert f"config/training.yml: preprocessing[6]: step 'carrier_words' (count_vectorizer): min_df: Value error, " \
           f"{rule} (got 0)" in problems
    assert f"config/training.yml: preprocessing[7]: step 'dest_words' (tfidf_vectorizer): max_df: Value error, " \
           f"{rule} (got 5.0)" in problems


def test_the_recipe_of_a_project_is_what_its_training_and_scoring_files_say(project_dir):
    project = load_project(project_dir)
    recipe = ChainRecipe.from_project(project)
    assert (recipe.model_class, recipe.model_params, recipe.model_input) == ("LogisticRegression", {"max_iter": 500},
                                                                             "auto")
    assert [s["name"] for s in recipe.steps] == ["distance_outlier", "impute_numeric", "impute_weather",
                                                 "impute_plane", "scale_numeric", "one_hot"]
    assert recipe.feature_columns[:3] == ("hour", "dep_delay", "distance") and len(recipe.feature_columns) == 13
    assert [r.name for r in recipe.rules] == ["cancelled"] and [r.name for r in recipe.output_rules] == ["risk_band"]
    assert (recipe.engine, recipe.eligibility_mode, recipe.random_state) == ("pandas", "combined", 42)


def test_a_components_recipe_takes_the_datas_features_and_no_output_rules(set_config):
    project = load_project(set_config)
    delay = ChainRecipe.from_project(project, component="delay_model")
    minutes = ChainRecipe.from_project(project, component="minutes_model")
    assert delay.feature_columns == ("dep_delay", "distance", "hour", "carrier", "origin")  # data's, not given
    assert minutes.feature_columns == ("dep_delay", "distance")  # its own
    assert (delay.model_class, minutes.model_class) == ("LogisticRegression", "LinearRegression")
    assert [r.name for r in delay.rules] == ["cancelled"] and delay.output_rules == ()  # set rules are combined_rules
    with pytest.raises(ConfigError, match="declares model_set; fit it with lakescore.training_set.fit_project_set"):
        ChainRecipe.from_project(project)


def test_a_recipe_does_not_change_when_the_lists_it_was_built_from_do(flights_sample):
    steps = [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay"]}]
    params = {"max_iter": 300}
    recipe = ChainRecipe(steps=steps, model_class="LogisticRegression", model_params=params,
                         feature_columns=["dep_delay"])
    steps.append({"step": "StandardScaler", "name": "scale", "columns": ["dep_delay"]})
    params["max_iter"] = 1
    rows, label = _labelled(flights_sample)
    chain = fit_chain(rows, label, recipe)
    assert [s.name for s in chain.steps] == ["impute"] and chain.model.max_iter == 300
