"""Preflight refuses, before any work: uncertified models, Polars chains on Spark, a source whose
Delta reader features the route's engine cannot read, and the SDK's runtime="spark"."""

import dataclasses

import mlflow
import pytest

from lakescore.admission.evidence import admit
from lakescore.config import load_project
from lakescore.errors import ConfigError, RuntimeUnsupportedError
from lakescore.packaging import LakescoreModel, log_and_register
from lakescore.scoring.local import score_frame
from lakescore.scoring.preflight import preflight
from lakescore.workflows.score import score

NAME = "main.flights.late_arrival"


@pytest.fixture
def project(runtime, project_dir, flights_sample):
    runtime.write_table("main.flights.flights_incoming", flights_sample)
    runtime.mlflow()
    return load_project(project_dir)


def test_a_polars_trained_chain_is_refused_on_spark_but_not_single_node(project, runtime, small_chain, flights_sample):
    chain = dataclasses.replace(small_chain, engine="polars")
    with mlflow.start_run():
        log_and_register(chain, example=flights_sample.head(5), name=NAME, alias="champion",
                         evidence=admit(chain, flights_sample.iloc[1000:]))
    with pytest.raises(ConfigError, match="spark_polars_unsupported: model main.flights.late_arrival v1 was trained on Polars"):
        preflight(project, runtime)
    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    assert preflight(single, runtime).model_version == 1


def test_a_model_without_a_certificate_is_refused(project, runtime, small_chain, tmp_path):
    chain_dir = small_chain.save(tmp_path / "chain")
    with mlflow.start_run():
        mlflow.pyfunc.log_model(name="model", python_model=LakescoreModel(), artifacts={"chain": str(chain_dir)},
                                registered_model_name=NAME)
    mlflow.MlflowClient().set_registered_model_alias(NAME, "champion", "1")
    with pytest.raises(ConfigError, match="uncertified_model: model models:/main.flights.late_arrival/1 has no certificate"):
        preflight(project, runtime)


def test_the_sdk_refuses_runtime_spark(flights_sample):
    with pytest.raises(RuntimeUnsupportedError, match=r"score_frame\(runtime='spark'\) is not supported") as err:
        score_frame(flights_sample, "models:/x/1", runtime="spark")
    assert err.value.code == "runtime_unsupported"


def test_champion_selection_follows_the_configured_registry_alias(runtime, project_dir, flights_sample, small_chain,
                                                                   small_evidence):
    import yaml

    path = project_dir / "training.yml"
    cfg = yaml.safe_load(path.read_text())
    cfg["registry"]["alias"] = "prod"
    path.write_text(yaml.safe_dump(cfg))
    runtime.write_table("main.flights.flights_incoming", flights_sample)
    runtime.mlflow()
    evidence = small_evidence
    with mlflow.start_run():
        log_and_register(small_chain, example=flights_sample.head(5), name=NAME, alias="prod", evidence=evidence)
        log_and_register(small_chain, example=flights_sample.head(5), name=NAME, alias="champion", evidence=evidence)
    assert preflight(load_project(project_dir), runtime).model_version == 1  # prod, not champion (v2)


def test_a_source_column_of_another_type_is_refused_before_any_work(runtime, project_dir, flights_sample, small_chain,
                                                                     small_evidence):
    as_text = flights_sample.assign(dep_delay=flights_sample["dep_delay"].astype(str))
    runtime.write_table("main.flights.flights_incoming", as_text)
    runtime.mlflow()
    with mlflow.start_run():
        log_and_register(small_chain, example=flights_sample.head(5), name=NAME, alias="champion",
                         evidence=small_evidence)
    with pytest.raises(ConfigError, match="column 'dep_delay' holds string values; model main.flights.late_arrival "
                                          "v1 reads number"):
        preflight(load_project(project_dir), runtime)


@pytest.mark.spark
def test_a_source_that_delta_rs_cannot_read_is_refused_on_single_node_before_any_work(spark_runtime, project_dir,
                                                                                      flights_sample, small_chain,
                                                                                      small_evidence):
    from fixtures.spark_delta import write_spark_delta

    write_spark_delta(spark_runtime.spark(), spark_runtime.table_path("main.flights.flights_incoming"),
                      flights_sample.head(10), properties={"delta.enableTypeWidening": "true"})
    spark_runtime.mlflow()
    with mlflow.start_run():
        log_and_register(small_chain, example=flights_sample.head(5), name=NAME, alias="champion",
                         evidence=small_evidence)
    project = load_project(project_dir)
    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    with pytest.raises(ConfigError) as err:
        score(single, spark_runtime)
    assert err.value.problems == [
        "table_feature_unsupported: score source main.flights.flights_incoming v0 needs Delta reader feature(s) "
        "['typeWidening'] that the single-node route's reader (delta-rs 1.6.6) cannot read. Set batch_compute: "
        "spark in config/inference.yml (Spark reads it through Delta Lake)."]
    assert list(spark_runtime.runs_dir().iterdir()) == []  # nothing scored or staged
    assert not spark_runtime.table_exists(project.inference.prediction_table)  # nothing published
    assert preflight(project, spark_runtime).source_version == 0  # the Spark route reads it


def test_a_null_the_model_cannot_score_is_a_warning_in_the_score_summary(project, runtime, flights_sample):
    import dataclasses

    import pandas as pd

    from lakescore.frames import derive_label
    from lakescore.packaging import null_counts
    from lakescore.rules import load_rules
    from lakescore.training import ChainRecipe, fit_chain
    from lakescore.workflows.score import score

    train = flights_sample.iloc[:1500]
    recipe = [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay", "distance"], "strategy": "median"},
              {"step": "StandardScaler", "name": "scale", "columns": ["dep_delay", "distance", "hour"]},
              {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier", "origin"]}]  # hour: not imputed
    chain = fit_chain(train, derive_label(train, column="is_late", expression="arr_delay > 15"),
                      ChainRecipe(steps=recipe, model_class="LogisticRegression", model_params={"max_iter": 300},
                                  feature_columns=["dep_delay", "distance", "hour", "carrier", "origin"],
                                  rules=load_rules(project.scoring)))
    with mlflow.start_run():
        log_and_register(chain, example=flights_sample.iloc[1500:1505], name=NAME, alias="champion",
                         evidence=admit(chain, flights_sample.iloc[1500:]),
                         training_nulls=null_counts(train, chain.input_columns))
    source = flights_sample.iloc[1500:1600].reset_index(drop=True).assign(
        hour=flights_sample["hour"].iloc[1500:1600].astype("Int64").to_numpy())
    source.loc[[2, 9, 30], "hour"] = pd.NA
    source.loc[[4], "dep_delay"] = None  # imputed: scored, no warning
    runtime.write_table("main.flights.flights_incoming", source, mode="overwrite")
    assert source["dep_time"].isna().any()  # cancelled flights: ineligible by the rule, no warning

    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    plan = preflight(single, runtime)
    assert len(plan.warnings) == 1
    assert "column 'hour' has 3 null row(s) at v1; model main.flights.late_arrival v1 cannot score a null there " \
           "(training saw no nulls in it" in plan.warnings[0]
    assert "excluded as invalid:hour. To score them, impute 'hour' in the recipe" in plan.warnings[0]
    summary = score(single, runtime).summary()
    assert summary["warnings"] == list(plan.warnings)
    assert summary["exclusions"]["invalid:hour"] == 3  # what the warning said


def test_the_threshold_in_force_reaches_the_plan_and_the_published_receipt(project, runtime, small_chain,
                                                                            flights_sample):
    from lakescore.thresholds import Threshold
    from lakescore.workflows.publish import publish

    chain = dataclasses.replace(small_chain, threshold=Threshold(value=0.4, method="f1", holdout_rows=1204))
    with mlflow.start_run():
        log_and_register(chain, example=flights_sample.head(5), name=NAME, alias="champion",
                         evidence=admit(chain, flights_sample.iloc[1000:]))
    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    rule = "threshold 0.4 (optimize: f1 on 1,204 holdout rows; positive when p >= 0.4)"
    assert preflight(single, runtime).decision_threshold == rule
    run = score(single, runtime)
    assert run.plan.decision_threshold == rule
    receipt = publish(single, runtime, run).receipt
    assert receipt["decision_threshold"] == rule
    assert receipt["model_version"] == 1
    scored = run.predictions[run.predictions["scoring_status"] == "predicted"]
    assert ((scored["probability"] >= 0.4) == (scored["prediction"] == 1)).all()  # the labels obey it
