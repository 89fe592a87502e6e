"""The two routes a run takes, chosen once per run from ``inference.batch_compute`` and the
placement: :func:`choose_route`. What a route does is the :class:`~lakescore.workflows.routes.base.Route`
Protocol; :mod:`~lakescore.workflows.routes.single_node` and :mod:`~lakescore.workflows.routes.spark`
carry it out.
"""

from __future__ import annotations

from lakescore.config import BatchCompute
from lakescore.runtime import Runtime
from lakescore.workflows.routes.base import Route
from lakescore.workflows.routes.single_node import SingleNodeRoute
from lakescore.workflows.routes.spark import SparkRoute

ROUTES: dict[str, type[SingleNodeRoute] | type[SparkRoute]] = {"single_node": SingleNodeRoute, "spark": SparkRoute}


def choose_route(runtime: Runtime, batch_compute: BatchCompute) -> Route:
    """The route of ``batch_compute`` on ``runtime``'s placement: the one place a run's engine is chosen.

    Parameters
    ----------
    runtime : Runtime
        Its placement gives the route's publication engine
        (:func:`lakescore.runtime.base.publication_engine`).
    batch_compute : {"single_node", "spark"}
        ``inference.batch_compute`` (a staged run's own, when publishing it).

    Returns
    -------
    Route
        :class:`SingleNodeRoute` or :class:`SparkRoute`; building one starts no session.

    Raises
    ------
    ValueError
        ``batch_compute`` is neither route (config validation refuses it first).
    """
    if batch_compute not in ROUTES:
        raise ValueError(f"batch_compute {batch_compute!r} is not a route; use one of {sorted(ROUTES)}")
    return ROUTES[batch_compute](runtime)


__all__ = ["Route", "SingleNodeRoute", "SparkRoute", "choose_route"]
