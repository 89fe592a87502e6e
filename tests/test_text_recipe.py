"""A text recipe end to end: tfidf over "carrier origin dest tailnum", then LogisticRegression or
XGBClassifier (both sealed ``model_input: sparse``), trained, admitted, registered in a temporary
MLflow, then scored on the single-node route, the Spark route (mlflow.pyfunc.spark_udf) and a warm
endpoint on 127.0.0.1: the same labels everywhere, row for row, including rows whose text is
missing and tail numbers training never saw."""

import shutil

import mlflow
import numpy as np
import pandas as pd
import pytest
from fixtures.runs import as_pandas
from serving.serving_helpers import MODEL, REPO, expected_rows, launch, ready_replicas, records

from lakescore.admission.evidence import admit
from lakescore.frames import derive_label
from lakescore.packaging import log_and_register
from lakescore.scoring.local import score_single_node
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.spark import score_spark
from lakescore.training import ChainRecipe, fit_chain

pytestmark = [pytest.mark.spark, pytest.mark.long]

SOURCE = "main.t.text_source"
RECIPE = [{"step": "tfidf_vectorizer", "name": "route_words", "columns": ["route"], "ngram_range": [1, 2],
           "min_df": 2, "sublinear_tf": True}]
MODELS = {"LogisticRegression": {"max_iter": 500}, "XGBClassifier": {"n_estimators": 40, "max_depth": 4}}


def with_route(flights: pd.DataFrame) -> pd.DataFrame:
    text = flights[["carrier", "origin", "dest", "tailnum"]].astype("string").fillna("").agg(" ".join, axis=1)
    return flights.assign(route=text)


@pytest.mark.parametrize("model_class", list(MODELS))
def test_a_text_recipe_scores_the_same_labels_on_every_route(model_class, spark_runtime, flights_sample, tmp_path):
    runtime = spark_runtime
    frame = with_route(flights_sample)
    # 500 training rows: a ~250-word vocabulary (1,500 rows make ~650 columns, and every probe check
    # compares every column); the 500 holdout rows are scored on every route
    train, holdout = frame.iloc[:500], frame.iloc[1500:].reset_index(drop=True)
    chain = fit_chain(train, derive_label(train, column="is_late", expression="arr_delay > 15"),
                      ChainRecipe(steps=RECIPE, model_class=model_class, model_params=MODELS[model_class],
                                  feature_columns=["route"]))
    assert chain.model_input == "sparse" and len(chain.feature_columns) > 100
    runtime.mlflow()
    with mlflow.start_run():
        # admitted on 64 holdout rows: here admission only seals the certificate every route
        # re-checks (its checks on text steps are tests/admission's); on 256 it is most of the test
        model = log_and_register(chain, example=train.head(5), name=MODEL, alias="champion",
                                 evidence=admit(chain, holdout.head(64)))

    source = holdout[["flight_id", "route"]].copy()
    source.loc[[3, 17], "route"] = None  # a missing text is an empty document on every route
    runtime.write_table(SOURCE, source)
    plan = ScorePlan(SOURCE, runtime.table_version(SOURCE), model.name, model.version, model.model_uri,
                     tuple(chain.input_columns), ("flight_id",), model.certificate.digest,
                     model.certificate.artifact_sha256)
    one_node = as_pandas(score_single_node(runtime.read_table(SOURCE, version=plan.source_version), plan,
                                           batch_rows=64))
    on_spark = as_pandas(score_spark(runtime.spark_source(SOURCE, version=plan.source_version), plan,
                                     batch_rows=64, env_manager="local"))
    want = chain.predict(source.sort_values("flight_id", ignore_index=True))
    assert set(want["prediction"].dropna()) == {0, 1}  # both labels occur: the comparison means something
    for scored in (one_node, on_spark):
        assert scored["prediction"].tolist() == want["prediction"].tolist()
        np.testing.assert_allclose(scored["probability"].to_numpy(dtype="float64"),
                                   want["probability"].to_numpy(dtype="float64"), rtol=1e-9, atol=1e-12)

    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    endpoint = launch(runtime.home, config, endpoint_name="text_route", replicas={"min": 1, "max": 1},
                      scale_interval_s=1)
    try:
        endpoint.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica")
        ordered = source.sort_values("flight_id", ignore_index=True)
        answers = []
        for start in (0, 1, 200):  # a batch of one row, a batch of 199, the rest
            stop = {0: 1, 1: 200, 200: len(ordered)}[start]
            response = endpoint.score(records(ordered.iloc[start:stop], chain.input_columns))
            assert response.status_code == 200, response.text
            assert response.headers["x-served-by"] == "warm"
            answers += response.json()["predictions"]
    finally:
        endpoint.stop()
    assert [a["prediction"] for a in answers] == [w["prediction"] for w in expected_rows(chain, ordered)]
