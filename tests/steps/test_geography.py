"""GeoDistance (haversine, km) and H3Index (optional h3 package)."""

import math
import sys

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract

from lakescore.errors import StepError
from lakescore.steps import learn_step, parse_params
from lakescore.steps.geography import H3Index


@pytest.mark.parametrize("raw", cases("GeoDistance", "H3Index"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def haversine(lat1, lon1, lat2, lon2, radius=6371.0088):
    """The textbook formula, one pair at a time with the math module."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * radius * math.asin(math.sqrt(h))


def test_geo_distance_by_hand():
    frame = pd.DataFrame({"lat1": [0.0, 40.6413, 91.0, None], "lon1": [0.0, -73.7781, 0.0, 0.0],
                          "lat2": [0.0, 33.9416, 0.0, 0.0], "lon2": [1.0, -118.4085, 0.0, 0.0]})
    fitted = learn_step({"step": "GeoDistance", "name": "km", "columns": ["lat1", "lon1", "lat2", "lon2"]},
                        frame, None)
    out = fitted.apply(frame)["distance_km"].to_numpy()
    # one degree of longitude on the equator: 2 pi R / 360 = 111.19508 km
    assert out[0] == pytest.approx(2 * math.pi * 6371.0088 / 360, rel=1e-12)
    assert out[1] == pytest.approx(haversine(40.6413, -73.7781, 33.9416, -118.4085), rel=1e-12)  # JFK-LAX
    assert round(out[1]) == 3974
    assert np.isnan(out[2]) and np.isnan(out[3])  # latitude out of range; missing


def test_geo_distance_takes_four_columns():
    with pytest.raises(StepError, match=r"GeoDistance takes 4 columns \[lat1, lon1, lat2, lon2\]"):
        parse_params({"step": "GeoDistance", "name": "km", "columns": ["a", "b", "c"]})


def test_h3_index_is_refused_with_an_install_hint_when_h3_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "h3", None)  # as if not installed: import h3 raises ImportError
    frame = pd.DataFrame({"lat": [40.6413], "lon": [-73.7781]})
    with pytest.raises(StepError) as err:
        learn_step({"step": "H3Index", "name": "cell", "columns": ["lat", "lon"], "resolution": 5}, frame, None)
    assert str(err.value) == ("step 'cell' (H3Index) needs the optional package h3, which is not installed; install "
                              "it: pip install 'lakescore[geo]' (or pip install 'h3>=4,<5')")
    # a step learned where h3 was present, scored where it is not: refused the same way
    kernel = H3Index.kernel({"columns": ["lat", "lon"], "resolution": 5, "output": "cell"})
    assert kernel is not None
    with pytest.raises(StepError, match="needs the optional package h3"):
        H3Index.apply(frame.copy(), {"columns": ["lat", "lon"], "resolution": 5, "output": "cell"})


def test_h3_index_settings_are_checked():
    with pytest.raises(StepError, match=r"resolution: Input should be less than or equal to 15"):
        parse_params({"step": "H3Index", "name": "cell", "columns": ["lat", "lon"], "resolution": 16})
    with pytest.raises(StepError, match=r"H3Index takes 2 columns \[lat, lon\]"):
        parse_params({"step": "H3Index", "name": "cell", "columns": ["lat"], "resolution": 5})


def test_h3_index_by_hand():
    pytest.importorskip("h3", reason="h3 is optional (pip install 'lakescore[geo]')")
    frame = pd.DataFrame({"lat": [40.6413, 0.0, None, 95.0], "lon": [-73.7781, 0.0, 1.0, 0.0]})
    fitted = learn_step({"step": "H3Index", "name": "cell", "columns": ["lat", "lon"], "resolution": 5}, frame, None)
    out = fitted.apply(frame)["lat_h3_5"]
    assert out.dtype == object
    # cells from the H3 reference (h3 4.x latlng_to_cell): JFK at resolution 5, null island
    assert out.tolist()[:2] == ["852a103bfffffff", "85754e67fffffff"] and out.tolist()[2:] == [None, None]
