"""FittedChain: exclusion reasons, training-only steps, pre-split eligibility, output rules, engines."""

import numpy as np
import pandas as pd
import pytest

from lakescore.chain import FittedChain
from lakescore.errors import InputError
from lakescore.frames import floats_close, to_pandas
from lakescore.rules import EligibilityRule, OutputRule
from lakescore.steps.recipe import learn_pre_split
from lakescore.training import ChainRecipe, fit_chain
from lakescore.usercode import FunctionRef

FEATURES = ["month", "hour", "dep_delay", "distance", "carrier", "origin"]
ENCODE = [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay"], "strategy": "median"},
          {"step": "StandardScaler", "name": "scale_all", "columns": ["month", "hour", "dep_delay", "distance"]},
          {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier", "origin"]}]


def risk_band(frame, params):
    """Output rule: 'high' when the probability of a late arrival is at least the threshold."""
    high = frame["probability"] >= params["threshold"]
    return pd.DataFrame({"risk_band": np.where(high, "high", "low"), "risk_points": (frame["probability"] * 100).round()},
                        index=frame.index)


def _rule():
    ref = FunctionRef.resolve_name("lakescore_project.scoring:has_departed", what="rule")
    return EligibilityRule("cancelled", 1, ref, ("dep_time",))


def _fit(flights, recipe, *, pre_split=None, **options):
    rows = flights[flights["arr_delay"].notna()]
    label = (rows["arr_delay"] > 15).astype("int64")
    return fit_chain(rows, label, ChainRecipe(steps=recipe, model_class="LogisticRegression",
                                              model_params={"max_iter": 500}, feature_columns=FEATURES, **options),
                     pre_split=pre_split)


def _request(flights, **edits):
    """Real rows with some values replaced: edits maps column -> list of values for the first rows."""
    rows = flights.head(10).copy()
    for column, values in edits.items():
        rows[column] = rows[column].astype(object if isinstance(values[0], str) else "float64")
        rows.iloc[:len(values), rows.columns.get_loc(column)] = values
    return rows


def test_first_excluding_step_names_the_reason(flights_sample):
    recipe = [{"step": "ManualBounds", "name": "not_negative", "columns": ["distance"], "lower": 1},
              {"step": "ManualBounds", "name": "short_hop", "columns": ["distance"], "lower": 2},
              {"step": "PowerTransformer", "name": "box_cox", "columns": ["distance"], "method": "box-cox"},
              *ENCODE]
    chain = _fit(flights_sample, recipe)
    scored = chain.predict(_request(flights_sample, distance=[-5.0, 1.5, 1000.0]))
    # -5 is below both bounds and cannot be Box-Cox transformed: the first step names it
    assert scored["exclusion_reason"].tolist()[:3] == ["outlier:not_negative", "outlier:short_hop", pd.NA]
    assert scored["scoring_status"].tolist()[:3] == ["excluded", "excluded", "predicted"]
    assert scored["prediction"].isna().tolist()[:3] == [True, True, False]
    assert scored["probability"].isna().tolist()[:3] == [True, True, False]


def test_an_invalid_value_is_excluded_with_its_step(flights_sample):
    recipe = [{"step": "PowerTransformer", "name": "box_cox", "columns": ["distance"], "method": "box-cox"}, *ENCODE]
    scored = _fit(flights_sample, recipe).predict(_request(flights_sample, distance=[0.0]))
    assert scored["exclusion_reason"].iloc[0] == "invalid:box_cox"
    assert (scored["scoring_status"].iloc[1:] == "predicted").all()


def test_ineligible_wins_over_outlier(flights_sample):
    recipe = [{"step": "IQR", "name": "distance_outlier", "columns": ["distance"]}, *ENCODE]
    chain = _fit(flights_sample, recipe, rules=[_rule()])
    request = _request(flights_sample, distance=[99999.0, 99999.0], dep_time=[np.nan])
    scored = chain.predict(request)
    assert scored["exclusion_reason"].tolist()[:2] == ["ineligible:cancelled", "outlier:distance_outlier"]
    assert chain.excludes_rows


def test_training_only_steps_are_skipped_at_prediction(flights_sample):
    recipe = [{"step": "DropMissingRows", "name": "need_delay", "columns": ["dep_delay"]},
              {"step": "Deduplicate", "name": "dedupe", "columns": ["carrier", "origin", "month"]},
              {"step": "custom", "name": "positive_distance", "ref": "lakescore_project.preprocessing:positive_distance",
               "columns": ["distance"]}, *ENCODE]
    chain = _fit(flights_sample, recipe)
    assert chain.steps[1].rows_out < chain.steps[1].rows_in  # dedupe dropped training rows
    request = pd.concat([flights_sample.head(5)] * 2, ignore_index=True)  # 10 rows, 5 duplicated
    request.loc[0, "dep_delay"], request.loc[1, "distance"] = np.nan, 0
    scored = chain.predict(request)
    assert len(scored) == 10 and scored.index.equals(request.index)
    assert (scored["scoring_status"] == "predicted").all()


def test_a_row_scores_the_same_alone_and_in_a_batch(flights_sample):
    recipe = [{"step": "IQR", "name": "distance_outlier", "columns": ["distance"]}, *ENCODE,
              {"step": "StandardScaler", "name": "scale", "columns": ["dep_delay", "distance"]}]
    chain = _fit(flights_sample, recipe, rules=[_rule()])
    batch = flights_sample.head(300)
    whole = chain.predict(batch)
    for i in range(0, 300, 37):
        alone = chain.predict(batch.iloc[[i]])
        assert alone["exclusion_reason"].equals(whole["exclusion_reason"].iloc[[i]])
        assert floats_close(alone["probability"].astype("float64"), whole["probability"].iloc[[i]].astype("float64")).all()


def test_output_rules_add_typed_columns_on_predicted_rows(flights_sample, tmp_path):
    rule = OutputRule("risk", 1, FunctionRef.of(risk_band, what="rule"), (),
                      (("risk_band", "string"), ("risk_points", "long")), {"threshold": 0.5})
    recipe = [{"step": "IQR", "name": "distance_outlier", "columns": ["distance"]}, *ENCODE]
    chain = _fit(flights_sample, recipe, output_rules=[rule])
    assert chain.output_columns == ["prediction", "probability", "scoring_status", "exclusion_reason",
                                    "risk_band", "risk_points"]
    scored = chain.predict(_request(flights_sample, distance=[99999.0]))
    assert {c: str(t) for c, t in scored.dtypes.items()} == chain.output_dtypes
    assert scored["risk_band"].isna().iloc[0] and scored["risk_points"].isna().iloc[0]  # excluded row
    probability = scored["probability"].iloc[1:].astype("float64")
    assert scored["risk_band"].iloc[1:].tolist() == np.where(probability >= 0.5, "high", "low").tolist()
    assert scored["risk_points"].iloc[1:].tolist() == [int(round(p * 100)) for p in probability]
    empty = chain.predict(flights_sample.head(0))
    assert list(empty.columns) == chain.output_columns and len(empty) == 0

    again = FittedChain.load(chain.save(tmp_path / "chain"))
    assert again.output_rules == chain.output_rules
    pd.testing.assert_frame_equal(again.predict(flights_sample.head(50)), chain.predict(flights_sample.head(50)))


def _pre_split(flights):
    recipe = [{"step": "DropMissingRows", "name": "has_delay", "columns": ["dep_delay"]},
              {"step": "ManualBounds", "name": "plausible_delay", "columns": ["dep_delay"], "upper": 600},
              {"step": "DropMissingRows", "name": "has_label", "columns": ["arr_delay"]},
              {"step": "ValueReplacement", "name": "rename", "columns": ["origin"], "replace": [["EWR", "Newark"]]}]
    return learn_pre_split(flights, recipe=recipe, target_columns=["arr_delay"])


@pytest.mark.parametrize("mode,reasons", [
    ("combined", ["ineligible:has_delay", "ineligible:plausible_delay", pd.NA]),
    ("pre_split", ["ineligible:has_delay", "ineligible:plausible_delay", pd.NA]),
    ("rules", [pd.NA, pd.NA, pd.NA]),
])
def test_pre_split_filters_become_eligibility(flights_sample, mode, reasons, tmp_path):
    pre = _pre_split(flights_sample)
    assert pre.skipped == ("has_label",)
    kept = flights_sample.loc[pre.kept]
    chain = _fit(kept, ENCODE, pre_split=pre, eligibility_mode=mode)
    assert "arr_delay" not in chain.input_columns  # the target-reading step never runs at scoring
    assert "origin_Newark" in chain.feature_columns  # the fixed edit ran before the encoder
    request = _request(flights_sample, dep_delay=[np.nan, 900.0]).drop(columns=["arr_delay"])
    scored = chain.predict(request)
    assert scored["exclusion_reason"].tolist()[:3] == reasons
    again = FittedChain.load(chain.save(tmp_path / "chain"))
    assert (again.eligibility_mode, again.pre_split_skipped) == (mode, ("has_label",))
    pd.testing.assert_frame_equal(again.predict(request), scored)


def test_polars_training_frame_keeps_Int64_and_scores_like_pandas(flights_sample):
    pl = pytest.importorskip("polars", reason="polars is the optional engine")
    rows = flights_sample[flights_sample["arr_delay"].notna()].copy()
    rows["dep_time"] = rows["dep_time"].astype("Int64")
    rows.loc[rows.index[:3], "dep_time"] = pd.NA
    as_polars = pl.from_pandas(rows[[*FEATURES, "dep_time"]])
    back = to_pandas(as_polars)
    assert str(back["dep_time"].dtype) == "Int64" and back["dep_time"].isna().sum() == 3
    assert str(back["month"].dtype) == "Int64"  # a Polars integer column never comes back Float64

    recipe = [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay", "dep_time"], "strategy": "median"},
              {"step": "StandardScaler", "name": "scale", "columns": ["hour", "dep_delay", "distance", "dep_time"]},
              {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier", "origin", "month"]}]
    label = (rows["arr_delay"] > 15).astype("int64").to_numpy()
    options = ChainRecipe(steps=recipe, model_class="LogisticRegression", model_params={"max_iter": 500},
                          feature_columns=[*FEATURES, "dep_time"])
    from_polars = fit_chain(as_polars, label, options)
    from_pandas = fit_chain(back, label, options)
    assert from_polars.engine == "polars" and from_pandas.engine == "pandas"
    request = as_polars.head(20)
    pd.testing.assert_frame_equal(from_polars.predict(request), from_pandas.predict(to_pandas(request)))
    # a plain int64 pandas request gives the same answer as the Int64 one (month category "1" either way)
    plain = rows[[*FEATURES, "dep_time"]].head(20).reset_index(drop=True)
    assert from_polars.predict(plain)["probability"].equals(from_polars.predict(request)["probability"])



def returns_given(frame, params):
    """Output rule: returns ``params["given"]`` (a Series or a frame) as it is."""
    return params["given"]


def _rule_of(given, outputs):
    return OutputRule("given", 1, FunctionRef.of(returns_given, what="rule"), (), outputs, {"given": given})


@pytest.mark.parametrize(("returned", "kind", "expected"), [
    (pd.Series([0.5, 0.0, None], dtype="Float64") / pd.Series([1.0, 0.0, 1.0], dtype="Float64"),  # 0/0: a NaN value
     "double", pd.array([0.5, None, None], dtype="Float64")),
    (pd.Series([0.5, np.nan, 1.0]), "double", pd.array([0.5, None, 1.0], dtype="Float64")),
    (pd.Series(["a", None, "c"], dtype="string"), "string", pd.array(["a", None, "c"], dtype="string")),
    (pd.Series(["a", None, "c"], dtype=object), "string", pd.array(["a", None, "c"], dtype="string")),
    (pd.Series(["a", None, "c"], dtype="string[pyarrow]"), "string", pd.array(["a", None, "c"], dtype="string")),
    (pd.Series([1, None, 3], dtype="Int64"), "long", pd.array([1, None, 3], dtype="Int64")),
    (pd.Series([1.0, 2.0, 3.0]), "long", pd.array([1, 2, 3], dtype="Int64")),
    (pd.Series([True, None, False], dtype="boolean"), "boolean", pd.array([True, None, False], dtype="boolean")),
], ids=["Float64_with_NaN", "float64", "string", "object_text", "pyarrow_string", "Int64", "whole_floats", "boolean"])
def test_an_output_rule_s_column_comes_out_in_its_declared_dtype_with_nan_as_missing(returned, kind, expected):
    raw = pd.DataFrame({"x": [1.0, 2.0, 3.0]}, index=[7, 8, 9])
    scored = pd.DataFrame({"probability": pd.array([0.1, 0.2, 0.3], dtype="Float64")}, index=raw.index)
    for shape in (returned, returned.to_frame("out")):  # a Series for one output, or a frame
        got = _rule_of(shape, (("out", kind),)).compute(raw, scored)
        assert list(got.index) == [7, 8, 9]
        pd.testing.assert_extension_array_equal(got["out"].array, expected)


def test_an_output_rule_that_returns_the_wrong_rows_or_type_is_refused_naming_what_it_returned():
    raw = pd.DataFrame({"x": [1.0, 2.0]})
    scored = pd.DataFrame({"probability": pd.array([0.1, 0.2], dtype="Float64")})
    with pytest.raises(InputError, match="returned Series .* for 2 rows"):
        _rule_of(pd.Series(["a"], dtype="string"), (("out", "string"),)).compute(raw, scored)
    with pytest.raises(InputError, match="declared long but holds 'a'"):
        _rule_of(pd.Series(["a", "b"]), (("out", "long"),)).compute(raw, scored)

def test_output_rules_load_from_scoring_config():
    from lakescore.config import ScoringConfig
    from lakescore.rules import load_output_rules

    scoring = ScoringConfig.model_validate({"module": "test_chain", "output": [
        {"name": "risk", "function": "risk_band", "version": 2, "params": {"threshold": 0.5},
         "outputs": {"risk_band": "string", "risk_points": "long"}}]})
    (rule,) = load_output_rules(scoring)
    assert (rule.name, rule.version, rule.function.qualname) == ("risk", 2, "risk_band")
    assert rule.outputs == (("risk_band", "string"), ("risk_points", "long"))
    assert OutputRule.from_json(rule.to_json()) == rule


def test_an_eligibility_rule_must_return_booleans_not_text(flights_sample):
    from lakescore.errors import InputError
    from lakescore.rules import EligibilityRule
    from lakescore.usercode import FunctionRef

    rule = EligibilityRule("departed", 1, FunctionRef("lakescore_project.scoring", "has_departed", "", ""), ("dep_time",))
    assert rule.eligible(flights_sample).sum() == flights_sample["dep_time"].notna().sum()
    text = EligibilityRule("text", 1, FunctionRef.of(answers_no, what="rule"), ("dep_time",))
    with pytest.raises(InputError, match="eligibility rule 'text' returned Series of dtype object"):
        text.eligible(flights_sample)


def answers_no(frame, params):
    """A rule that answers in words: "no" would read as True if cast to bool."""
    return pd.Series("no", index=frame.index)


def test_a_null_the_model_cannot_take_excludes_only_its_row(flights_sample):
    chain = _fit(flights_sample, ENCODE)  # imputes dep_delay only: month, hour and distance reach the model as given
    assert not chain.model_takes_nan  # LogisticRegression: "Input X contains NaN" if a NaN reached it
    clean = flights_sample[flights_sample["dep_delay"].notna()].head(12).reset_index(drop=True)
    request = clean.assign(hour=clean["hour"].astype("Int64"))  # an integer feature trained as int64
    request.loc[0, "hour"] = pd.NA
    request.loc[1, ["hour", "distance"]] = [pd.NA, np.nan]  # the first NaN feature in feature order names it
    request.loc[2, "distance"] = np.nan
    request.loc[3, "dep_delay"] = np.nan  # imputed by the recipe: predicted
    scored = chain.predict(request)
    assert scored["exclusion_reason"].tolist()[:4] == ["invalid:hour", "invalid:hour", "invalid:distance", pd.NA]
    assert scored["scoring_status"].tolist() == ["excluded"] * 3 + ["predicted"] * 9
    assert scored.loc[:2, ["prediction", "probability"]].isna().all().all()
    # row-local: the other rows score as they do without the bad rows beside them, and each bad row alone
    without = chain.predict(request.iloc[3:])
    assert floats_close(scored["probability"].iloc[3:].astype("float64"), without["probability"].astype("float64")).all()
    assert scored["prediction"].iloc[3:].tolist() == without["prediction"].tolist()
    for i in range(3):
        assert chain.predict(request.iloc[[i]])["exclusion_reason"].tolist() == [scored["exclusion_reason"][i]]


def test_a_model_that_takes_nan_scores_the_row(flights_sample):
    rows = flights_sample[flights_sample["arr_delay"].notna()]
    chain = fit_chain(rows, (rows["arr_delay"] > 15).astype("int64"),
                      ChainRecipe(steps=ENCODE, model_class="HistGradientBoostingClassifier",
                                  model_params={"max_iter": 20}, feature_columns=FEATURES))
    assert chain.model_takes_nan
    request = rows.head(4).assign(hour=rows["hour"].head(4).astype("Int64"))
    request.loc[request.index[0], "hour"] = pd.NA
    scored = chain.predict(request)
    assert scored["scoring_status"].tolist() == ["predicted"] * 4
    assert 0.0 < float(scored["probability"].iloc[0]) < 1.0


def _tree_chain(positives_per_leaf):
    """A real DecisionTreeClassifier on one feature x in {0, 1, 2}: 100 rows per value, the given
    number of them positive, so the leaves' probabilities are exactly positives / 100."""
    x = np.repeat([0.0, 1.0, 2.0], 100)
    label = np.concatenate([(np.arange(100) < k).astype("int64") for k in positives_per_leaf])
    frame = pd.DataFrame({"x": x})
    return fit_chain(frame, pd.Series(label), ChainRecipe(steps=[], model_class="DecisionTreeClassifier",
                                                          model_params={}, feature_columns=["x"]))


def test_a_threshold_flips_labels_exactly_where_the_probabilities_cross_it(tmp_path):
    import dataclasses

    from lakescore.thresholds import Threshold

    chain = _tree_chain([34, 35, 36])
    rows = pd.DataFrame({"x": [0.0, 1.0, 2.0]})
    plain = chain.predict(rows)
    assert plain["probability"].tolist() == [0.34, 0.35, 0.36]
    assert plain["prediction"].tolist() == [0, 0, 0]  # the tree's own predict: the majority class
    at = dataclasses.replace(chain, threshold=Threshold(value=0.35))
    scored = at.predict(rows)
    assert scored["prediction"].tolist() == [0, 1, 1]  # p >= 0.35
    assert scored["probability"].tolist() == [0.34, 0.35, 0.36]  # unchanged
    assert str(scored["prediction"].dtype) == "Int64"
    above = dataclasses.replace(chain, threshold=Threshold(value=0.36)).predict(rows)
    assert above["prediction"].tolist() == [0, 0, 1]
    assert at.reference_predict(rows)["prediction"].tolist() == [0, 1, 1]  # the reference walk agrees
    back = FittedChain.load(at.save(tmp_path / "chain"))
    assert back.threshold == Threshold(value=0.35)
    assert back.predict(rows)["prediction"].tolist() == [0, 1, 1]


def test_a_multiclass_threshold_map_scores_through_the_chain(tmp_path):
    import dataclasses

    from lakescore.thresholds import Threshold

    x = np.repeat([0.0, 1.0, 2.0], 100)  # leaves: (A, B, C) = (.6, .3, .1), (.5, .3, .2), (.4, .2, .4)
    label = np.concatenate([np.repeat(list("ABC"), counts) for counts in ([60, 30, 10], [50, 30, 20], [40, 20, 40])])
    chain = fit_chain(pd.DataFrame({"x": x}), pd.Series(label),
                      ChainRecipe(steps=[], model_class="DecisionTreeClassifier", model_params={},
                                  feature_columns=["x"]))
    rows = pd.DataFrame({"x": [0.0, 1.0, 2.0]})
    assert chain.predict(rows)["prediction"].tolist() == ["A", "A", "A"]
    mapped = dataclasses.replace(chain, threshold=Threshold(classes=(("A", 0.5), ("B", 0.25), ("C", 0.25))))
    scored = FittedChain.load(mapped.save(tmp_path / "chain")).predict(rows)
    assert scored["prediction"].tolist() == ["A", "B", "C"]  # p/t: tie A/B -> A; B 1.2; C 1.6
    assert scored["probability"].tolist() == [0.6, 0.5, 0.4]  # the highest probability, unchanged


@pytest.mark.parametrize("model_class", ["LogisticRegression", "RandomForestClassifier", "SVC"])
def test_labels_are_the_models_own_predict_on_every_row(flights_sample, model_class):
    rows = flights_sample[flights_sample["arr_delay"].notna()]
    params = {"n_estimators": 5, "max_depth": 3} if model_class == "RandomForestClassifier" else \
        {"probability": True} if model_class == "SVC" else {"max_iter": 500}
    chain = fit_chain(rows, (rows["arr_delay"] > 15).astype("int64"),
                      ChainRecipe(steps=ENCODE, model_class=model_class, model_params=params, feature_columns=FEATURES))
    assert chain.labels_follow_proba is (model_class != "SVC")  # SVC: its predict_proba is Platt's, not predict's
    batch = pd.concat([flights_sample, flights_sample.head(50)], ignore_index=True)  # repeated rows: tied leaves
    kept, matrix, _ = chain.plan.run(batch)
    out = chain.predict(batch)
    assert str(out["prediction"].dtype) == "Int64"
    assert out["prediction"].iloc[kept].to_numpy(dtype="int64").tolist() == chain.model.predict(matrix).tolist()
    reference = chain.reference_predict(batch)
    assert out["prediction"].equals(reference["prediction"])


def test_an_infinite_feature_reaches_the_model_with_its_own_check(flights_sample):
    chain = _fit(flights_sample, ENCODE)
    fine = chain.predict(_request(flights_sample))  # finite rows: scikit-learn's check skipped, same answers
    assert fine["prediction"].equals(chain.reference_predict(_request(flights_sample))["prediction"])
    with pytest.raises(ValueError, match="infinity"):
        chain.predict(_request(flights_sample, dep_delay=[float("inf")]))
