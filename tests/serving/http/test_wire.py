"""Request parsing and reply encoding (no server)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from lakescore.errors import RequestError
from lakescore.serving.http.wire import dumps, forwarded, parse_request, scored_rows

COLUMNS = {"month": "long", "dep_delay": "double", "carrier": "string"}


def parse(body: object, **limits: int) -> object:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_request(raw, COLUMNS, max_body_bytes=limits.get("max_body_bytes", 10_000),
                         max_rows=limits.get("max_rows", 10))


def test_records_and_split_give_the_same_typed_frame() -> None:
    a = parse({"dataframe_records": [{"month": 10, "dep_delay": None, "carrier": "UA"},
                                     {"month": 11.0, "dep_delay": 3, "carrier": None}]})
    b = parse({"dataframe_split": {"columns": ["carrier", "month", "dep_delay"],
                                   "data": [["UA", 10, None], [None, 11, 3.0]]}})
    for request in (a, b):
        assert list(request.frame.columns) == ["month", "dep_delay", "carrier"]  # the model's order
        assert [str(t) for t in request.frame.dtypes] == ["Int64", "float64", "object"]
        assert request.frame["month"].tolist() == [10, 11]
        assert pd.isna(request.frame["dep_delay"][0]) and request.frame["dep_delay"][1] == 3.0
        assert request.frame["carrier"].tolist() == ["UA", None]
    assert json.loads(a.to_body()) == {"dataframe_split": {"columns": ["month", "dep_delay", "carrier"],
                                                           "data": [[10, None, "UA"], [11, 3.0, None]]}}


def test_a_null_whole_number_is_a_null_like_in_a_delta_table() -> None:
    """Issue 9: a null in a long column reaches the chain as pd.NA (Int64), as the batch routes
    read it, instead of a 400; 2**53 + 1 stays exact beside it."""
    request = parse({"dataframe_records": [{"month": None, "dep_delay": 1, "carrier": "UA"},
                                           {"month": 2**53 + 1, "dep_delay": 1, "carrier": "UA"}]})
    assert str(request.frame["month"].dtype) == "Int64"
    assert request.frame["month"].isna().tolist() == [True, False]
    assert request.frame["month"].iloc[1] == 9007199254740993
    assert json.loads(request.to_body())["dataframe_split"]["data"][0][0] is None



@pytest.mark.parametrize(("values", "kind"), [
    ([10, None, 2**63 - 1, -(2**63)], "long"), ([None, None], "long"), ([], "long"),
    ([True, None, False], "boolean"), ([None], "boolean"),
    ([10.0, None], "long"),  # not what a checked request holds: pd.array reads it
], ids=["whole_numbers", "all_null", "no_rows", "flags", "null_flag", "unchecked_float"])
def test_a_requests_whole_number_and_flag_columns_are_what_pd_array_makes_of_them(values, kind) -> None:
    from lakescore.serving.http.wire import ScoreRequest

    got = ScoreRequest({"c": values}, {"c": kind}).frame["c"].array
    pd.testing.assert_extension_array_equal(got, pd.array(values, dtype="Int64" if kind == "long" else "boolean"))


def test_a_whole_number_beyond_64_bits_in_an_unchecked_request_fails_as_pd_array_fails() -> None:
    from lakescore.serving.http.wire import ScoreRequest

    with pytest.raises(TypeError):
        _ = ScoreRequest({"c": [2**63]}, {"c": "long"}).frame


@pytest.mark.parametrize(("body", "status", "names"), [
    (b"{not json", 400, "not valid JSON"),
    ([1, 2], 400, "must be a JSON object"),
    ({"rows": []}, 400, "dataframe_records, dataframe_split"),
    ({"dataframe_records": []}, 400, "no rows"),
    ({"dataframe_records": [{"month": 1, "dep_delay": 1, "carrier": "UA", "tail": "N1"}]}, 400, "unknown column 'tail'"),
    ({"dataframe_records": [{"month": 1, "carrier": "UA"}]}, 400, "lacks column 'dep_delay'"),
    ({"dataframe_records": [{"month": "ten", "dep_delay": 1, "carrier": "UA"}]}, 400, "column 'month' needs a whole number or null"),
    ({"dataframe_records": [{"month": 1.5, "dep_delay": 1, "carrier": "UA"}]}, 400, "column 'month' needs a whole number or null"),
    ({"dataframe_records": [{"month": 1, "dep_delay": True, "carrier": "UA"}]}, 400, "column 'dep_delay' needs a finite number"),
    ({"dataframe_records": [{"month": 1, "dep_delay": 1, "carrier": 7}]}, 400, "column 'carrier' needs text"),
    ({"dataframe_records": [{"month": 1, "dep_delay": 1, "carrier": "UA"}] * 11}, 413, "max_rows_per_request"),
    ({"dataframe_records": [{"month": 1, "dep_delay": 1, "carrier": "UA"}], "model_version": "2"}, 400, "model_version"),
])
def test_bad_requests_name_the_column_or_limit(body: object, status: int, names: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse(body)
    assert caught.value.http_status == status
    assert names in str(caught.value)


def test_oversized_body_names_the_limit() -> None:
    body = json.dumps({"dataframe_records": [{"month": 1, "dep_delay": 1, "carrier": "x" * 2000}]}).encode()
    with pytest.raises(RequestError) as caught:
        parse(body, max_body_bytes=1024)
    assert caught.value.http_status == 413
    assert f"request body is {len(body):,} bytes; the limit is 1,024 (max_body_bytes" in str(caught.value)


def test_replies_carry_null_never_nan_or_na() -> None:
    scored = pd.DataFrame({
        "prediction": pd.array([1, pd.NA], dtype="Int64"),
        "probability": pd.array([0.25, pd.NA], dtype="Float64"),
        "scoring_status": pd.array(["predicted", "excluded"], dtype="string"),
        "exclusion_reason": pd.array([pd.NA, "ineligible:cancelled"], dtype="string"),
    })
    text = dumps({"predictions": scored_rows(scored, model_version=3, served="warm")}).decode()
    assert "NaN" not in text and "<NA>" not in text
    assert json.loads(text)["predictions"] == [
        {"prediction": 1, "probability": 0.25, "scoring_status": "predicted", "exclusion_reason": None,
         "model_version": 3, "served": "warm"},
        {"prediction": None, "probability": None, "scoring_status": "excluded",
         "exclusion_reason": "ineligible:cancelled", "model_version": 3, "served": "warm"},
    ]


def test_nan_in_a_numeric_column_is_missing_and_forwarded_as_null() -> None:
    """Python's json reads the NaN literal; orjson refuses it and the stdlib fallback reads it. A NaN
    in a double or long column is a missing value, exactly as null (issue 12)."""
    nan = parse(b'{"dataframe_records": [{"month": NaN, "dep_delay": NaN, "carrier": "UA"}]}')
    null = parse(b'{"dataframe_records": [{"month": null, "dep_delay": null, "carrier": "UA"}]}')
    assert nan.values == null.values == {"month": [None], "dep_delay": [None], "carrier": ["UA"]}
    assert nan.to_body() == b'{"dataframe_split":{"columns":["month","dep_delay","carrier"],"data":[[null,null,"UA"]]}}'


@pytest.mark.parametrize(("body", "names"), [
    (b'{"dataframe_records": [{"month": 1, "dep_delay": 1, "carrier": NaN}]}',
     "column 'carrier' needs text or null (string); got nan (NaN) in row 0"),
    (b'{"dataframe_split": {"columns": ["month", "dep_delay", "carrier"], "data": [[1, 2, "UA"], [1, Infinity, "UA"]]}}',
     "column 'dep_delay' needs a finite number or null (double); got inf (Infinity) in row 1"),
    (b'{"dataframe_records": [{"month": -Infinity, "dep_delay": 1, "carrier": "UA"}]}',
     "column 'month' needs a whole number or null (long); got -inf (Infinity) in row 0"),
    (b'{"dataframe_records": [{"month": 9223372036854775808, "dep_delay": 1, "carrier": "UA"}]}',
     "column 'month' needs a whole number within 64 bits or null (long); got 9223372036854775808"),
])
def test_nan_outside_numbers_infinity_and_huge_integers_are_refused(body: bytes, names: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse(body)
    assert caught.value.http_status == 400
    assert names in str(caught.value)


def test_split_with_a_repeated_column_is_refused() -> None:
    with pytest.raises(RequestError, match="distinct column names"):
        parse({"dataframe_split": {"columns": ["month", "month", "carrier"], "data": [[1, 2, "UA"]]}})


def test_parsing_gives_columns_without_importing_pandas() -> None:
    """The endpoint holds no model: checking a request must not import pandas or numpy."""
    code = ("import sys; from lakescore.serving.http.wire import parse_request; "
            "r = parse_request(b'{\"dataframe_records\": [{\"month\": 10.0, \"dep_delay\": 3, \"carrier\": \"UA\"}]}', "
            "{'month': 'long', 'dep_delay': 'double', 'carrier': 'string'}, max_body_bytes=1000, max_rows=1); "
            "print(r.values, 'pandas' in sys.modules, 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "{'month': [10], 'dep_delay': [3.0], 'carrier': ['UA']} False False"


def test_a_forwarded_body_is_read_back_without_checks_and_a_foreign_one_is_checked() -> None:
    request = parse({"dataframe_records": [{"month": 10, "dep_delay": None, "carrier": "UA"},
                                           {"month": 2**53 + 1, "dep_delay": 1.5, "carrier": None}]})
    back = forwarded(request.to_body(), COLUMNS)
    assert back.values == {"month": [10, 2**53 + 1], "dep_delay": [None, 1.5], "carrier": ["UA", None]}
    assert back.frame["month"].iloc[1] == 9007199254740993
    with pytest.raises(RequestError, match="lacks column 'tail'"):  # a candidate reading another column
        forwarded(request.to_body(), {**COLUMNS, "tail": "string"})


def test_dumps_writes_null_for_non_finite_floats() -> None:
    assert dumps({"a": float("nan"), "b": float("-inf"), "c": 0.1}) == b'{"a":null,"b":null,"c":0.1}'


LOOKUP_COLUMNS = {"dep_delay": "double", "tailnum": "key", "time_hour": "timestamp"}


def test_a_lookup_request_reads_keys_and_iso_times_as_utc_instants() -> None:
    body = {"dataframe_records": [
        {"dep_delay": 1, "tailnum": "N14228", "time_hour": "2013-10-01T05:00:00Z"},
        {"dep_delay": 2, "tailnum": 2119.0, "time_hour": "2013-10-01 07:30:00-02:00"},  # 09:30 UTC
        {"dep_delay": 3, "tailnum": None, "time_hour": "2013-10-01T05:00:00"}]}  # no offset: UTC
    request = parse_request(json.dumps(body).encode(), LOOKUP_COLUMNS, max_body_bytes=10_000, max_rows=10)
    assert request.values["tailnum"] == ["N14228", 2119, None]
    assert request.values["time_hour"] == ["2013-10-01T05:00:00+00:00", "2013-10-01T09:30:00+00:00",
                                           "2013-10-01T05:00:00+00:00"]
    again = forwarded(request.to_body(), LOOKUP_COLUMNS).frame  # what a replica builds
    assert str(again["time_hour"].dtype) == "datetime64[ns, UTC]"
    assert again["time_hour"].tolist() == [pd.Timestamp("2013-10-01 05:00", tz="UTC"),
                                           pd.Timestamp("2013-10-01 09:30", tz="UTC"),
                                           pd.Timestamp("2013-10-01 05:00", tz="UTC")]
    assert again["tailnum"].tolist() == ["N14228", 2119, None]


@pytest.mark.parametrize("when", [None, "yesterday", 1380603600, "2013-13-01T00:00:00"])
def test_a_point_in_time_request_without_a_readable_time_is_refused_naming_row_and_column(when: object) -> None:
    body = {"dataframe_records": [{"dep_delay": 1, "tailnum": "N1", "time_hour": "2013-10-01T05:00:00Z"},
                                  {"dep_delay": 1, "tailnum": "N1", "time_hour": when}]}
    with pytest.raises(RequestError, match=r"column 'time_hour' needs an ISO 8601 timestamp .* in row 1") as err:
        parse_request(json.dumps(body).encode(), LOOKUP_COLUMNS, max_body_bytes=10_000, max_rows=10)
    assert err.value.http_status == 400


def test_a_lookup_key_is_text_or_a_whole_number() -> None:
    body = {"dataframe_records": [{"dep_delay": 1, "tailnum": ["N1"], "time_hour": "2013-10-01T05:00:00Z"}]}
    with pytest.raises(RequestError, match=r"column 'tailnum' needs text, a whole number or null \(key\); "
                                           r"got \['N1'\] \(a list\) in row 0"):
        parse_request(json.dumps(body).encode(), LOOKUP_COLUMNS, max_body_bytes=10_000, max_rows=10)
