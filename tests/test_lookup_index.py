"""The indexed lookup (what a replica joins requests with) against the merge join of every batch route
(:func:`lakescore.lookup.join_features`): the same frame, value for value and dtype for dtype, on many
keys, missing and null keys, repeated rows, exact times, times before and after every feature row,
key casts, and the same refusal where the merge join refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from lakescore.errors import FeatureLookupError
from lakescore.lookup import FeatureLookup, join_features
from lakescore.lookup_index import LookupIndex

RNG_SEED = 7
T0 = pd.Timestamp("2013-01-01 00:00", tz="UTC")


def outcome(join: Any, frame: pd.DataFrame) -> tuple[str, Any]:
    """("frame", the joined frame) or ("error", (type, message))."""
    try:
        return "frame", join(frame)
    except (FeatureLookupError, TypeError, ValueError, KeyError) as err:
        return "error", (type(err), str(err))


def assert_same_join(frame: pd.DataFrame, features: pd.DataFrame, spec: FeatureLookup, *,
                     indexed: bool = True) -> pd.DataFrame | None:
    """The index's join equals join_features' (frame or refusal); with ``indexed`` the index answered
    itself rather than handing the rows to join_features."""
    index = LookupIndex(features, spec)
    assert index.covers(frame) is indexed
    kind, got = outcome(index.join, frame)
    want_kind, want = outcome(lambda f: join_features(f, features, spec), frame)
    assert kind == want_kind, (got, want)
    if kind == "error":
        assert got == want
        return None
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes)
    outputs = got.iloc[:, frame.shape[1]:]
    pd.testing.assert_frame_equal(index.outputs(frame), outputs, check_exact=True)
    return got


def planes(n: int = 400) -> pd.DataFrame:
    """``n`` planes with unique tailnums, a null tailnum row (never joined), int, nullable int, float,
    text and bool features."""
    rng = np.random.default_rng(RNG_SEED)
    return pd.DataFrame({
        "tailnum": [f"N{i:04d}" for i in range(n - 1)] + [None],
        "year": rng.integers(1960, 2013, n),                               # int64: float64 once joined
        "seats": pd.array(rng.integers(2, 400, n), dtype="Int64"),         # nullable: float64 once joined
        "speed": rng.normal(400, 50, n),
        "model": [f"M{i % 17}" for i in range(n)],
        "jet": rng.integers(0, 2, n).astype(bool),
    }).astype({"seats": "Int64"}).assign(seats=lambda d: d["seats"].mask(d.index % 11 == 0))


PLANES = FeatureLookup("main.flights.planes", ("tailnum",), ("year", "seats", "speed"), (("year", "plane_year"),))
PLANES_ALL = FeatureLookup("main.flights.planes", ("tailnum",), ("year", "seats", "speed", "model", "jet"))


def flights(n: int, keys: list[Any], rng: np.random.Generator) -> pd.DataFrame:
    """``n`` rows whose tailnum is drawn from ``keys`` (repeats included), on a shuffled index with
    repeated labels."""
    index = rng.permutation(n) // 2  # every label twice
    return pd.DataFrame({"tailnum": pd.Series([keys[i] for i in rng.integers(0, len(keys), n)], dtype=object).values,
                         "dep_delay": rng.normal(0, 20, n)}, index=index)


def test_an_exact_lookup_equals_the_merge_join_on_many_keys_missing_and_null_ones_included() -> None:
    rng = np.random.default_rng(RNG_SEED)
    table = planes()
    keys = [*table["tailnum"].dropna()[::3], "NOPLANE", "n0001", "", None, np.nan]  # unknown, case, empty, nulls
    rows = flights(3000, keys, rng)
    for spec in (PLANES, PLANES_ALL):
        got = assert_same_join(rows, table, spec)
        assert got is not None and got.iloc[:, 2:].isna().all(axis=1).any() and got.iloc[:, 2:].notna().all(axis=1).any()
    one = rows.iloc[[0]]  # a served request: one row
    assert_same_join(one, table, PLANES)
    assert_same_join(rows.iloc[:0], table, PLANES)  # no row at all


def test_a_fast_lookup_that_took_the_wrong_row_is_told_apart() -> None:
    # the comparison itself: a join one feature row off fails it
    table = planes()
    rows = flights(50, list(table["tailnum"].dropna()), np.random.default_rng(RNG_SEED))
    index = LookupIndex(table, PLANES)
    wrong = index.join(rows).assign(speed=lambda d: d["speed"].shift(1))
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(wrong, join_features(rows, table, PLANES), check_exact=True)


def test_two_keys_match_only_together_and_casts_follow_the_rows_dtypes() -> None:
    rng = np.random.default_rng(RNG_SEED)
    table = pd.DataFrame({"carrier": ["UA", "UA", "AA", "AA", "DL", None], "flight": [1, 2, 1, 3, 2, 1],
                          "load": [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]})
    spec = FeatureLookup("main.flights.loads", ("carrier", "flight"), ("load",))
    carriers = pd.Series(["UA", "AA", "DL", "B6", None], dtype=object)
    combos = pd.DataFrame({"carrier": carriers.iloc[rng.integers(0, 5, 500)].to_numpy(),
                           "flight": rng.integers(0, 5, 500)})  # UA 3 and DL 1: each key exists, not together
    got = assert_same_join(combos, table, spec)
    assert got is not None and np.isnan(got.loc[(got["carrier"] == "DL") & (got["flight"] == 1), "load"]).all()
    assert_same_join(combos.astype({"flight": "Int64"}).assign(  # a nullable key: the table's cast to it
        flight=lambda d: d["flight"].mask(d.index % 7 == 0)), table, spec)
    assert_same_join(combos.astype({"flight": "float64"}), table, spec)
    texts = combos.assign(flight=combos["flight"].astype(str).astype(object))  # text "1" never equals 1
    assert_same_join(texts, table, spec)


def weather(rng: np.random.Generator, *, utc: bool = True) -> pd.DataFrame:
    """Hourly rows of three origins, a few hours missing, shuffled, with a null origin and a null time."""
    hours = pd.date_range(T0, periods=200, freq="h")
    frames = [pd.DataFrame({"origin": origin, "time_hour": hours[rng.random(200) > 0.2]}) for origin in ("EWR", "JFK", "LGA")]
    table = pd.concat(frames, ignore_index=True)
    table = pd.concat([table, pd.DataFrame({"origin": [None, "EWR"], "time_hour": [hours[3], pd.NaT]})],
                      ignore_index=True)
    table = table.assign(temp=rng.normal(40, 10, len(table)), visib=rng.integers(0, 11, len(table)))
    table = table.iloc[rng.permutation(len(table))].reset_index(drop=True)
    return table if utc else table.assign(time_hour=table["time_hour"].dt.tz_localize(None))


WEATHER = FeatureLookup("main.flights.weather", ("origin",), ("temp", "visib"), (("temp", "origin_temp"),),
                        timestamp_lookup_key="time_hour")


def requests(table: pd.DataFrame, rng: np.random.Generator, n: int = 3000) -> pd.DataFrame:
    """Rows at feature times exactly, between them, before the first and after the last, with unknown
    and null origins and null times."""
    times = table["time_hour"].dropna()
    exact = times.iloc[rng.integers(0, len(times), n // 2)].to_numpy()
    between = (times.min() + pd.to_timedelta(rng.integers(-300, 230 * 60, n - n // 2), unit="min")).to_numpy()
    when = pd.Series(np.concatenate([exact, between]))
    when[rng.random(n) < 0.02] = pd.NaT
    origin = pd.Series(np.array(["EWR", "JFK", "LGA", "SFO", None], dtype=object)[rng.integers(0, 5, n)])
    return pd.DataFrame({"origin": origin.to_numpy(), "time_hour": when.to_numpy(), "dep_delay": rng.normal(0, 9, n)},
                        index=rng.permutation(n))


def test_a_point_in_time_lookup_equals_merge_asof_at_exact_times_between_them_and_outside_them() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for utc in (True, False):
        table = weather(rng, utc=utc)
        rows = requests(table, rng)  # times of the table's kind (aware or naive)
        got = assert_same_join(rows, table, WEATHER)
        assert got is not None
        exact = rows["time_hour"].isin(table["time_hour"]) & rows["origin"].isin(["EWR", "JFK", "LGA"])
        assert got.loc[exact.to_numpy(), "origin_temp"].notna().mean() > 0.5  # exact times find their own row
        assert got["origin_temp"].isna().any()
        for i in (0, 1, 2):
            assert_same_join(rows.iloc[[i]], table, WEATHER)  # one-row requests
        # a finer unit in the table (Delta reads microseconds): converted once, the same answer
        assert_same_join(rows, table.astype({"time_hour": table["time_hour"].dtype.name.replace("ns", "us")}), WEATHER)


def test_numeric_times_and_two_keys_point_in_time() -> None:
    rng = np.random.default_rng(RNG_SEED)
    table = pd.DataFrame({"origin": np.array(["EWR", "JFK"], dtype=object)[rng.integers(0, 2, 600)],
                          "dest": np.array(["ORD", "LAX", "MIA"], dtype=object)[rng.integers(0, 3, 600)],
                          "t": rng.permutation(600).astype("float64"), "gate": rng.integers(1, 40, 600)})
    spec = FeatureLookup("main.flights.gates", ("origin", "dest"), ("gate",), timestamp_lookup_key="at",
                         feature_timestamp_key="t")
    rows = pd.DataFrame({"origin": np.array(["EWR", "JFK", "SFO"], dtype=object)[rng.integers(0, 3, 900)],
                         "dest": np.array(["ORD", "LAX", "MIA", "SEA"], dtype=object)[rng.integers(0, 4, 900)],
                         "at": rng.integers(-5, 610, 900)})
    assert_same_join(rows, table, spec)
    assert_same_join(rows.astype({"at": "float64"}).assign(at=lambda d: d["at"] + 0.5), table, spec)


def test_what_the_merge_join_refuses_the_index_refuses_with_the_same_message() -> None:
    rng = np.random.default_rng(RNG_SEED)
    table = planes()
    rows = flights(20, list(table["tailnum"].dropna()), rng)
    twice = pd.concat([table, table.iloc[[5]]], ignore_index=True)
    assert_same_join(rows, twice, PLANES, indexed=False)  # duplicate keys
    assert_same_join(rows.drop(columns="tailnum"), table, PLANES, indexed=False)  # the rows lack the key
    assert_same_join(rows.assign(plane_year=1.0), table, PLANES, indexed=False)  # an output already there
    assert_same_join(rows, table.drop(columns="speed"), PLANES, indexed=False)  # the table lacks a feature
    table_w = weather(rng)
    aware_rows = requests(table_w, rng, 50)
    assert str(aware_rows["time_hour"].dtype) == "datetime64[ns, UTC]"
    naive_rows = aware_rows.assign(time_hour=aware_rows["time_hour"].dt.tz_localize(None))
    assert_same_join(naive_rows, table_w, WEATHER, indexed=False)  # naive times against an aware table
    numbers = aware_rows.assign(time_hour=np.arange(50.0))  # numbers against times
    assert_same_join(numbers, table_w, WEATHER, indexed=False)
    duplicate_time = pd.concat([table_w, table_w.dropna().iloc[[0]]], ignore_index=True)
    assert_same_join(aware_rows, duplicate_time, WEATHER, indexed=False)
    assert_same_join(aware_rows, table_w, WEATHER)  # and the same rows against the table as it is: indexed


def test_keys_a_cast_makes_equal_are_left_to_the_merge_join() -> None:
    # the table's float keys 1.0 and 1.5 both become 1 as the rows' int64: the index does not guess
    table = pd.DataFrame({"k": [1.0, 1.5, 2.0], "x": [10.0, 15.0, 20.0]})
    spec = FeatureLookup("main.t.x", ("k",), ("x",))
    assert_same_join(pd.DataFrame({"k": [1, 2, 3]}), table, spec, indexed=False)
    assert_same_join(pd.DataFrame({"k": [1.0, 2.0, 1.5, np.nan]}), table, spec)  # same dtype: indexed


def test_an_empty_feature_table_joins_nothing() -> None:
    table = planes().iloc[:0]
    rows = flights(30, ["N0001", None], np.random.default_rng(RNG_SEED))
    assert_same_join(rows, table, PLANES)
    assert_same_join(rows, table, PLANES_ALL)


def test_the_times_of_rows_with_a_null_key_are_never_read() -> None:
    # as the merge join drops them first: a null-key row's time without a zone does not make the
    # column "mixed", and the index answers these rows itself
    rng = np.random.default_rng(RNG_SEED)
    table = weather(rng)
    rows = pd.DataFrame({"origin": ["EWR", None, "JFK"],
                         "time_hour": ["2013-01-02T05:00:00Z", "2013-01-02T05:00:00", "2013-01-03T07:30:00Z"]})
    got = assert_same_join(rows, table, WEATHER)
    assert got is not None and got["origin_temp"].notna().tolist() == [True, False, True]


def test_requests_of_a_few_rows_find_what_the_merge_join_finds() -> None:
    # a few rows of text keys are coded from a dict; anything else (a number, a null, a text
    # subclass, a key table that is not all text) from the Index
    rng = np.random.default_rng(RNG_SEED)
    table = planes()
    keys = [*table["tailnum"].dropna()[::5], "NOPLANE", "n0001", None, np.nan, 7, np.str_("N0003")]
    rows = flights(400, keys, rng)
    for start, size in ((0, 1), (1, 2), (3, 17), (20, 64), (84, 65)):
        assert_same_join(rows.iloc[start:start + size], table, PLANES)
    texts_only = rows[[type(v) is str for v in rows["tailnum"]]]
    assert_same_join(texts_only.iloc[:10], table, PLANES)
    mixed = table.assign(tailnum=[i if i % 9 == 1 else v for i, v in enumerate(table["tailnum"])])  # ints among texts
    assert mixed["tailnum"].dtype == object
    few = rows.iloc[:30].assign(tailnum=[10 if i % 3 == 0 else v for i, v in enumerate(rows["tailnum"].iloc[:30])])
    assert_same_join(few, mixed, PLANES)
    one_origin = weather(rng)
    timed = requests(one_origin, rng, 40)
    for i in range(0, 40, 3):
        assert_same_join(timed.iloc[i:i + 3], one_origin, WEATHER)
