"""The demo tables: one feature row per lookup key, so the demo's lookups are never refused."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import yaml

from lakescore.demo_data import FLIGHTS, INCOMING, PLANES, WEATHER, without_feature_lookups
from lakescore.lookup import FeatureLookup, join_features

REPO = Path(__file__).resolve().parents[1]


def test_weather_has_one_row_per_origin_and_utc_hour_across_the_dst_fall_back(demo_tables) -> None:
    weather = demo_tables[WEATHER]
    assert str(weather["time_hour"].dtype) == "datetime64[ns, UTC]"
    assert not weather.duplicated(["origin", "time_hour"]).any()
    # 3 Nov 2013 01:00 local happens twice (EDT, then EST): two rows per origin, two UTC instants
    fall_back = weather[(weather["month"] == 11) & (weather["day"] == 3) & (weather["hour"] == 1)]
    assert len(fall_back) == 6
    assert sorted(fall_back.loc[fall_back["origin"] == "JFK", "time_hour"]) == [
        pd.Timestamp("2013-11-03 05:00", tz="UTC"), pd.Timestamp("2013-11-03 06:00", tz="UTC")]


def test_planes_has_one_row_per_tailnum_and_some_flights_have_none(demo_tables) -> None:
    planes, flights = demo_tables[PLANES], demo_tables[FLIGHTS]
    assert planes["tailnum"].notna().all() and not planes["tailnum"].duplicated().any()
    missing = ~flights["tailnum"].isin(set(planes["tailnum"]))
    assert missing.sum() == 52_606 and flights["tailnum"].isna().sum() == 2_512  # as the module docstring says
    assert (~demo_tables[INCOMING]["tailnum"].isin(set(planes["tailnum"]))).sum() == 12_656


def test_both_demo_lookups_join_every_flight_once(demo_tables) -> None:
    flights = demo_tables[FLIGHTS].iloc[::400].reset_index(drop=True)
    weather = FeatureLookup("main.flights.weather", ("origin",), ("temp",), timestamp_lookup_key="time_hour")
    planes = FeatureLookup("main.flights.planes", ("tailnum",), ("year", "seats"), (("year", "plane_year"),))
    joined = join_features(join_features(flights, demo_tables[WEATHER], weather), demo_tables[PLANES], planes)
    assert len(joined) == len(flights) and joined["flight_id"].tolist() == flights["flight_id"].tolist()
    first = joined.iloc[0]  # flight 1: UA 1545 N14228 from EWR, 2013-01-01 10:00Z; weather EWR 05:00 local
    assert (first["tailnum"], first["temp"], first["plane_year"], first["seats"]) == ("N14228", 39.02, 1999.0, 149.0)
    no_plane = ~flights["tailnum"].isin(set(demo_tables[PLANES]["tailnum"]))
    assert joined.loc[no_plane, "seats"].isna().all() and joined.loc[~no_plane, "seats"].notna().all()


def test_the_demo_recipe_without_its_lookups_drops_their_columns_and_emptied_steps() -> None:
    training = yaml.safe_load((REPO / "config" / "training.yml").read_text())
    joined = {"temp", "wind_speed", "precip", "visib", "plane_year", "seats", "engines"}
    training["preprocessing"].append({"step": "custom", "name": "no_columns", "ref": "x:y"})
    before = copy.deepcopy(training)
    plain = without_feature_lookups(training)
    assert training == before  # the input is not changed
    assert "feature_lookups" not in plain and joined <= set(before["data"]["feature_columns"])
    assert not joined & set(plain["data"]["feature_columns"])
    names = [step["name"] for step in plain["preprocessing"]]
    assert "impute_weather" not in names and "impute_plane" not in names  # left with no column
    assert "no_columns" in names  # a step that names no columns stays
    scale = next(step for step in plain["preprocessing"] if step["name"] == "scale_numeric")
    assert scale["columns"] == ["hour", "dep_delay", "distance"]
