"""Which feature rows each version's replicas join.

A version whose chain joins feature lookups (:mod:`lakescore.serving.features`) is served from a
*generation*: its feature tables read once, at one Delta version each, by the backend (in the process
its replicas are forked from). :class:`FeatureGenerations` holds an endpoint's lookup specs by version
(read once from the registry) and carries out, through the backend, which generation replicas of a
version started from now on join: read one (at start, when a version is first asked for, and in a
deploy, where it is installed only once the deploy succeeds), install it, discard or release it. It
also says which tables the served and the candidate version join (``GET /status``) and at which
versions the cold path reads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from lakescore.errors import ServingError
from lakescore.serving.features import FeatureReader
from lakescore.serving.plan import model_lookups
from lakescore.serving.replicas.backend import FeatureGeneration, ReplicaBackend
from lakescore.serving.replicas.cold import ColdFeatures
from lakescore.serving.replicas.pool import Replica
from lakescore.serving.state.store import ServingState

Specs = tuple[dict[str, Any], ...]


class FeatureGenerations:
    """The feature generations of one endpoint's versions.

    Parameters
    ----------
    endpoint : str
        The endpoint's name (audit events, messages).
    model_name : str
        The registered model's name (messages).
    uri : callable
        ``uri(version) -> "models:/<model_name>/<version>"`` (:meth:`lakescore.serving.plan.EndpointPlan.uri`).
    backend : ReplicaBackend
        Reads, installs, discards and releases generations, and says which one a replica joins.
    state : ServingState
        Audit events (``ml.features.loaded``).
    reader : FeatureReader, optional
        Reads a lookup version's feature tables; needed to serve a version with feature lookups
        (None: such a version is refused with a :class:`lakescore.errors.ServingError`).
    lookups : dict of int to tuple of dict, optional
        Lookup specs (``FeatureLookup.to_json``) already known by version, such as the planned
        version's; the rest are read from the registry when first asked for.
    """

    def __init__(self, *, endpoint: str, model_name: str, uri: Callable[[int], str], backend: ReplicaBackend,
                 state: ServingState, reader: FeatureReader | None = None,
                 lookups: dict[int, Specs] | None = None) -> None:
        self.endpoint, self.model_name, self.uri = endpoint, model_name, uri
        self.backend, self.state, self.reader = backend, state, reader
        self.lookups: dict[int, Specs] = {} if lookups is None else lookups

    # --- specs -------------------------------------------------------------------------------

    async def specs(self, version: int) -> Specs:
        """The feature lookup specs of ``version``'s chain (read once from the registry; empty: none)."""
        if version not in self.lookups:
            self.lookups[version] = tuple(await asyncio.to_thread(model_lookups, self.uri(version)))
        return self.lookups[version]

    def joins(self, version: int) -> bool:
        """Whether ``version`` is known to join feature lookups (its specs were read when it was
        planned, deployed or chosen as a candidate)."""
        return bool(self.lookups.get(version))

    # --- generations -------------------------------------------------------------------------

    async def ensure(self, version: int) -> None:
        """Read ``version``'s feature tables and install them when its chain has lookups and none
        are installed.

        Raises
        ------
        ServingError
            No feature reader was given, or the tables cannot be read.
        """
        specs = await self.specs(version)
        if not specs or self.backend.features(version) is not None:
            return
        await self.install(version, await self.load(version, specs))

    async def load(self, version: int, specs: Specs) -> FeatureGeneration:
        """Read ``version``'s feature tables (at their current Delta versions) in a new generation,
        not installed yet.

        Raises
        ------
        ServingError
            No feature reader was given, or the tables cannot be read.
        """
        if self.reader is None:
            raise ServingError(f"v{version} of {self.model_name} joins feature lookups "
                               f"({', '.join(s['table_name'] for s in specs)}) and endpoint {self.endpoint} was "
                               "started without a feature reader; start it with lakescore serve")
        return await asyncio.to_thread(self.backend.load_features, version, self.reader, list(specs))

    async def install(self, version: int, generation: FeatureGeneration) -> None:
        """Replicas of ``version`` started from now on join ``generation`` (audited ``ml.features.loaded``)."""
        await asyncio.to_thread(self.backend.install_features, version, generation)
        self.state.audit("ml.features.loaded", self.endpoint, version=version, feature_tables=generation.tables,
                         generation=generation.generation)

    async def discard(self, generation: FeatureGeneration) -> None:
        """Drop a generation that was loaded and never installed (a failed deploy's)."""
        await asyncio.to_thread(self.backend.discard_features, generation)

    async def release(self, version: int) -> None:
        """``version`` is no longer served: its feature rows go with its last replica."""
        await asyncio.to_thread(self.backend.release_features, version)

    def current(self, version: int) -> FeatureGeneration | None:
        """The generation new replicas of ``version`` join (None: no lookups, or none installed)."""
        return self.backend.features(version) if self.joins(version) else None

    def stamp(self, replica: Replica) -> None:
        """Note on ``replica`` the feature tables and generation it joins (nothing without lookups)."""
        if not self.joins(replica.version):
            return
        generation = self.backend.replica_features(replica.replica_id)
        if generation is not None:
            replica.feature_tables, replica.feature_generation = generation.tables, generation.generation

    # --- what others read --------------------------------------------------------------------

    def tables(self, version: int) -> list[dict[str, Any]] | None:
        """``[{"table", "version"}]`` that new replicas of ``version`` join with (None: no lookups)."""
        generation = self.current(version)
        return None if generation is None else generation.tables

    def status(self, served: int, candidate: int | None) -> dict[str, Any]:
        """``feature_tables`` of the ``served`` version and ``candidate_feature_tables`` of the
        ``candidate`` (``[{"table", "version"}]``), each only when that version joins feature lookups."""
        out: dict[str, Any] = {}
        if (tables := self.tables(served)) is not None:
            out["feature_tables"] = tables
        if candidate is not None and (tables := self.tables(candidate)) is not None:
            out["candidate_feature_tables"] = tables
        return out

    async def cold(self, version: int) -> ColdFeatures | None:
        """How the cold path reads ``version``'s feature tables: at the Delta versions its warm
        replicas join (the current ones when none are loaded); None without lookups or reader."""
        specs = await self.specs(version)
        if not specs or self.reader is None:
            return None
        held = self.tables(version)
        pinned = None if held is None else {t["table"]: int(t["version"]) for t in held}
        return ColdFeatures(self.reader, specs, pinned)
