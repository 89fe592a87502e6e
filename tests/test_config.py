"""Config validation: every problem in one message, each naming file, key, bad value and fix."""

from pathlib import Path

import pytest
import yaml
from fixtures.configs import CONFIG, without_feature_lookups

from lakescore.cli import main
from lakescore.config import load_project
from lakescore.config.base import SAFE_LOADER
from lakescore.errors import ConfigError


def _edit(folder: Path, name: str, **changes) -> None:
    path = folder / name
    data = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if value is None and key in data:
            del data[key]
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data))


def test_the_repository_config_is_valid():
    project = load_project(CONFIG)
    assert project.inference.spark_udf_prediction_batch_rows == 10000
    assert project.training.model.class_name == "LogisticRegression"


def test_out_of_range_batch_rows_names_file_key_value_and_range(project_dir):
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=0)
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert "config/inference.yml: spark_udf_prediction_batch_rows must be between 1 and 100000; got 0" in str(err.value)


def test_every_problem_of_every_file_is_listed_at_once(project_dir):
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=100001, batch_compte="spark",
          score_source_table=None)
    _edit(project_dir, "training.yml", registry={"model_name": "late_arrival"})
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    problems = err.value.problems
    assert len(problems) == 4, problems
    text = str(err.value)
    assert "config/inference.yml: unknown key 'batch_compte' (did you mean 'batch_compute'?)" in text
    assert "config/inference.yml: missing required key 'score_source_table'" in text
    assert "got 100001" in text
    assert "config/training.yml: registry.model_name must be a three-part table name" in text


def test_a_file_that_is_not_yaml_names_the_file_and_the_line_beside_the_other_problems(project_dir):
    text = (project_dir / "serving.yml").read_text()
    (project_dir / "serving.yml").write_text(text + "replicas: [1, 2\n")
    _edit(project_dir, "inference.yml", batch_compute="gpu")
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    problems = err.value.problems
    assert len(problems) == 2, problems
    broken = next(p for p in problems if p.startswith("config/serving.yml: not valid YAML"))
    assert f"line {len(text.splitlines()) + 2}" in broken and broken.endswith("; fix the syntax")
    assert yaml.__with_libyaml__ is False or SAFE_LOADER is yaml.CSafeLoader  # libyaml's parser where it is installed


def test_a_bad_choice_lists_the_allowed_values(project_dir):
    _edit(project_dir, "inference.yml", batch_compute="gpu")
    with pytest.raises(ConfigError, match=r"batch_compute must be 'spark' or 'single_node'; got 'gpu'"):
        load_project(project_dir)


def test_pinned_version_needs_a_model_version(project_dir):
    _edit(project_dir, "inference.yml", score_model_selection="pinned_version", model_version=None)
    with pytest.raises(ConfigError, match="model_version is required when score_model_selection is 'pinned_version'"):
        load_project(project_dir)


def test_the_cli_prints_the_problems_and_exits_2(project_dir, capsys):
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=-5)
    assert main(["score", "--config-dir", str(project_dir), "--home", str(project_dir / "home")]) == 2
    err = capsys.readouterr().err
    assert "invalid_config" in err and "got -5" in err


@pytest.mark.parametrize("value,expected", [
    (True, "must be a number between 1 and 100000; got True"),
    ("5000", "must be a number between 1 and 100000; got '5000'"),
    (2.5, "must be a whole number between 1 and 100000; got 2.5"),
])
def test_a_batch_size_that_is_not_a_whole_number_says_what_is_allowed(project_dir, value, expected):
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=value)
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert f"config/inference.yml: spark_udf_prediction_batch_rows {expected}" in str(err.value)


# --- ${catalog} / ${schema} in table names ------------------------------------------------------

def test_placeholders_take_the_catalog_and_schema_given_and_full_names_stay(project_dir):
    _edit(project_dir, "monitoring.yml", label_table="main.shared.flights_labels")
    project = load_project(project_dir, catalog="dev", schema="flights_alice")
    assert project.inference.prediction_table == "dev.flights_alice.late_arrival_predictions"
    assert project.inference.score_source_table == "dev.flights_alice.flights_incoming"
    assert project.training.data.table == "dev.flights_alice.flights"
    assert project.monitoring.label_table == "main.shared.flights_labels"  # written out in full: as it is
    assert (project.catalog, project.schema) == ("dev", "flights_alice")


def test_without_a_catalog_or_schema_the_placeholders_are_main_and_flights(project_dir):
    project = load_project(project_dir, schema="flights_staging")
    assert project.inference.prediction_table == "main.flights_staging.late_arrival_predictions"
    assert load_project(project_dir).monitoring.quality_table == "main.flights.late_arrival_quality"


def test_the_tables_a_run_only_reads_come_from_the_source_namespace(project_dir):
    # dev reads the shared source tables and writes its own schema
    project = load_project(project_dir, catalog="main", schema="flights_alice",
                           source_catalog="shared", source_schema="flights")
    training = project.training
    read = [project.inference.score_source_table, training.data.table, project.monitoring.label_table,
            *(lookup.table_name for lookup in training.feature_lookups)]
    assert read == ["shared.flights.flights_incoming", "shared.flights.flights", "shared.flights.flights",
                    "shared.flights.weather", "shared.flights.planes"]
    written = [project.inference.prediction_table, project.monitoring.quality_table,
               project.serving.inference_table, training.registry.model_name]
    assert written == ["main.flights_alice.late_arrival_predictions", "main.flights_alice.late_arrival_quality",
                       "main.flights_alice.late_arrival_inference", "main.flights_alice.late_arrival"]
    assert (project.source_catalog, project.source_schema) == ("shared", "flights")


def test_without_a_source_namespace_a_run_reads_where_it_writes(project_dir):
    # the local default: one schema (main.flights), the demo's; a bundle target names both
    assert load_project(project_dir).inference.score_source_table == "main.flights.flights_incoming"
    project = load_project(project_dir, catalog="dev", schema="flights_bob")
    assert project.training.data.table == "dev.flights_bob.flights"
    assert (project.source_catalog, project.source_schema) == ("dev", "flights_bob")
    only_schema = load_project(project_dir, schema="flights_bob", source_catalog="shared")
    assert only_schema.inference.score_source_table == "shared.flights_bob.flights_incoming"


@pytest.mark.parametrize("given,flag", [({"source_catalog": "src-cat"}, "--source-catalog"),
                                        ({"source_schema": "9flights"}, "--source-schema")])
def test_a_source_catalog_or_schema_that_is_not_a_name_is_listed_once(project_dir, given, flag):
    with pytest.raises(ConfigError) as err:
        load_project(project_dir, **given)
    (problem,) = err.value.problems
    assert problem.startswith(f"{flag} must be a Unity Catalog name of letters, digits and _")
    assert f"got {next(iter(given.values()))!r}" in problem
    assert f"set the bundle variable {next(iter(given))} to such a name" in problem


def test_a_placeholder_inside_a_name_part_is_replaced_too(project_dir):
    _edit(project_dir, "inference.yml", prediction_table="${catalog}.${schema}_out.preds")
    assert load_project(project_dir, catalog="c", schema="s").inference.prediction_table == "c.s_out.preds"


def test_an_unknown_placeholder_names_file_key_value_and_fix_with_the_other_problems(project_dir):
    _edit(project_dir, "inference.yml", prediction_table="${catlog}.${schema}.preds",
          spark_udf_prediction_batch_rows=0)
    _edit(project_dir, "serving.yml", inference_table="${env}.inference")
    with pytest.raises(ConfigError) as err:
        load_project(project_dir, catalog="dev")
    problems = err.value.problems
    assert len(problems) == 3, problems
    assert ("config/inference.yml: prediction_table uses the unknown placeholder ${catlog} (write ${catalog}, "
            "${schema}, ${source_catalog} or ${source_schema}, or the name itself); got '${catlog}.${schema}.preds'") in problems
    assert ("config/serving.yml: inference_table uses the unknown placeholder ${env} (write ${catalog}, "
            "${schema}, ${source_catalog} or ${source_schema}, or the name itself); got '${env}.inference'") in problems


def test_a_name_that_is_not_three_parts_after_substitution_shows_what_it_became(project_dir):
    _edit(project_dir, "inference.yml", prediction_table="${schema}.preds")
    with pytest.raises(ConfigError) as err:
        load_project(project_dir, schema="flights_dev")
    assert ("config/inference.yml: prediction_table must be a three-part table name catalog.schema.table "
            "(letters, digits, _) (resolved to 'flights_dev.preds'); got '${schema}.preds'") in str(err.value)


@pytest.mark.parametrize("catalog,schema,bad", [("dev-cat", None, "--catalog"), (None, "1st", "--schema"),
                                                 ("a.b", None, "--catalog")])
def test_a_catalog_or_schema_that_is_not_a_name_is_listed_once(project_dir, catalog, schema, bad):
    with pytest.raises(ConfigError) as err:
        load_project(project_dir, catalog=catalog, schema=schema)
    (problem,) = err.value.problems  # the tables fall back to the default, so no echo per table
    assert problem.startswith(f"{bad} must be a Unity Catalog name of letters, digits and _")
    assert f"got {catalog or schema!r}" in problem


def test_allow_tested_custom_steps_is_removed_and_listed_with_the_other_problems(project_dir):
    training = yaml.safe_load((project_dir / "training.yml").read_text())
    _edit(project_dir, "training.yml", defaults={**training["defaults"], "allow_tested_custom_steps": True})
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=0)
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert err.value.problems == [
        "config/training.yml: key 'defaults.allow_tested_custom_steps' was removed: every project already runs every "
        "check (lint, probe, certificate) on every custom step; delete the key; got True",
        "config/inference.yml: spark_udf_prediction_batch_rows must be between 1 and 100000; got 0"]


SHAPES = ("must be a number between 0 and 1 (exclusive), {optimize: f1}, {optimize: youden}, or "
          "{classes: {<label>: <number>, ...}} with one number per class")


@pytest.mark.parametrize("threshold,problem", [
    (0.0, f"model.threshold {SHAPES}; got 0.0"),
    (1, f"model.threshold {SHAPES}; got 1"),
    ("0.3", f"model.threshold {SHAPES}; got '0.3'"),
    (True, f"model.threshold {SHAPES}; got True"),
    ({"optimize": "auc"}, "model.threshold optimize must be 'f1' (F1 of the positive class) or 'youden' (TPR - FPR); "
                          "got {'optimize': 'auc'}"),
    ({"classes": {"A": 0.5, "B": 1.2}}, "model.threshold classes has B: 1.2; each class threshold must be a number "
                                        "between 0 and 1 (exclusive); got {'classes': {'A': 0.5, 'B': 1.2}}"),
    ({"classes": {"A": 0.5}}, "model.threshold classes must map every class label to its threshold (at least two "
                              "classes); got {'classes': {'A': 0.5}}"),
    ({"value": 0.3, "optimize": "f1"}, f"model.threshold {SHAPES}; got {{'optimize': 'f1', 'value': 0.3}}"),  # as YAML wrote it
])
def test_a_bad_threshold_names_the_key_and_the_value(project_dir, threshold, problem):
    _edit(project_dir, "training.yml", model={"class": "LogisticRegression", "threshold": threshold})
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert err.value.problems == [f"config/training.yml: {problem}"]


@pytest.mark.parametrize("threshold,expected", [
    (0.35, {"value": 0.35, "optimize": None, "classes": None}),
    ({"optimize": "youden"}, {"value": None, "optimize": "youden", "classes": None}),
    ({"classes": {0: 0.5, 1: 0.3, 2: 0.2}}, {"value": None, "optimize": None, "classes": {0: 0.5, 1: 0.3, 2: 0.2}}),
])
def test_a_threshold_is_read_in_each_of_its_shapes(project_dir, threshold, expected):
    _edit(project_dir, "training.yml", model={"class": "LogisticRegression", "threshold": threshold})
    assert load_project(project_dir).training.model.threshold.model_dump() == expected


def test_without_a_threshold_the_model_keeps_its_own_predict(project_dir):
    assert load_project(project_dir).training.model.threshold is None


def test_feature_lookups_are_read_into_specs(project_dir):
    _edit(project_dir, "training.yml", feature_lookups=[
        {"table_name": "${catalog}.${schema}.weather", "lookup_key": "origin", "feature_names": ["temp", "visib"],
         "rename_outputs": {"temp": "origin_temp"}, "timestamp_lookup_key": "time_hour"},
        {"table_name": "main.flights.planes", "lookup_key": ["tailnum"], "feature_names": ["seats"]}])
    lookups = load_project(project_dir, catalog="dev").training.feature_lookups
    weather, planes = (lookup.spec() for lookup in lookups)
    assert weather.table_name == "dev.flights.weather" and weather.lookup_key == ("origin",)
    assert weather.output_columns == ("origin_temp", "visib")
    assert (weather.timestamp_lookup_key, weather.feature_timestamp_key) == ("time_hour", "time_hour")
    assert planes.lookup_key == ("tailnum",) and not planes.point_in_time


def test_every_bad_feature_lookup_is_listed_naming_the_key_and_the_value(project_dir):
    _edit(project_dir, "training.yml", feature_lookups=[
        {"table_name": "weather", "lookup_key": [], "feature_names": ["temp"], "rename_outputs": {"wind": "w"}},
        {"table_name": "main.flights.planes", "lookup_key": "tailnum", "feature_names": ["seats"],
         "feature_timestamp_key": "ts", "timestamp_key": "x"}])
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    text = "\n".join(err.value.problems)
    assert "config/training.yml: feature_lookups.0.table_name must be a three-part table name" in text
    assert "config/training.yml: feature_lookups.0.lookup_key must name at least one column; got []" in text
    assert "config/training.yml: unknown key 'feature_lookups.1.timestamp_key' (did you mean 'timestamp_lookup_key'?)" \
        in text
    assert len(err.value.problems) == 3, err.value.problems


def test_a_lookup_rename_of_an_unlisted_feature_and_a_repeated_output_are_refused(project_dir):
    _edit(project_dir, "training.yml", feature_lookups=[
        {"table_name": "main.flights.weather", "lookup_key": "origin", "feature_names": ["temp"],
         "rename_outputs": {"wind": "w"}}])
    with pytest.raises(ConfigError, match=r"feature_lookups\.0 rename_outputs names 'wind', which is not in "
                                          r"feature_names \['temp'\]"):
        load_project(project_dir)
    _edit(project_dir, "training.yml", feature_lookups=[
        {"table_name": "main.flights.weather", "lookup_key": "origin", "feature_names": ["year"]},
        {"table_name": "main.flights.planes", "lookup_key": "tailnum", "feature_names": ["year"]}])
    with pytest.raises(ConfigError, match=r"output column 'year' comes from both main\.flights\.weather and "
                                          r"main\.flights\.planes; rename one with rename_outputs"):
        load_project(project_dir)


SET = {"components": {
    "delay_model": {"preprocessing": [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay"]}],
                    "model": {"class": "LogisticRegression", "params": {"max_iter": 300}, "threshold": 0.4}},
    "minutes_model": {"model": {"class": "LinearRegression"}, "label_column": "arr_delay", "label_expression": None,
                      "feature_columns": ["dep_delay", "distance"]}},
    "composed": [{"name": "late_risk", "weighted_mean": {"delay_model.probability": 0.7,
                                                          "minutes_model.prediction": 0.3}}]}


def test_a_model_set_is_read_in_declared_order(project_dir):
    _edit(project_dir, "training.yml", model=None, preprocessing=None, model_set=SET)
    training = load_project(project_dir).training
    assert training.is_set and training.model is None
    assert list(training.model_set.components) == ["delay_model", "minutes_model"]
    assert training.model_set.components["delay_model"].model.threshold.value == 0.4
    (composed,) = training.model_set.composed
    assert (composed.kind, composed.weights) == ("weighted_mean", {"delay_model.probability": 0.7,
                                                                    "minutes_model.prediction": 0.3})


def test_model_set_beside_model_and_preprocessing_is_one_problem_naming_the_keys(project_dir):
    _edit(project_dir, "training.yml", model_set=SET)
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert err.value.problems == [
        "config/training.yml: model_set holds each component's own preprocessing and model, so top-level model and "
        "preprocessing must not be given beside it; move them into model_set.components.<name> or delete model_set"]


def test_neither_model_nor_model_set_is_listed_with_the_other_problems(project_dir):
    _edit(project_dir, "training.yml", model=None)
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=0)
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    text = str(err.value)
    assert "config/training.yml: missing required key 'model' (or 'model_set'" in text
    assert "config/inference.yml: spark_udf_prediction_batch_rows must be between 1 and 100000" in text


@pytest.mark.parametrize("composed, problem", [
    ({"name": "x", "weighted_sum": {"delay_model.probability": "0.7"}}, "each weight must be a fixed number"),
    ({"name": "x", "weighted_sum": {"delay_model": 1}}, "each term is <component>.<output column>"),
    ({"name": "x", "weighted_sum": {"late_model.probability": 1}}, "names 'late_model.probability', but the set's "
                                                                   "components are delay_model, minutes_model"),
    ({"name": "x", "weighted_sum": {"delay_model.probability": 1}, "weighted_mean": {"delay_model.probability": 1}},
     "needs exactly one of weighted_sum or weighted_mean"),
    ({"name": "x", "weighted_mean": {"delay_model.probability": 1, "minutes_model.prediction": -1}},
     "weighted_mean weights sum to 0"),
])
def test_a_bad_composed_column_names_the_term_and_the_fix(project_dir, composed, problem):
    _edit(project_dir, "training.yml", model=None, preprocessing=None, model_set={**SET, "composed": [composed]})
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert problem in str(err.value)


def test_max_rows_and_split_training_are_read_with_their_defaults(project_dir):
    without_feature_lookups(project_dir)  # split training does not take feature_lookups yet
    _edit(project_dir, "training.yml", max_rows=200000, split_training={"enabled": True})
    training = load_project(project_dir).training
    assert training.max_rows == 200000
    assert (training.split_training.enabled, training.split_training.min_rows_per_worker,
            training.split_training.max_workers) == (True, 25000, None)


def test_split_training_without_max_rows_says_what_to_set(project_dir):
    _edit(project_dir, "training.yml", split_training={"enabled": True, "min_rows_per_worker": 0, "max_workers": 1})
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    problems = err.value.problems
    assert "config/training.yml: split_training.min_rows_per_worker must be between 1 and 1000000000; got 0" in problems
    assert "config/training.yml: split_training.max_workers must be between 2 and 10000; got 1" in problems
    _edit(project_dir, "training.yml", split_training={"enabled": True})
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert err.value.problems == ["config/training.yml: split_training.enabled needs max_rows (the single-process "
                                  "ceiling: the search's sample and each slice's size); set max_rows, e.g. max_rows: "
                                  "200000, or set split_training.enabled: false"]


def test_refs_to_the_former_project_package_are_listed_with_the_new_reference(project_dir):
    training = yaml.safe_load((project_dir / "training.yml").read_text())
    clock = {"step": "custom", "name": "dep_clock", "ref": "features.preprocessing:dep_clock_step",
             "columns": ["hour", "minute"]}
    _edit(project_dir, "training.yml", preprocessing=[*training["preprocessing"], clock])
    _edit(project_dir, "scoring.yml", module="features.scoring",
          eligibility=[{"name": "cancelled", "function": "features.scoring:has_departed", "columns": ["dep_time"]}])
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    step = len(training["preprocessing"])
    assert err.value.problems == [
        f"config/training.yml: preprocessing.{step} ref 'features.preprocessing:dep_clock_step' names the project "
        "package by its former name 'features'; write 'lakescore_project.preprocessing:dep_clock_step' (the code "
        f"lives in src/lakescore_project); got { {k: clock[k] for k in sorted(clock)}!r}",
        "config/scoring.yml: module 'features.scoring' names the project package by its former name 'features'; "
        "write 'lakescore_project.scoring' (the code lives in src/lakescore_project); got 'features.scoring'",
        "config/scoring.yml: eligibility.0.function 'features.scoring:has_departed' names the project package by its "
        "former name 'features'; write 'lakescore_project.scoring:has_departed' (the code lives in "
        "src/lakescore_project); got 'features.scoring:has_departed'"]


def test_a_virtualenv_env_manager_is_refused_with_why_and_the_fix(project_dir):
    _edit(project_dir, "inference.yml", spark_udf_env_manager="virtualenv")
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert err.value.problems == [
        "config/inference.yml: spark_udf_env_manager 'virtualenv' cannot restore a lakescore model's environment: "
        "MLflow would pip-install the model's requirements.txt on every worker, and it names the project's own "
        "wheel (lakescore==<version>), which is on no package index (besides pyenv, virtualenv and PyPI on every "
        "worker). Use local: the bundle installs the wheel on every worker (cluster library or job environment) and "
        "each worker re-checks the certificate's library versions; got 'virtualenv'"]
