"""The Spark route's code tables: every reason a chain gives is listed (in the order the module
documents), a value is encoded as its position, and a value missing from a table is refused."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from lakescore.errors import TransportCodeError
from lakescore.steps.base import learn_step
from lakescore.transport_codes import code_tables, encode, reason_table

ONE_HOT = ["carrier_9E", "carrier_AA", "carrier_AS", "carrier_B6", "carrier_DL", "carrier_EV", "carrier_F9",
           "carrier_FL", "carrier_MQ", "carrier_UA", "carrier_US", "carrier_VX", "carrier_WN",
           "origin_EWR", "origin_JFK", "origin_LGA"]


@pytest.fixture(scope="module")
def gated_chain(small_chain, flights_sample):
    """small_chain with a pre-split row filter re-applied as eligibility (``ineligible:need_delay``)."""
    need_delay = learn_step({"step": "DropMissingRows", "name": "need_delay", "columns": ["dep_delay"]},
                            flights_sample, None)
    return dataclasses.replace(small_chain, pre_split=(need_delay,), eligibility_mode="combined")


def test_the_reason_table_lists_rules_pre_split_steps_inputs_and_features_in_order(gated_chain):
    assert reason_table(gated_chain) == (
        "ineligible:cancelled", "ineligible:need_delay", "outlier:distance_outlier",
        "invalid:dep_delay", "invalid:distance", "invalid:hour", "invalid:carrier", "invalid:origin",
        "invalid:dep_time", *[f"invalid:{name}" for name in ONE_HOT])  # dep_delay.. once: inputs come first


def test_a_model_that_takes_nan_adds_no_feature_reasons(small_chain):
    from sklearn.ensemble import HistGradientBoostingClassifier

    takes_nan = dataclasses.replace(small_chain, model=HistGradientBoostingClassifier())
    assert reason_table(takes_nan)[-1] == "invalid:dep_time"
    assert len(reason_table(takes_nan)) == 8


def test_every_reason_the_chain_gives_is_encoded_as_its_position(gated_chain, flights_sample):
    rows = flights_sample.copy()
    rows.loc[0, ["dep_time", "dep_delay"]] = [900.0, np.nan]  # departed, no delay: the pre-split filter
    rows.loc[1, "distance"] = 90000.0  # far beyond the IQR fence
    scored = gated_chain.predict(rows)
    tables = code_tables(gated_chain)
    got = encode(scored, tables)
    reasons = scored["exclusion_reason"]
    assert {"ineligible:cancelled", "ineligible:need_delay", "outlier:distance_outlier"} <= set(reasons.dropna())
    assert got.loc[0, "exclusion_reason"] == 1 and got.loc[1, "exclusion_reason"] == 2
    assert got["exclusion_reason"].dtype == "Int64" and got["scoring_status"].dtype == "Int64"
    assert (got["exclusion_reason"].isna() == reasons.isna()).all()
    decoded = [None if pd.isna(c) else tables["exclusion_reason"][c] for c in got["exclusion_reason"]]
    assert decoded == [None if pd.isna(r) else r for r in reasons]
    assert (got["scoring_status"] == (scored["scoring_status"] == "excluded").astype(int)).all()
    pd.testing.assert_series_equal(got["probability"], scored["probability"])  # untabled: untouched


def test_text_classes_are_tabled_in_the_chains_class_order(small_chain):
    texts = dataclasses.replace(small_chain, classes=["late", "on time"])
    assert code_tables(texts)["prediction"] == ("late", "on time")
    frame = pd.DataFrame({"prediction": pd.array(["on time", None, "late"], dtype="string")})
    assert encode(frame, code_tables(texts))["prediction"].tolist() == [1, pd.NA, 0]
    assert "prediction" not in code_tables(small_chain)  # integer classes cross as bigint already


def test_a_reason_missing_from_the_table_is_refused_with_its_name(small_chain):
    scored = pd.DataFrame({"scoring_status": pd.array(["excluded", "excluded"], dtype="string"),
                           "exclusion_reason": pd.array(["ineligible:cancelled", "outlier:made_up"], dtype="string")})
    with pytest.raises(TransportCodeError, match=r"exclusion_reason value 'outlier:made_up' is not in this chain's "
                                                 r"code table for the Spark route \(24 values: ineligible:cancelled,") as err:
        encode(scored, code_tables(small_chain))
    assert err.value.code == "transport_code_unknown" and err.value.fields["value"] == "outlier:made_up"


def test_codes_decode_on_spark_to_the_tables_texts_however_they_are_written(route_spark):
    """The decode's literal array is SQL text: quotes, backslashes, SQL comment and variable marks
    and non-ASCII text come back as written, on classic Spark and Spark Connect."""
    from lakescore.transport_codes import decode_sql

    table = ("rule:it's", "rule:a \\ path", "rule:-- not a comment", "rule:${var}", "rule:déjà vu", 'rule:"x"')
    frame = route_spark.createDataFrame([(i, i) for i in range(len(table))], "row long, code long")
    decoded = frame.selectExpr("row", f"{decode_sql('code', table)} AS text").orderBy("row").collect()
    assert tuple(r["text"] for r in decoded) == table
    empty = frame.selectExpr(f"{decode_sql('`code`', ())} AS text").collect()
    assert {r["text"] for r in empty} == {None}
