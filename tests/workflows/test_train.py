"""The train workflow: preflight before any work, the pre-split recipe first, and an unchanged project
not trained again."""

from pathlib import Path

import numpy as np
import pytest
import yaml
from fixtures.configs import without_feature_lookups

from lakescore.config import load_project
from lakescore.errors import ConfigError
from lakescore.workflows.lookups import read_feature_tables
from lakescore.workflows.preview import smoke_probe
from lakescore.workflows.train import preflight, train


def _project(project_dir: Path, **training):
    path = project_dir / "training.yml"
    data = yaml.safe_load(path.read_text())
    data.update(training)
    path.write_text(yaml.safe_dump(data))
    return load_project(project_dir)


def test_preflight_checks_pre_split_entries_against_the_table(project_dir, runtime, flights_sample, lookup_tables):
    runtime.write_table("main.flights.flights", flights_sample)
    lookup_tables(runtime)  # config/training.yml's feature tables
    project = _project(project_dir, pre_split=[
        {"step": "DropMissingRows", "name": "has_delay", "columns": ["dep_delya"]},
        {"step": "ManualBounds", "name": "bounds", "columns": ["dep_delay"]}])
    with pytest.raises(ConfigError) as err:
        preflight(project, runtime)
    problems = err.value.problems
    assert any("pre_split[0] (has_delay) names unknown column 'dep_delya'" in p for p in problems)
    assert any("pre_split[1]" in p and "set lower, upper or both" in p for p in problems)


@pytest.mark.filterwarnings("ignore::UserWarning:mlflow")  # mlflow's own notices about the local store
def test_train_runs_the_pre_split_recipe_first(project_dir, runtime, flights_sample, lookup_tables):
    flights = flights_sample.iloc[:800]  # what is tested is the pre-split recipe: a short admission will do
    runtime.write_table("main.flights.flights", flights)
    lookup_tables(runtime)  # config/training.yml's feature tables
    project = _project(project_dir, pre_split=[
        {"step": "DropMissingRows", "name": "has_delay", "columns": ["dep_delay"]},
        {"step": "ManualBounds", "name": "plausible_delay", "columns": ["dep_delay"], "upper": 300}])
    result = train(project, runtime)
    rows = flights.query(project.training.data.filter, engine="python")
    kept = rows[rows["dep_delay"].notna() & (rows["dep_delay"] <= 300)]
    assert result.rows["training"] + result.rows["holdout"] == len(kept)
    import mlflow

    from lakescore.chain import FittedChain

    model = mlflow.pyfunc.load_model(f"models:/{result.model_name}/{result.version}")
    chain: FittedChain = model.unwrap_python_model().chain
    assert [s.name for s in chain.pre_split] == ["has_delay", "plausible_delay"]
    request = flights_sample.head(3).assign(dep_delay=[np.nan, 400.0, 5.0], dep_time=[1.0, 1.0, np.nan])
    request = read_feature_tables(runtime, chain.lookups).join(request, chain.lookups)  # the model reads joined rows
    reasons = model.predict(request[list(chain.input_columns)])["exclusion_reason"].tolist()
    assert reasons == ["ineligible:has_delay", "ineligible:plausible_delay", "ineligible:cancelled"]


def test_an_unknown_recipe_column_and_feature_fail_before_any_work(project_dir, runtime, flights_sample, lookup_tables):
    runtime.write_table("main.flights.flights", flights_sample)
    lookup_tables(runtime)  # config/training.yml's feature tables
    path = project_dir / "training.yml"
    data = yaml.safe_load(path.read_text())
    data["preprocessing"][1]["columns"].append("dep_dely")
    data["data"]["feature_columns"].append("wheels")
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        train(load_project(project_dir), runtime)
    text = str(err.value)
    assert "config/training.yml: data.feature_columns names unknown column 'wheels' of main.flights.flights" in text
    assert "config/training.yml: preprocessing[1] (impute_numeric) names unknown column 'dep_dely'" in text
    assert not (runtime.home / "mlflow.db").exists()  # nothing was logged or registered


def test_model_filter_label_and_rule_problems_are_all_found_before_any_work(project_dir, runtime, flights_sample, lookup_tables):
    runtime.write_table("main.flights.flights", flights_sample)
    lookup_tables(runtime)  # config/training.yml's feature tables
    for name, edit in (("training.yml", lambda d: d.update(model={"class": "LogisticRegresion", "params": {}}) or
                        d["data"].update(filter="mnth <= 9", label_expression="arr_dely > 15")),
                       ("scoring.yml", lambda d: d["eligibility"][0].update(columns=["dep_tme"]))):
        path = project_dir / name
        data = yaml.safe_load(path.read_text())
        edit(data)
        path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        train(load_project(project_dir), runtime)
    text = str(err.value)
    assert "config/training.yml: model.class must be one of" in text and "got 'LogisticRegresion'" in text
    assert "config/training.yml: data.filter 'mnth <= 9' cannot be evaluated on main.flights.flights" in text
    assert "config/training.yml: data.label_expression 'arr_dely > 15' cannot be evaluated" in text
    assert "config/scoring.yml: rule 'cancelled' reads unknown column 'dep_tme' of main.flights.flights" in text
    assert len(err.value.problems) == 4 and not (runtime.home / "mlflow.db").exists()


def _carrier_lc_recipe(project_dir: Path, monkeypatch, one_hot_columns: list[str]):
    """The demo recipe with a column_step making carrier_lc before the one-hot encoder."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "admission"))  # broken_user_code.lower_carrier_step
    path = project_dir / "training.yml"
    data = yaml.safe_load(path.read_text())
    at = [step["name"] for step in data["preprocessing"]].index("one_hot")
    data["preprocessing"].insert(at, {"step": "custom", "name": "carrier_lc", "columns": ["carrier"],
                                      "ref": "broken_user_code:lower_carrier_step"})
    data["preprocessing"][at + 1]["columns"] = one_hot_columns
    path.write_text(yaml.safe_dump(data))
    return load_project(project_dir)


def _joined(runtime, project, rows):
    """``rows`` with the project's feature lookups joined (a smoke sample carries the joined columns)."""
    specs = [lookup.spec() for lookup in project.training.feature_lookups]
    return read_feature_tables(runtime, specs).join(rows, specs)


def test_a_later_step_reads_a_custom_steps_output_in_preflight_and_smoke_probe(
        project_dir, runtime, flights_sample, monkeypatch, tmp_path, lookup_tables):
    runtime.write_table("main.flights.flights", flights_sample)
    lookup_tables(runtime)  # config/training.yml's feature tables
    project = _carrier_lc_recipe(project_dir, monkeypatch, ["carrier", "carrier_lc", "origin", "dest"])
    preflight(project, runtime)  # no ConfigError
    sample = tmp_path / "sample.csv"
    _joined(runtime, project, flights_sample.head(300)).to_csv(sample, index=False)
    lines, admitted = smoke_probe(project, sample)
    assert admitted and "  custom step carrier_lc" in lines


def test_a_column_no_step_makes_is_refused_by_preflight_and_smoke_probe_alike(
        project_dir, runtime, flights_sample, monkeypatch, tmp_path, lookup_tables):
    runtime.write_table("main.flights.flights", flights_sample)
    lookup_tables(runtime)  # config/training.yml's feature tables
    project = _carrier_lc_recipe(project_dir, monkeypatch, ["carrier", "carrier_lx", "origin", "dest"])
    expected = ("config/training.yml: preprocessing[6] (one_hot) names unknown column 'carrier_lx': no earlier step "
                "outputs it and feature_columns are hour, dep_delay, distance, carrier, origin, dest, temp, wind_speed, "
                "precip, visib, plane_year, seats, engines; fix the name or add the step that makes it before this one")
    with pytest.raises(ConfigError) as refused:
        preflight(project, runtime)
    sample = tmp_path / "sample.csv"
    _joined(runtime, project, flights_sample.head(300)).to_csv(sample, index=False)
    with pytest.raises(ConfigError) as smoke:
        smoke_probe(project, sample)
    assert refused.value.problems == smoke.value.problems == [expected]


@pytest.mark.filterwarnings("ignore::UserWarning:mlflow")  # mlflow's own notices about the local store
def test_an_unchanged_project_is_not_trained_again(project_dir, runtime, flights_sample, lookup_tables):
    import mlflow

    # 600 flights (178 pass training.yml's filter), then 200 more: what is tested is when a project is
    # trained again, so its three trainings admit their models on a few dozen holdout rows, not 256
    runtime.write_table("main.flights.flights", flights_sample.iloc[:600])
    lookup_tables(runtime)  # config/training.yml's feature tables
    project = load_project(project_dir)
    first = train(project, runtime)
    assert (first.version, first.reused, first.note) == (1, False, "trained: no version under alias champion yet")
    again = train(project, runtime)
    assert again.reused and again.version == 1 and again.run_id == first.run_id
    assert again.note.startswith("unchanged since v1 (source main.flights.flights version 0,")
    assert (again.metrics, again.rows, again.certificate) == (first.metrics, first.rows, first.certificate)
    client = mlflow.MlflowClient()
    assert [v.version for v in client.search_model_versions("name='main.flights.late_arrival'")] == [1]

    runtime.write_table("main.flights.flights", flights_sample.iloc[600:800], mode="append")
    changed = train(project, runtime)
    assert (changed.version, changed.reused) == (2, False)
    assert changed.note == "trained: changed since v1: source main.flights.flights version 0 -> 1"
    assert changed.rows["training"] + changed.rows["holdout"] > first.rows["training"] + first.rows["holdout"]
    forced = train(project, runtime, retrain="always")
    assert (forced.version, forced.note) == (3, "trained: retrain: always")
    assert client.get_model_version_by_alias("main.flights.late_arrival", "champion").version == 3


@pytest.mark.filterwarnings("ignore::UserWarning:mlflow")  # mlflow's own notices about the local store
def test_train_chooses_the_threshold_on_the_holdout_and_says_so_everywhere(project_dir, runtime, flights_sample, lookup_tables):
    import mlflow

    runtime.write_table("main.flights.flights", flights_sample)
    lookup_tables(runtime)  # config/training.yml's feature tables
    training = yaml.safe_load((project_dir / "training.yml").read_text())
    project = _project(project_dir, model={**training["model"], "threshold": {"optimize": "youden"}})
    result = train(project, runtime)
    model = mlflow.pyfunc.load_model(f"models:/{result.model_name}/{result.version}")
    chain = model.unwrap_python_model().chain
    assert chain.threshold.method == "youden" and 0 < chain.threshold.value < 1
    assert 0 < chain.threshold.holdout_rows <= result.rows["holdout"]
    assert result.decision_threshold == chain.decision_rule == (
        f"threshold {chain.threshold.value!r} (optimize: youden on {chain.threshold.holdout_rows:,} holdout rows; "
        f"positive when p >= {chain.threshold.value!r})")
    client = mlflow.MlflowClient()
    assert client.get_model_version(result.model_name, str(result.version)).description == (
        f"Decision threshold in force: {chain.decision_rule}.")
    assert client.get_run(result.run_id).data.params["decision_threshold"] == chain.decision_rule
    rows = flights_sample.query(project.training.data.filter, engine="python")
    rows = read_feature_tables(runtime, chain.lookups).join(rows, chain.lookups)  # the model reads joined rows
    scored = model.predict(rows[list(chain.input_columns)])  # the registered pyfunc labels with the threshold
    keep = (scored["scoring_status"] == "predicted").to_numpy()
    p = scored["probability"].to_numpy(dtype="float64")[keep]
    assert ((p >= chain.threshold.value) == (scored["prediction"].to_numpy(dtype="int64", na_value=-1)[keep] == 1)).all()
    assert ((p >= chain.threshold.value) != (p >= 0.5)).any()  # it changed some labels


LOOKUPS = [
    {"table_name": "main.flights.weather", "lookup_key": "origin", "feature_names": ["temp", "visib"],
     "rename_outputs": {"temp": "origin_temp"}, "timestamp_lookup_key": "time_hour"},
    {"table_name": "main.flights.planes", "lookup_key": ["tailnum"], "feature_names": ["year"],
     "rename_outputs": {"year": "plane_year"}},
]


def _lookup_tables(runtime, demo_tables, flights_sample):
    """The sample, its weather (one row per origin and hour) and the planes of every other tailnum."""
    runtime.write_table("main.flights.flights", flights_sample)
    weather = demo_tables["main.flights.weather"].drop_duplicates(["origin", "time_hour"])
    runtime.write_table("main.flights.weather", weather[["origin", "time_hour", "temp", "visib"]])
    planes = demo_tables["main.flights.planes"]
    runtime.write_table("main.flights.planes", planes.iloc[::2][["tailnum", "year"]].reset_index(drop=True))
    return weather, planes.iloc[::2]


def _lookup_project(project_dir):
    without_feature_lookups(project_dir)  # the demo recipe without its own lookups: these tests set theirs
    training = yaml.safe_load((project_dir / "training.yml").read_text())
    data = {**training["data"], "feature_columns": [*training["data"]["feature_columns"], "origin_temp", "visib",
                                                    "plane_year"]}
    joined = ["origin_temp", "visib", "plane_year"]  # imputed and scaled with the table's own numbers
    recipe = [{**step, "columns": [*step["columns"], *joined]} if step["name"] in ("impute_numeric", "scale_numeric")
              else step for step in training["preprocessing"]]
    return _project(project_dir, data=data, preprocessing=recipe, feature_lookups=LOOKUPS)


def test_preflight_lists_every_lookup_problem_before_any_work(project_dir, runtime, demo_tables, flights_sample):
    _lookup_tables(runtime, demo_tables, flights_sample)
    without_feature_lookups(project_dir)  # the demo recipe without its own lookups: this test sets its own
    training = yaml.safe_load((project_dir / "training.yml").read_text())
    project = _project(project_dir, feature_lookups=[
        {**LOOKUPS[0], "feature_names": ["temp", "wind"]},
        {"table_name": "main.flights.engines", "lookup_key": "tailnum", "feature_names": ["seats"]},
        {"table_name": "main.flights.planes", "lookup_key": "tailnum", "feature_names": ["year"]}],
        data={**training["data"], "feature_columns": [*training["data"]["feature_columns"], "origin_temp"]})
    with pytest.raises(ConfigError) as err:
        preflight(project, runtime)
    text = "\n".join(err.value.problems)
    assert "feature_lookups[0] (main.flights.weather): feature table main.flights.weather has no column(s) ['wind']" in text
    assert "feature_lookups[1] (main.flights.engines): " in text
    assert "feature_lookups[2] (main.flights.planes): feature lookup on main.flights.planes: output column(s) " \
           "['year'] already exist in the rows; rename them with rename_outputs" in text
    assert "feature_lookups[0] (main.flights.weather) adds column 'wind', which data.feature_columns does not " \
           "list" in text


@pytest.mark.filterwarnings("ignore::UserWarning:mlflow")  # mlflow's own notices about the local store
def test_train_joins_the_lookups_before_the_split_and_seals_the_spec(project_dir, runtime, demo_tables,
                                                                     flights_sample):
    import json

    import mlflow

    from lakescore.errors import CertificateError

    weather, planes = _lookup_tables(runtime, demo_tables, flights_sample)
    project = _lookup_project(project_dir)
    result = train(project, runtime)
    assert result.feature_lookups == [{"table": "main.flights.weather", "version": 0},
                                      {"table": "main.flights.planes", "version": 0}]
    model = mlflow.pyfunc.load_model(f"models:/{result.model_name}/{result.version}")
    chain = model.unwrap_python_model().chain
    assert [s.table_name for s in chain.lookups] == ["main.flights.weather", "main.flights.planes"]
    assert chain.lookup_versions == (0, 0)
    assert {"origin_temp", "visib", "plane_year"} <= set(chain.input_columns)

    # the imputer learned plane_year's median on the training rows joined by hand (missing tailnums: null)
    rows = flights_sample.query(project.training.data.filter, engine="python")
    by_hand = rows["tailnum"].map(planes.set_index("tailnum")["year"])
    assert by_hand.isna().sum() > 100 and by_hand.notna().sum() > 100
    imputer = next(s for s in chain.steps if s.name == "impute_numeric")
    fill = dict(zip(imputer.state["columns"], imputer.state["fill"]))["plane_year"]
    assert min(by_hand.dropna()) < fill < max(by_hand.dropna())
    assert result.rows["training"] + result.rows["holdout"] == len(rows)  # no row dropped by the join

    # a request whose tailnum has no plane row: null plane_year, imputed, predicted like the filled row
    from lakescore.lookup import join_all

    request = rows.head(1).assign(tailnum="NOPE")
    tables = {"main.flights.weather": weather, "main.flights.planes": planes[["tailnum", "year"]]}
    joined = join_all(request, tables, chain.lookups)
    assert joined["plane_year"].isna().all()
    got = model.predict(joined[list(chain.input_columns)])
    filled = model.predict(joined.assign(plane_year=fill)[list(chain.input_columns)])
    assert got["scoring_status"].tolist() == ["predicted"]
    assert got["probability"].iloc[0] == pytest.approx(filled["probability"].iloc[0], abs=1e-12)

    # a changed spec in the saved chain is refused on load
    chain_json = next((runtime.home / "mlartifacts").rglob("chain/chain.json"))
    meta = json.loads(chain_json.read_text())
    meta["feature_lookups"][1]["spec"]["lookup_key"] = ["tailnum", "year"]
    chain_json.write_text(json.dumps(meta, indent=1, sort_keys=True))
    with pytest.raises(CertificateError, match="does not match its certificate.*recipe_sha256: sealed"):
        mlflow.pyfunc.load_model(f"models:/{result.model_name}/{result.version}")


def test_a_model_set_is_registered_as_one_version_that_lists_its_components(trained_set, flights_sample):
    import mlflow

    from lakescore.admission.certificate import folder_digest
    from lakescore.model_set import ModelSet

    config, runtime, result = trained_set
    runtime.mlflow()
    client = mlflow.MlflowClient()
    (only,) = client.search_model_versions(f"name = '{result.model_name}'")  # one version holds the whole set
    assert int(only.version) == result.version == 1
    assert [c["name"] for c in result.components] == ["delay_model", "minutes_model"]
    assert [c["model_class"] for c in result.components] == ["LogisticRegression", "LinearRegression"]
    assert result.components[0]["decision_threshold"].startswith("threshold 0.4")
    assert result.components[1]["decision_threshold"] == "no decision threshold (regressor)"
    folder = mlflow.artifacts.download_artifacts(f"models:/{result.model_name}/1/artifacts/chain")
    for component in result.components:  # independent: the digest of the registered component folder
        assert component["digest"] == folder_digest(f"{folder}/components/{component['name']}")
        assert f"- {component['name']}: {component['model_class']}" in only.description
        assert component["digest"] in only.description
    assert result.summary()["components"] == result.components
    assert {"delay_model.accuracy", "delay_model.roc_auc", "minutes_model.rmse", "minutes_model.mae"} <= set(result.metrics)
    assert [s["name"] for s in result.steps][:2] == ["delay_model/distance_outlier", "delay_model/impute_numeric"]
    model = mlflow.pyfunc.load_model(f"models:/{result.model_name}/1")
    assert isinstance(model.unwrap_python_model().chain, ModelSet)
    rows = flights_sample.iloc[1900:1910]
    scored = model.predict(rows[list(model.unwrap_python_model().chain.input_columns)])
    assert list(scored.columns) == ["delay_model_prediction", "delay_model_probability", "minutes_model_prediction",
                                    "late_risk", "scoring_status", "exclusion_reason", "late_flag"]
    profile = mlflow.artifacts.load_dict(f"runs:/{result.run_id}/drift_profile.json")
    assert profile["prediction"]["column"] == "delay_model_probability"


def test_a_set_output_that_reuses_a_component_column_name_is_refused(set_config, flights_sample):
    """A composed column or a combined rule's output named like a component's own column would
    overwrite it in the set's answer: both are config problems naming the column."""
    import yaml

    from lakescore.config import load_project
    from lakescore.training_set import set_problems

    config = set_config
    training = yaml.safe_load((config / "training.yml").read_text())
    training["model_set"]["composed"].append({"name": "delay_model_probability",
                                              "weighted_sum": {"delay_model.probability": 2}})
    (config / "training.yml").write_text(yaml.safe_dump(training, sort_keys=False))
    scoring = yaml.safe_load((config / "scoring.yml").read_text())
    scoring["combined_rules"][0]["outputs"] = {"minutes_model_prediction": "double"}
    (config / "scoring.yml").write_text(yaml.safe_dump(scoring, sort_keys=False))
    problems = set_problems(load_project(config), flights_sample.head(0))
    assert any("composed 'delay_model_probability' is the name of a component's own output column" in p
               for p in problems), problems
    assert any("combined rule 'late_flag' outputs 'minutes_model_prediction'" in p for p in problems), problems
