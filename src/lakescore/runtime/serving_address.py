"""Where a warm endpoint listens, per placement (:attr:`~lakescore.runtime.base.Placement.serving_bind`).

- ``local``: config/serving.yml's ``host`` (127.0.0.1): clients on this machine.
- ``databricks``: the driver's address (``spark.driver.host``), so the workspace's driver proxy
  can reach it; clients call ``https://<workspace>/driver-proxy-api/o/<org id>/<cluster id>/<port>/``.
  The workspace URL, org id and cluster id are the cluster's Spark conf
  (``spark.databricks.workspaceUrl``, ``spark.databricks.clusterUsageTags.clusterOwnerOrgId``,
  ``spark.databricks.clusterUsageTags.clusterId``), else the environment (``DATABRICKS_HOST``,
  ``DB_CLUSTER_ID``, ``DB_DRIVER_IP``).

Either way the endpoint requires its token, and its replicas listen on Unix sockets in a folder
only the endpoint's user can enter, never on a network address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakescore.errors import RuntimeUnsupportedError

if TYPE_CHECKING:
    from lakescore.runtime.base import Runtime

# Spark conf key, else environment variable, of each fact the driver-proxy URL needs.
CLUSTER_CONF = {
    "workspace_url": ("spark.databricks.workspaceUrl", "DATABRICKS_HOST"),
    "org_id": ("spark.databricks.clusterUsageTags.clusterOwnerOrgId", None),
    "cluster_id": ("spark.databricks.clusterUsageTags.clusterId", "DB_CLUSTER_ID"),
    "driver_host": ("spark.driver.host", "DB_DRIVER_IP"),
}


@dataclass(frozen=True)
class ClusterFacts:
    """What a Databricks cluster says about itself: the workspace host (no scheme), the
    workspace's org id, the cluster id and the driver's address."""

    workspace_url: str
    org_id: str
    cluster_id: str
    driver_host: str


@dataclass(frozen=True)
class ServingBind:
    """The address an endpoint's socket binds, and the driver proxy in front of it (if any).

    Attributes
    ----------
    host : str
        The address to bind (``127.0.0.1`` locally, the driver's address on Databricks).
    proxy_base : str or None
        ``https://<workspace>/driver-proxy-api/o/<org id>/<cluster id>``: what clients outside
        the driver call, followed by the port. None when clients call :attr:`host` directly.
    """

    host: str
    proxy_base: str | None = None

    def address(self, port: int) -> str:
        """``http://<host>:<port>``: the endpoint's own address (on the driver, or this machine)."""
        return f"http://{self.host}:{port}"

    def client_url(self, port: int) -> str:
        """The URL clients use: the driver-proxy URL ``<proxy_base>/<port>/``, else :meth:`address`."""
        return f"{self.proxy_base}/{port}/" if self.proxy_base else self.address(port)


def cluster_facts(runtime: Runtime) -> ClusterFacts:
    """The cluster's :class:`ClusterFacts` from its Spark conf (:data:`CLUSTER_CONF`), else the
    environment. The one place that asks the Databricks side.

    Raises
    ------
    RuntimeUnsupportedError
        A fact is in neither place (not on a Databricks cluster's driver), naming the keys.
    """
    conf = runtime.spark().conf
    found: dict[str, str] = {}
    missing = []
    for fact, (key, env) in CLUSTER_CONF.items():
        value = conf.get(key, None) or (os.environ.get(env) if env else None)
        if value:
            found[fact] = str(value)
        else:
            missing.append(key + (f" (or ${env})" if env else ""))
    if missing:
        raise RuntimeUnsupportedError(
            f"lakescore serve on the databricks runtime binds the driver's address behind the driver proxy, but "
            f"this session has no {', '.join(missing)}. Run it on a classic cluster's driver (the bundle's serve "
            "job does), or serve locally with --runtime local.")
    host = found["workspace_url"].removeprefix("https://").removeprefix("http://").rstrip("/")
    return ClusterFacts(host, found["org_id"], found["cluster_id"], found["driver_host"])


def serving_bind(runtime: Runtime, *, host: str) -> ServingBind:
    """Where ``runtime``'s endpoint listens: the one place that decides it
    (:attr:`Placement.serving_bind <lakescore.runtime.base.Placement.serving_bind>`).

    Parameters
    ----------
    runtime : Runtime
    host : str
        config/serving.yml's ``host`` (127.0.0.1): the local placement's bind address.

    Returns
    -------
    ServingBind
        ``configured``: ``host``, no proxy. ``driver``: the driver's address and the driver-proxy
        base URL from :func:`cluster_facts`.
    """
    if runtime.placement.serving_bind == "configured":
        return ServingBind(host)
    facts = cluster_facts(runtime)
    return ServingBind(facts.driver_host,
                       f"https://{facts.workspace_url}/driver-proxy-api/o/{facts.org_id}/{facts.cluster_id}")
