"""Geography steps: GeoDistance (great-circle distance, km) and H3Index (the H3 cell of a point).

Both compute each row from its own coordinates (degrees) and learn nothing. A latitude outside
[-90, 90], a longitude outside [-180, 180], a missing or non-finite coordinate gives a missing
output. H3Index needs the optional ``h3`` package (``pip install 'lakescore[geo]'``); without it
the step is refused at training, and at scoring, with that install hint.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, register
from lakescore.steps.derived import NAME, _no_clash

EARTH_RADIUS_KM = 6371.0088
"""Mean Earth radius (IUGG, (2a + b) / 3 of WGS 84), the haversine's sphere."""
H3_INSTALL = "pip install 'lakescore[geo]' (or pip install 'h3>=4,<5')"


def valid_points(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """True per row where latitude and longitude (degrees, float64) are finite and in range."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(lat) & np.isfinite(lon) & (np.abs(lat) <= 90) & (np.abs(lon) <= 180)


def haversine_km(lat1: np.ndarray, lon1: np.ndarray, lat2: np.ndarray, lon2: np.ndarray) -> np.ndarray:
    """Float64 (n_rows,): great-circle distance in km between two points given in degrees, on a
    sphere of radius :data:`EARTH_RADIUS_KM`; NaN where a point is missing or out of range.

    ``2 R asin(sqrt(sin²(Δφ/2) + cos φ1 cos φ2 sin²(Δλ/2)))``, the argument of asin capped at 1.
    """
    ok = valid_points(lat1, lon1) & valid_points(lat2, lon2)
    with np.errstate(invalid="ignore"):
        p1, p2 = np.radians(lat1), np.radians(lat2)
        dp, dl = p2 - p1, np.radians(lon2) - np.radians(lon1)
        h = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
        km = 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.minimum(h, 1.0)))
    return np.where(ok, km, np.nan).astype("float64")


class GeoDistanceParams(StepParams):
    output: str = Field(default="distance_km", pattern=NAME)

    @model_validator(mode="after")
    def _four_columns(self) -> GeoDistanceParams:
        if len(self.columns) != 4:
            raise ValueError(f"GeoDistance takes 4 columns [lat1, lon1, lat2, lon2] in degrees; got {self.columns}")
        return self


@register
class GeoDistance(StepKind):
    """Add ``output`` (default ``distance_km``): the haversine distance in km between
    (``columns[0]``, ``columns[1]``) and (``columns[2]``, ``columns[3]``), latitudes and longitudes
    in degrees. Output: float64, NaN where a coordinate is missing or out of range.
    """

    kind = "GeoDistance"
    Params = GeoDistanceParams
    fixed = True

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """The one new column, ``output``."""
        return [params.output]

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        _no_clash(params.name, [params.output], frame)
        return {"output": params.output}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="GeoDistance")
        frame[state["output"]] = haversine_km(*(data[:, i] for i in range(4)))
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """The haversine distance of the batch's four coordinate columns, set as ``output``."""
        columns, output = list(state["columns"]), state["output"]

        def apply(batch: Columns) -> None:
            batch.set(output, haversine_km(*(batch.floats(c, step="GeoDistance") for c in columns)))

        return Kernel(apply)


def h3_module(step: str) -> Any:
    """The ``h3`` package (4.x), imported here: it is optional and only H3Index needs it.

    Raises
    ------
    StepError
        When it is not installed, with the install command.
    """
    try:
        import h3  # optional (lakescore[geo]): imported only by the step that needs it
    except ImportError as err:
        raise StepError(f"step '{step}' (H3Index) needs the optional package h3, which is not installed; "
                        f"install it: {H3_INSTALL}", step=step) from err
    if not hasattr(h3, "latlng_to_cell"):
        raise StepError(f"step '{step}' (H3Index) needs h3 4.x; h3 {getattr(h3, '__version__', '?')} is installed. "
                        f"Upgrade it: {H3_INSTALL}", step=step)
    return h3


def h3_cells(lat: np.ndarray, lon: np.ndarray, resolution: int, *, step: str) -> np.ndarray:
    """Object array (n_rows,): the H3 cell id (hex text) of each point at ``resolution``; None where
    the point is missing or out of range."""
    h3 = h3_module(step)
    ok = valid_points(lat, lon)
    out = np.empty(len(lat), dtype=object)
    out[:] = None
    for i in np.flatnonzero(ok):
        out[i] = h3.latlng_to_cell(float(lat[i]), float(lon[i]), resolution)
    return out


class H3Params(StepParams):
    resolution: int = Field(ge=0, le=15)
    output: str | None = Field(default=None, pattern=NAME)

    @model_validator(mode="after")
    def _two_columns(self) -> H3Params:
        if len(self.columns) != 2:
            raise ValueError(f"H3Index takes 2 columns [lat, lon] in degrees; got {self.columns}")
        return self


@register
class H3Index(StepKind):
    """Add ``output`` (default ``<lat>_h3_<resolution>``): the H3 cell of the point (``columns[0]``
    latitude, ``columns[1]`` longitude, degrees) at ``resolution`` (0-15), as its hex id text.
    Output: object column (None where a coordinate is missing or out of range): a category, so
    encode it next (OneHotEncoder, TargetEncoder). Needs ``h3`` 4.x (``pip install 'lakescore[geo]'``).
    """

    kind = "H3Index"
    Params = H3Params
    fixed = True

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """The one new column: ``output``, or ``<lat>_h3_<resolution>``."""
        return [params.output or f"{params.columns[0]}_h3_{params.resolution}"]

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        h3 = h3_module(params.name)
        output = H3Index.outputs(params)[0]
        _no_clash(params.name, [output], frame)
        return {"resolution": params.resolution, "output": output, "h3_version": str(h3.__version__)}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="H3Index")
        frame[state["output"]] = h3_cells(data[:, 0], data[:, 1], state["resolution"], step="H3Index")
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """The H3 cell of the batch's two coordinate columns, set as ``output``."""
        (lat, lon), output, resolution = state["columns"], state["output"], state["resolution"]

        def apply(batch: Columns) -> None:
            batch.set(output, h3_cells(batch.floats(lat, step="H3Index"), batch.floats(lon, step="H3Index"),
                                       resolution, step="H3Index"))

        return Kernel(apply)
