"""Training: the recipe learned in order, pre-split steps, the label's columns, and preflight."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from lakescore.config import load_project
from lakescore.errors import ConfigError, StepError
from lakescore.training import _target_columns, fit_chain, preflight_training, train_project

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


def _project(project_dir: Path, **training):
    path = project_dir / "training.yml"
    data = yaml.safe_load(path.read_text())
    data.update(training)
    path.write_text(yaml.safe_dump(data))
    return load_project(project_dir)


def test_preflight_checks_pre_split_entries_against_the_table(project_dir, runtime, flights_sample):
    runtime.write_table("main.flights.flights", flights_sample)
    project = _project(project_dir, pre_split=[
        {"step": "DropMissingRows", "name": "has_delay", "columns": ["dep_delya"]},
        {"step": "ManualBounds", "name": "bounds", "columns": ["dep_delay"]}])
    with pytest.raises(ConfigError) as err:
        preflight_training(project, runtime)
    problems = err.value.problems
    assert any("pre_split[0] (has_delay) names unknown column 'dep_delya'" in p for p in problems)
    assert any("pre_split[1]" in p and "set lower, upper or both" in p for p in problems)


@pytest.mark.filterwarnings("ignore::UserWarning:mlflow")  # mlflow's own notices about the local store
def test_train_project_runs_the_pre_split_recipe_first(project_dir, runtime, flights_sample):
    runtime.write_table("main.flights.flights", flights_sample)
    project = _project(project_dir, pre_split=[
        {"step": "DropMissingRows", "name": "has_delay", "columns": ["dep_delay"]},
        {"step": "ManualBounds", "name": "plausible_delay", "columns": ["dep_delay"], "upper": 300}])
    result = train_project(project, runtime)
    rows = flights_sample.query(project.training.data.filter, engine="python")
    kept = rows[rows["dep_delay"].notna() & (rows["dep_delay"] <= 300)]
    assert result.rows["training"] + result.rows["holdout"] == len(kept)
    import mlflow

    from lakescore.chain import FittedChain

    model = mlflow.pyfunc.load_model(f"models:/{result.model_name}/{result.version}")
    chain: FittedChain = model.unwrap_python_model().chain
    assert [s.name for s in chain.pre_split] == ["has_delay", "plausible_delay"]
    request = flights_sample.head(3).assign(dep_delay=[np.nan, 400.0, 5.0], dep_time=[1.0, 1.0, np.nan])
    reasons = model.predict(request[list(chain.input_columns)])["exclusion_reason"].tolist()
    assert reasons == ["ineligible:has_delay", "ineligible:plausible_delay", "ineligible:cancelled"]


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


def test_an_unknown_recipe_column_and_feature_fail_before_any_work(project_dir, runtime, flights_sample):
    runtime.write_table("main.flights.flights", flights_sample)
    path = project_dir / "training.yml"
    data = yaml.safe_load(path.read_text())
    data["preprocessing"][1]["columns"].append("dep_dely")
    data["data"]["feature_columns"].append("wheels")
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        train_project(load_project(project_dir), runtime)
    text = str(err.value)
    assert "config/training.yml: data.feature_columns names unknown column 'wheels' of main.flights.flights" in text
    assert "config/training.yml: preprocessing[1] (impute_numeric) names unknown column 'dep_dely'" in text
    assert not (runtime.home / "mlflow.db").exists()  # nothing was logged or registered


def test_model_filter_label_and_rule_problems_are_all_found_before_any_work(project_dir, runtime, flights_sample):
    runtime.write_table("main.flights.flights", flights_sample)
    for name, edit in (("training.yml", lambda d: d.update(model={"class": "LogisticRegresion", "params": {}}) or
                        d["data"].update(filter="mnth <= 9", label_expression="arr_dely > 15")),
                       ("scoring.yml", lambda d: d["eligibility"][0].update(columns=["dep_tme"]))):
        path = project_dir / name
        data = yaml.safe_load(path.read_text())
        edit(data)
        path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        train_project(load_project(project_dir), runtime)
    text = str(err.value)
    assert "config/training.yml: model.class must be one of" in text and "got 'LogisticRegresion'" in text
    assert "config/training.yml: data.filter 'mnth <= 9' cannot be evaluated on main.flights.flights" in text
    assert "config/training.yml: data.label_expression 'arr_dely > 15' cannot be evaluated" in text
    assert "config/scoring.yml: rule 'cancelled' reads unknown column 'dep_tme' of main.flights.flights" in text
    assert len(err.value.problems) == 4 and not (runtime.home / "mlflow.db").exists()


def _carrier_lc_recipe(project_dir: Path, monkeypatch, one_hot_columns: list[str]):
    """The demo recipe with a column_step making carrier_lc before the one-hot encoder."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "admission"))  # broken_user_code.lower_carrier_step
    path = project_dir / "training.yml"
    data = yaml.safe_load(path.read_text())
    data["preprocessing"].insert(3, {"step": "custom", "name": "carrier_lc", "columns": ["carrier"],
                                     "ref": "broken_user_code:lower_carrier_step"})
    data["preprocessing"][4]["columns"] = one_hot_columns
    path.write_text(yaml.safe_dump(data))
    return load_project(project_dir)


def test_a_later_step_reads_a_custom_steps_output_in_preflight_and_smoke_probe(
        project_dir, runtime, flights_sample, monkeypatch, tmp_path):
    from lakescore.admission.preview import smoke_probe

    runtime.write_table("main.flights.flights", flights_sample)
    project = _carrier_lc_recipe(project_dir, monkeypatch, ["carrier", "carrier_lc", "origin", "dest"])
    preflight_training(project, runtime)  # no ConfigError
    sample = tmp_path / "sample.csv"
    flights_sample.head(300).to_csv(sample, index=False)
    lines, admitted = smoke_probe(project, sample)
    assert admitted and "  custom step carrier_lc" in lines


def test_a_column_no_step_makes_is_refused_by_preflight_and_smoke_probe_alike(
        project_dir, runtime, flights_sample, monkeypatch, tmp_path):
    from lakescore.admission.preview import smoke_probe

    runtime.write_table("main.flights.flights", flights_sample)
    project = _carrier_lc_recipe(project_dir, monkeypatch, ["carrier", "carrier_lx", "origin", "dest"])
    expected = ("config/training.yml: preprocessing[4] (one_hot) names unknown column 'carrier_lx': no earlier step "
                "outputs it and feature_columns are hour, dep_delay, distance, carrier, origin, dest; fix the name "
                "or add the step that makes it before this one")
    with pytest.raises(ConfigError) as preflight:
        preflight_training(project, runtime)
    sample = tmp_path / "sample.csv"
    flights_sample.head(300).to_csv(sample, index=False)
    with pytest.raises(ConfigError) as smoke:
        smoke_probe(project, sample)
    assert preflight.value.problems == smoke.value.problems == [expected]


@pytest.mark.filterwarnings("ignore::UserWarning:mlflow")  # mlflow's own notices about the local store
def test_an_unchanged_project_is_not_trained_again(project_dir, runtime, flights_sample):
    import mlflow

    runtime.write_table("main.flights.flights", flights_sample.iloc[:1500])
    project = load_project(project_dir)
    first = train_project(project, runtime)
    assert (first.version, first.reused, first.note) == (1, False, "trained: no version under alias champion yet")
    again = train_project(project, runtime)
    assert again.reused and again.version == 1 and again.run_id == first.run_id
    assert again.note.startswith("unchanged since v1 (source main.flights.flights version 0,")
    assert (again.metrics, again.rows, again.certificate) == (first.metrics, first.rows, first.certificate)
    client = mlflow.MlflowClient()
    assert [v.version for v in client.search_model_versions("name='main.flights.late_arrival'")] == [1]

    runtime.write_table("main.flights.flights", flights_sample.iloc[1500:], mode="append")
    changed = train_project(project, runtime)
    assert (changed.version, changed.reused) == (2, False)
    assert changed.note == "trained: changed since v1: source main.flights.flights version 0 -> 1"
    assert changed.rows["training"] + changed.rows["holdout"] > first.rows["training"] + first.rows["holdout"]
    forced = train_project(project, runtime, retrain="always")
    assert (forced.version, forced.note) == (3, "trained: retrain: always")
    assert client.get_model_version_by_alias("main.flights.late_arrival", "champion").version == 3
