"""Input conformance: each column to its signature type, a value of the wrong kind marks its row."""

from decimal import Decimal

import numpy as np
import pandas as pd

from lakescore.conform import conform_inputs

BIG = 2**53 + 1


def test_integers_stay_exact_and_nullable_on_every_input_form():
    frame = pd.DataFrame({
        "from_int64": np.array([BIG, 2, 3], dtype="int64"),
        "from_Int64": pd.array([BIG, None, 3], dtype="Int64"),
        "from_float": [4.0, np.nan, 6.0],          # a single-node read of an integer column with a null
        "from_json": pd.Series([BIG, None, 7.0], dtype=object),
    })
    out, reasons = conform_inputs(frame, {c: "long" for c in frame.columns})
    assert all(out[c].dtype == "Int64" for c in frame.columns)
    assert out["from_int64"].tolist() == [9007199254740993, 2, 3]
    assert out["from_Int64"].iloc[0] == 9007199254740993 and out["from_Int64"].isna().tolist() == [False, True, False]
    assert out["from_float"].tolist()[::2] == [4, 6] and out["from_float"].isna().tolist() == [False, True, False]
    assert out["from_json"].iloc[0] == 9007199254740993 and out["from_json"].iloc[2] == 7
    assert reasons.tolist() == [None, None, None]  # a null is a value the recipe may impute


def test_whole_decimals_from_spark_4_1_become_exact_integers_and_others_are_invalid():
    # Spark 4.1 (Databricks Runtime 18 LTS) hands bigint inputs over as decimal(19,0) values
    column = pd.Series([Decimal(BIG), None, Decimal("-9223372036854775808"), Decimal("1.5"),
                        Decimal(2**63), Decimal("NaN"), Decimal("7.000")], dtype=object)
    out, reasons = conform_inputs(pd.DataFrame({"n": column}), {"n": "long"})
    assert out["n"].dtype == "Int64"
    assert out["n"].tolist()[:3] == [9007199254740993, pd.NA, -9223372036854775808] and out["n"].iloc[6] == 7
    assert reasons.tolist() == [None, None, None, "invalid:n", "invalid:n", "invalid:n", None]


def test_a_value_of_the_wrong_kind_names_the_first_bad_column_of_its_row():
    frame = pd.DataFrame({
        "n": pd.Series([1, "seven", 6.5, True, 2], dtype=object),
        "x": pd.Series([1.5, 2, "late", None, 3], dtype=object),
        "s": pd.Series(["a", "b", None, "c", 17], dtype=object),
        "b": pd.Series([True, None, False, "yes", False], dtype=object),
        "t": pd.Series(["2013-01-01 05:00", None, "x", "2013-02-01", "2013-03-01"], dtype=object),
    })
    out, reasons = conform_inputs(frame, {"n": "long", "x": "double", "s": "string", "b": "boolean", "t": "datetime"})
    assert reasons.tolist() == [None, "invalid:n", "invalid:n", "invalid:n", "invalid:s"]
    assert out["x"].dtype == "float64" and out["x"].tolist()[:2] == [1.5, 2.0] and np.isnan(out["x"].iloc[2])
    assert out["s"].tolist() == ["a", "b", None, "c", None]
    assert out["b"].dtype == "boolean" and out["b"].isna().tolist() == [False, True, False, True, False]
    assert out["t"].iloc[0] == pd.Timestamp("2013-01-01 05:00") and out["t"].isna().tolist()[1:3] == [True, True]
    # each column alone: every bad value is found, not only the first of its row
    _, only_b = conform_inputs(frame, {"b": "boolean"})
    assert only_b.tolist() == [None, None, None, "invalid:b", None]
    _, only_t = conform_inputs(frame, {"t": "datetime"})
    assert only_t.tolist() == [None, None, "invalid:t", None, None]


def test_undeclared_and_absent_columns_are_left_alone():
    frame = pd.DataFrame({"free": ["anything", 1]})
    out, reasons = conform_inputs(frame, {"absent": "long", "free": "binary"})
    assert out["free"].tolist() == ["anything", 1] and reasons.tolist() == [None, None]


def test_the_vectorised_paths_give_what_the_row_by_row_rules_give():
    floats = pd.Series([1.0, np.nan, 1.5, 2.0**53, np.inf, 1e20, -3.0])
    text = pd.Series(["a", None, np.nan, pd.NA, "b", np.float32("nan")], dtype=object)
    typed = pd.Series(["a", None, "c"], dtype="string")
    out, reasons = conform_inputs(pd.DataFrame({"i": floats}), {"i": "long"})
    assert out["i"].dtype == "Int64"
    assert out["i"].tolist()[:1] + out["i"].tolist()[3:4] + out["i"].tolist()[6:] == [1, 2**53, -3]
    assert reasons.tolist() == [None, None, "invalid:i", None, "invalid:i", "invalid:i", None]
    for column in (text, typed):
        out, reasons = conform_inputs(pd.DataFrame({"t": column}), {"t": "string"})
        assert out["t"].dtype == object and reasons.tolist() == [None] * len(column)
        assert out["t"].tolist() == [v if isinstance(v, str) else None for v in column.tolist()]
    mixed = pd.Series(["a", 5, None, np.float32("nan")], dtype=object)  # a number in a text column: its row only
    out, reasons = conform_inputs(pd.DataFrame({"t": mixed}), {"t": "string"})
    assert out["t"].tolist() == ["a", None, None, None] and reasons.tolist() == [None, "invalid:t", None, None]


def test_a_text_column_without_a_missing_value_is_handed_on_as_it_is():
    text = pd.Series(["JFK", "LGA", "EWR"], dtype=object)
    frame = pd.DataFrame({"origin": text, "dest": pd.Series(["a", "b", "c"], dtype="string")})
    out, reasons = conform_inputs(frame, {"origin": "string", "dest": "string"})
    assert np.shares_memory(out["origin"].to_numpy(), frame["origin"].to_numpy())  # not copied
    assert out["dest"].dtype == object and out["dest"].tolist() == ["a", "b", "c"]
    assert reasons.tolist() == [None] * 3


CHAIN_TYPES = pd.DataFrame({  # each column already what the chain takes for its kind
    "n": pd.array([BIG, None], dtype="Int64"), "x": [1.5, np.nan], "s": np.array(["a", "b"], dtype=object),
    "b": pd.array([True, None], dtype="boolean"), "t": pd.to_datetime(["2013-01-01", None]),
    "tz": pd.to_datetime(["2013-01-01", None]).tz_localize("UTC"),
})
KINDS = {"n": "long", "x": "double", "s": "string", "b": "boolean", "t": "datetime", "tz": "datetime"}


def test_a_frame_already_of_the_chains_types_is_handed_on_as_it_is():
    out, reasons = conform_inputs(CHAIN_TYPES, KINDS)
    assert out is CHAIN_TYPES and reasons.tolist() == [None, None]


def test_a_column_that_is_not_yet_the_chains_type_is_converted_and_the_rest_kept_as_they_are():
    for name, other in {"n": np.array([1, 2]), "x": pd.array([1.5, None], dtype="Float64"),
                        "s": np.array(["a", None], dtype=object), "b": np.array([True, None], dtype=object),
                        "t": np.array(["2013-01-01", None], dtype=object)}.items():
        frame = CHAIN_TYPES.assign(**{name: other})
        out, reasons = conform_inputs(frame, KINDS)
        assert out is not frame and reasons.tolist() == [None, None]
        assert out[name].dtype == CHAIN_TYPES[name].dtype, name
        assert out[name].isna().tolist() == pd.Series(other).isna().tolist(), name
        for kept in set(KINDS) - {name}:
            assert out[kept].equals(frame[kept]) and out[kept].dtype == frame[kept].dtype, kept
    assert frame["t"].dtype == object  # the caller's frame is not changed
