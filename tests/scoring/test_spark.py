"""The Spark route's transport, checked against the single-node route on the same registered model:
integers above 2**53 in and out stay exact, a text equal to any null marker stays text, a null in
an integer feature is imputed by the recipe, and a value of the wrong kind excludes only its row.
Also the route's own notice: MLflow's env_manager warning answered in one line of ours."""

import copy
import logging
import textwrap

import mlflow
import numpy as np
import pandas as pd
import pytest
from fixtures.runs import as_pandas

from lakescore.admission.evidence import admit
from lakescore.config import ScoringConfig
from lakescore.frames import derive_label
from lakescore.packaging import log_and_register
from lakescore.rules import load_output_rules, load_rules
from lakescore.scoring.local import score_frame, score_single_node
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.spark import ENV_NOTE, _env_notice_answered, score_spark
from lakescore.training import ChainRecipe, fit_chain

pytestmark = pytest.mark.spark

BIG = 2**53 + 1  # 9007199254740993: the first integer a double cannot hold
MARKERS = ["<lakescore:null>", "None", "<NA>", "", "nan"]
RULES = '''
import pandas as pd

def carry(frame, params):
    """Output rule: a constant above 2**53, the row's own big key and its tag, untouched."""
    return pd.DataFrame({"bucket": frame["big"] * 0 + (2**53 + 1), "big_out": frame["big"],
                         "tag_out": frame["tag"]})
'''
MODULE = "lakescore_transport_rules"
SOURCE = "main.t.transport_source"


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory):
    """The output rule module, importable by name in this module's tests (the workers get it from ``ship``)."""
    folder = tmp_path_factory.mktemp("rules")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(RULES))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        yield folder / f"{MODULE}.py"


def ship(session, path) -> None:
    """Make ``path`` importable on ``session``'s workers (classic: addPyFile; Connect: addArtifacts)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    if isinstance(session, ConnectSession):
        session.addArtifacts(str(path), pyfile=True)
    else:
        session.sparkContext.addPyFile(str(path))


@pytest.fixture(scope="module")
def admitted(rules_file, flights_sample, demo_recipe):
    """The transport chain (the demo recipe, the ``cancelled`` rule, the ``carry`` output rule) fitted
    on 1,500 flights with a big integer and a marker text, and its admission evidence on the other
    500: made once per module (admission is the slow half of registering)."""
    frame = flights_sample.assign(big=BIG + np.arange(len(flights_sample)) * 2,
                                  tag=[MARKERS[i % len(MARKERS)] for i in range(len(flights_sample))])
    scoring = ScoringConfig.model_validate({
        "eligibility": [{"name": "cancelled", "function": "has_departed", "columns": ["dep_time"]}],
        "output": [{"name": "carry", "function": f"{MODULE}:carry", "columns": ["big", "tag"],
                    "outputs": {"bucket": "long", "big_out": "long", "tag_out": "string"}}]})
    train = frame.iloc[:1500]
    chain = fit_chain(train, derive_label(train, column="is_late", expression="arr_delay > 15"),
                      ChainRecipe(steps=demo_recipe, model_class="LogisticRegression", model_params={"max_iter": 300},
                                  feature_columns=["dep_delay", "distance", "hour", "carrier", "origin"],
                                  rules=load_rules(scoring), output_rules=load_output_rules(scoring)))
    return chain, frame, admit(chain, frame.iloc[1500:])


@pytest.fixture
def registered(runtime, admitted):
    """:func:`admitted` registered in this test's own fresh runtime: ``(runtime, model, chain, frame)``."""
    chain, frame, evidence = admitted
    runtime.mlflow()
    with mlflow.start_run():
        model = log_and_register(chain, example=frame.head(5), name="main.t.transport", alias="champion",
                                 evidence=copy.deepcopy(evidence))
    return runtime, model, chain, frame


@pytest.fixture
def on_spark(registered, route_spark, rules_file):
    """``registered`` on the test's Spark session, classic and then Spark Connect (see route_spark)."""
    registered[0].spark_session = route_spark
    ship(route_spark, rules_file)
    return registered


@pytest.fixture
def on_classic_spark(registered, spark, rules_file):
    """``registered`` on the classic session only."""
    registered[0].spark_session = spark
    ship(spark, rules_file)
    return registered


def spark_route(runtime, plan: ScorePlan, **options):
    """The Spark route on the pinned snapshot, as the score workflow hands it over, collected here
    (the route itself returns a lazy Spark DataFrame), sorted by key."""
    scored = score_spark(runtime.spark_source(plan.source_table, version=plan.source_version), plan, **options)
    return as_pandas(scored, plan.record_keys)


def single_node_route(runtime, plan: ScorePlan, **options):
    """The single-node route on the pinned snapshot, as the score workflow hands it over, sorted by
    key (the route keeps the source's order)."""
    columns = list(dict.fromkeys([*plan.record_keys, *plan.input_columns]))
    return as_pandas(score_single_node(runtime.read_table(plan.source_table, version=plan.source_version,
                                                          columns=columns), plan, **options), plan.record_keys)


def plan_for(runtime, model, chain) -> ScorePlan:
    return ScorePlan(SOURCE, runtime.table_version(SOURCE), model.name, model.version, model.model_uri,
                     tuple(chain.input_columns), ("flight_id",), model.certificate.digest,
                     model.certificate.artifact_sha256)


def test_big_integers_and_marker_texts_cross_both_routes_exactly(on_spark):
    runtime, model, chain, frame = on_spark
    source = frame.iloc[1500:1800].reset_index(drop=True)
    source["hour"] = source["hour"].astype("Int64")
    source.loc[[3, 40], "hour"] = pd.NA  # hour was trained as int64; the recipe imputes it (median)
    runtime.write_table(SOURCE, source)
    plan = plan_for(runtime, model, chain)

    on_spark = spark_route(runtime, plan, batch_rows=64, env_manager="local")
    on_one_node = single_node_route(runtime, plan, batch_rows=64)
    for scored in (on_spark, on_one_node):
        assert scored["flight_id"].tolist() == sorted(source["flight_id"])
        expected = source.sort_values("flight_id", ignore_index=True)
        predicted = (scored["scoring_status"] == "predicted").to_numpy()
        assert predicted.sum() > 250 and (~predicted).sum() > 0
        assert scored["bucket"].dtype == "Int64" and scored["big_out"].dtype == "Int64"
        assert scored.loc[predicted, "bucket"].eq(9007199254740993).all()  # not ...992
        assert (scored.loc[predicted, "big_out"].to_numpy(dtype=object)
                == expected.loc[predicted, "big"].to_numpy(dtype=object)).all()
        assert scored.loc[predicted, "tag_out"].tolist() == expected.loc[predicted, "tag"].tolist()
        assert set(scored.loc[predicted, "tag_out"]) == set(MARKERS)  # "" and "None" are values, not nulls
        assert scored.loc[~predicted, ["bucket", "big_out", "tag_out", "probability"]].isna().all().all()
        assert scored.loc[predicted, "exclusion_reason"].isna().all()
        assert scored.loc[scored["flight_id"].isin(source.loc[[3, 40], "flight_id"]), "scoring_status"].tolist() \
            == ["predicted", "predicted"]  # a null in an imputed integer feature is imputed, not fatal
    assert on_spark["flight_id"].tolist() == on_one_node["flight_id"].tolist()
    pd.testing.assert_frame_equal(on_spark.drop(columns="flight_id"), on_one_node.drop(columns="flight_id"),
                                  check_exact=False, rtol=1e-9, atol=1e-12)


def test_a_value_of_the_wrong_kind_excludes_only_its_row(registered):
    runtime, model, chain, frame = registered
    rows = frame.iloc[1500:1506][list(chain.input_columns)].reset_index(drop=True).astype(object)
    rows.loc[1, "hour"] = "seven"     # text in an integer column
    rows.loc[2, "hour"] = 6.5         # a fraction in an integer column
    rows.loc[3, "carrier"] = 17       # a number in a text column
    rows.loc[4, "dep_delay"] = "late"  # text in a number column
    rows.loc[5, "hour"] = 7.0         # a whole float is an integer (JSON has no integer type)
    got = score_frame(rows, model.model_uri)
    assert got["exclusion_reason"].tolist()[1:5] == ["invalid:hour", "invalid:hour", "invalid:carrier",
                                                     "invalid:dep_delay"]
    assert got["scoring_status"].tolist()[1:5] == ["excluded"] * 4
    assert got.loc[1:4, ["prediction", "probability", "bucket"]].isna().all().all()
    clean = frame.iloc[[1500, 1505]].reset_index(drop=True).assign(hour=[frame["hour"].iloc[1500], 7])
    want = chain.predict(clean)
    assert got.loc[[0, 5], "prediction"].tolist() == want["prediction"].tolist()
    assert np.allclose(got.loc[[0, 5], "probability"].astype(float), want["probability"].astype(float), rtol=1e-9)


def test_the_single_node_route_keeps_the_sources_row_order(registered):
    runtime, model, chain, frame = registered
    source = frame.iloc[1500:1800].sample(frac=1.0, random_state=7).reset_index(drop=True)  # keys in no order
    runtime.write_table(SOURCE, source)
    plan = plan_for(runtime, model, chain)
    read = runtime.read_table(SOURCE, version=plan.source_version)
    assert not read["flight_id"].is_monotonic_increasing  # what is read is not sorted either

    scored = score_single_node(read, plan, batch_rows=64)

    assert scored["flight_id"].tolist() == read["flight_id"].tolist()  # row for row: nothing sorted them
    want = chain.predict(read)
    assert scored["scoring_status"].tolist() == want["scoring_status"].tolist()
    np.testing.assert_allclose(scored["probability"].to_numpy(dtype="float64", na_value=np.nan),
                               want["probability"].to_numpy(dtype="float64", na_value=np.nan), rtol=1e-9)


MLFLOW_WARNING = ('Calling `spark_udf()` with `env_manager="local"` does not recreate the same environment '
                  "that was used during training, which may lead to errors or inaccurate predictions.")


def test_mlflows_local_environment_warning_is_replaced_by_our_line(caplog, capsys):
    logger = logging.getLogger("mlflow.pyfunc")
    with caplog.at_level(logging.INFO, logger="mlflow.pyfunc"):
        with _env_notice_answered("local"):
            logger.warning(MLFLOW_WARNING)
            logger.info("Selected backend for flavor 'python_function'")
        logger.warning(MLFLOW_WARNING)  # outside the spark_udf call MLflow speaks for itself
    assert [r.getMessage()[:30] for r in caplog.records] == ["Selected backend for flavor 'p", MLFLOW_WARNING[:30]]
    # MLflow's own handler (once another test configured it) may echo its records after our line
    err = capsys.readouterr().err
    assert err.startswith(ENV_NOTE + "\n") and err.count(MLFLOW_WARNING) <= 1


def test_a_virtualenv_route_keeps_mlflows_messages(caplog, capsys):
    with caplog.at_level(logging.WARNING, logger="mlflow.pyfunc"), _env_notice_answered("virtualenv"):
        logging.getLogger("mlflow.pyfunc").warning(MLFLOW_WARNING)
    assert [r.getMessage() for r in caplog.records] == [MLFLOW_WARNING]
    assert ENV_NOTE not in capsys.readouterr().err


NO_HOUR_IMPUTE = [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay", "distance"], "strategy": "median"},
                  {"step": "StandardScaler", "name": "scale", "columns": ["dep_delay", "distance", "hour"]},
                  {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier", "origin"]}]


def test_a_null_in_an_integer_feature_the_recipe_does_not_impute_excludes_its_row_on_both_routes(
        spark_runtime, flights_sample):
    """Issue 9 item 9: LogisticRegression cannot take NaN; `hour` (int64 at training) is not imputed."""
    runtime, frame = spark_runtime, flights_sample
    train = frame.iloc[:1500]
    chain = fit_chain(train, derive_label(train, column="is_late", expression="arr_delay > 15"),
                      ChainRecipe(steps=NO_HOUR_IMPUTE, model_class="LogisticRegression",
                                  model_params={"max_iter": 300},
                                  feature_columns=["dep_delay", "distance", "hour", "carrier", "origin"]))
    runtime.mlflow()
    with mlflow.start_run():
        model = log_and_register(chain, example=train.head(5), name="main.t.no_impute", alias="champion",
                                 evidence=admit(chain, frame.iloc[1500:]))
    source = frame.iloc[1500:1600].reset_index(drop=True)
    source["hour"] = source["hour"].astype("Int64")
    source.loc[[5, 60], "hour"] = pd.NA
    runtime.write_table(SOURCE, source)
    plan = plan_for(runtime, model, chain)
    nulls = source.loc[[5, 60], "flight_id"]
    want = chain.predict(source.drop(index=[5, 60])).set_axis(source.drop(index=[5, 60])["flight_id"])
    for scored in (spark_route(runtime, plan, batch_rows=7, env_manager="local"),
                   single_node_route(runtime, plan, batch_rows=7)):
        scored = scored.set_index("flight_id")
        assert scored.loc[nulls, "exclusion_reason"].tolist() == ["invalid:hour", "invalid:hour"]
        assert scored.loc[nulls, "scoring_status"].tolist() == ["excluded", "excluded"]
        assert scored.loc[nulls, ["prediction", "probability"]].isna().all().all()
        others = scored.drop(index=nulls).loc[want.index]
        assert (others["scoring_status"] == "predicted").all() and len(others) == 98
        assert others["prediction"].tolist() == want["prediction"].tolist()
        assert np.allclose(others["probability"].astype(float), want["probability"].astype(float), rtol=1e-9)


def test_a_nullable_long_source_column_reaches_an_output_rule_exactly_on_both_routes(on_classic_spark):
    runtime, model, chain, frame = on_classic_spark
    source = frame.iloc[1500:1540].reset_index(drop=True)
    source = source[source["dep_time"].notna()].reset_index(drop=True)  # every row predicted (no rule excludes)
    source["big"] = pd.array([BIG] * len(source), dtype="Int64")  # 9007199254740993
    source.loc[4, "big"] = pd.NA  # one null: a float64 read would round every other value to ...992
    runtime.write_table(SOURCE, source)
    plan = plan_for(runtime, model, chain)
    for scored in (single_node_route(runtime, plan, batch_rows=64),
                   spark_route(runtime, plan, batch_rows=64, env_manager="local")):
        by_key = scored.set_index("flight_id").loc[source["flight_id"]]
        predicted = (by_key["scoring_status"] == "predicted").to_numpy()
        assert predicted.sum() >= len(source) - 2  # at most the IQR outliers are excluded
        assert by_key.loc[predicted, "big_out"].tolist() == source.loc[predicted, "big"].tolist()
        assert by_key["big_out"].iloc[0] == 9007199254740993 and pd.isna(by_key["big_out"].iloc[4])


def test_each_worker_refuses_a_tampered_model_before_it_scores_a_row(on_spark):
    """The driver hands spark_udf a downloaded copy of the model; each worker's load_context still
    re-verifies the certificate in that copy, on classic Spark and on Spark Connect."""
    runtime, model, chain, frame = on_spark
    runtime.write_table(SOURCE, frame.iloc[1500:1600].reset_index(drop=True))
    plan = plan_for(runtime, model, chain)
    chain_json = next((runtime.home / "mlartifacts").rglob("chain/chain.json"))
    chain_json.write_text(chain_json.read_text().replace('"engine": "pandas"', '"engine": "pandas" '))
    with pytest.raises(Exception, match="the model does not match its certificate, so it will not score") as raised:
        spark_route(runtime, plan, batch_rows=64, env_manager="local")
    assert type(raised.value).__name__ == "PythonException"  # raised in a Python worker, not on the driver


def test_the_route_scores_the_sources_own_splits_with_no_exchange_and_every_core_gets_rows(on_classic_spark,
                                                                                        demo_tables):
    """No shuffle of the source. 120,000 flights in row groups of 10,000 rows (~2.6 MB) are one
    split by Spark's default 4 MiB open cost; at 1 MiB, each of the 2 cores gets rows."""
    from deltalake import WriterProperties
    from pyspark.sql import functions as F

    from lakescore.scoring.splits import OPEN_COST_BYTES, OPEN_COST_CONF

    runtime, model, chain, _ = on_classic_spark
    spark = runtime.spark()
    source = demo_tables["main.flights.flights"].head(120_000)
    source = source.assign(big=BIG, tag="x")
    runtime.write_table(SOURCE, source, writer_properties=WriterProperties(max_row_group_size=10_000))
    files = [f.stat().st_size for f in runtime.table_path(SOURCE).glob("*.parquet")]
    assert len(files) == 1 and 1 << 21 < sum(files) < 4 << 20  # one file, below Spark's 4 MiB open cost x 1
    spark.conf.unset(OPEN_COST_CONF)
    plan = plan_for(runtime, model, chain)

    scored = score_spark(runtime.spark_source(SOURCE, version=plan.source_version), plan, batch_rows=5000,
                         env_manager="local")
    physical = scored._jdf.queryExecution().executedPlan().toString()
    assert "ArrowEvalPython" in physical and "Exchange" not in physical
    assert spark.conf.get(OPEN_COST_CONF) == str(OPEN_COST_BYTES)
    rows = scored.select(F.spark_partition_id().alias("part")).groupBy("part").count().collect()
    assert sorted(r["part"] for r in rows) == [0, 1]  # both cores, each with rows
    assert sum(r["count"] for r in rows) == 120_000 and min(r["count"] for r in rows) >= 40_000


REASONS_RECIPE = [{"step": "IQR", "name": "distance_outlier", "columns": ["distance"], "factor": 1.5}, *NO_HOUR_IMPUTE]


def register(runtime, train, y, *, name, recipe, features, rules=()):
    chain = fit_chain(train, y, ChainRecipe(steps=recipe, model_class="LogisticRegression",
                                            model_params={"max_iter": 300}, feature_columns=features,
                                            rules=list(rules)))
    runtime.mlflow()
    with mlflow.start_run():
        model = log_and_register(chain, example=train.head(5), name=name, alias="champion",
                                 evidence=admit(chain, train.tail(200)))
    return chain, model


def test_status_and_reason_codes_decode_to_the_single_node_strings(spark_runtime, flights_sample):
    runtime, frame = spark_runtime, flights_sample
    train = frame.iloc[:1500]
    rules = load_rules(ScoringConfig.model_validate(
        {"eligibility": [{"name": "cancelled", "function": "has_departed", "columns": ["dep_time"]}]}))
    chain, model = register(runtime, train, derive_label(train, column="is_late", expression="arr_delay > 15"),
                            name="main.t.reasons", recipe=REASONS_RECIPE, rules=rules,
                            features=["dep_delay", "distance", "hour", "carrier", "origin"])
    source = frame.iloc[1500:1800].reset_index(drop=True)
    source["hour"] = source["hour"].astype("Int64")
    source.loc[[5, 60], "hour"] = pd.NA  # not imputed, LogisticRegression takes no NaN: invalid:hour
    source.loc[[7, 70], "distance"] = 90000.0  # beyond the IQR fence: outlier:distance_outlier
    runtime.write_table(SOURCE, source)
    plan = plan_for(runtime, model, chain)

    on_spark = spark_route(runtime, plan, batch_rows=50, env_manager="local")
    on_one_node = single_node_route(runtime, plan, batch_rows=50)
    assert set(on_spark["exclusion_reason"].dropna()) == {"ineligible:cancelled", "outlier:distance_outlier",
                                                          "invalid:hour"}
    by_key = on_spark.set_index("flight_id")
    assert by_key.loc[source.loc[[5, 60, 7, 70], "flight_id"], "exclusion_reason"].tolist() == [
        "invalid:hour", "invalid:hour", "outlier:distance_outlier", "outlier:distance_outlier"]
    assert (by_key["scoring_status"] == "excluded").sum() == by_key["exclusion_reason"].notna().sum() >= 5
    pd.testing.assert_frame_equal(on_spark, on_one_node, check_exact=False, rtol=1e-9, atol=1e-12)


def test_a_text_class_models_labels_arrive_as_the_same_strings(spark_runtime, flights_sample):
    runtime, frame = spark_runtime, flights_sample
    train = frame.iloc[:1500]
    chain, model = register(runtime, train, train["origin"].rename("origin_label"), name="main.t.text_classes",
                            recipe=[NO_HOUR_IMPUTE[0], {"step": "StandardScaler", "name": "scale",
                                                        "columns": ["dep_delay", "distance"]},
                                    {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier"]}],
                            features=["dep_delay", "distance", "carrier"])
    assert chain.label_dtype == "string" and chain.classes == ["EWR", "JFK", "LGA"]
    source = frame.iloc[1500:1700].reset_index(drop=True)
    runtime.write_table(SOURCE, source)
    plan = plan_for(runtime, model, chain)

    scored = score_spark(runtime.spark_source(SOURCE, version=plan.source_version), plan, batch_rows=30,
                         env_manager="local")
    assert dict(scored.dtypes)["prediction"] == "string" and dict(scored.dtypes)["scoring_status"] == "string"
    on_spark = as_pandas(scored, plan.record_keys)
    on_one_node = single_node_route(runtime, plan, batch_rows=30)
    assert set(on_spark["prediction"].dropna()) == {"EWR", "JFK", "LGA"}  # all three classes predicted somewhere
    want = chain.predict(source.sort_values("flight_id", ignore_index=True))
    assert on_spark["prediction"].tolist() == want["prediction"].tolist()
    pd.testing.assert_frame_equal(on_spark, on_one_node, check_exact=False, rtol=1e-9, atol=1e-12)
