"""Feature generations without the backend's feature holder: a version without lookups joins
nothing (no table in the status, none for the cold path, and the backend is never asked), and a
lookup version refused without a feature reader names the tables and the fix. Reading, installing
and switching generations through the real backend is tested in test_serving_lookup.py."""

from __future__ import annotations

import asyncio

import pytest
from serving_fakes import FakeBackend

from lakescore.errors import ServingError
from lakescore.serving.replicas.feature_generations import FeatureGenerations
from lakescore.serving.state.store import ServingState

WEATHER = {"table_name": "main.f.weather", "lookup_key": "origin", "feature_names": ["temp_c"]}
PLANES = {"table_name": "main.f.planes", "lookup_key": "tail_number", "feature_names": ["seats"]}


def generations(tmp_path, lookups: dict) -> FeatureGenerations:  # type: ignore[no-untyped-def, type-arg]
    return FeatureGenerations(endpoint="ep", model_name="main.s.m", uri=lambda v: f"models:/main.s.m/{v}",
                              backend=FakeBackend(), state=ServingState(tmp_path), lookups=lookups)


def test_a_version_without_lookups_joins_nothing(tmp_path) -> None:
    held = generations(tmp_path, {1: ()})  # the fake backend has no feature methods: none may be called
    assert asyncio.run(held.specs(1)) == () and not held.joins(1) and not held.joins(7)
    assert held.tables(1) is None and held.current(1) is None
    assert held.status(1, None) == {} and asyncio.run(held.cold(1)) is None
    asyncio.run(held.ensure(1))
    assert held.lookups == {1: ()}


def test_a_lookup_version_without_a_feature_reader_is_refused_naming_its_tables(tmp_path) -> None:
    held = generations(tmp_path, {2: (WEATHER, PLANES)})
    assert held.joins(2) and not held.joins(1)
    with pytest.raises(ServingError) as caught:
        asyncio.run(held.load(2, asyncio.run(held.specs(2))))
    assert str(caught.value) == ("v2 of main.s.m joins feature lookups (main.f.weather, main.f.planes) and endpoint "
                                 "ep was started without a feature reader; start it with lakescore serve")
    assert asyncio.run(held.cold(2)) is None  # no reader: the cold path reads no feature table either
