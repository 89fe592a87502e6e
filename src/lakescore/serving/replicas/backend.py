"""How replicas start and stop: the ``ReplicaBackend`` seam, the local process backend, and the
status mapping a pod backend uses.

A backend knows nothing of routing or scaling: ``start(replica_id, version) -> address``,
``status(replica_id) -> ReplicaStatus``, ``stop(replica_id)``, ``stop_all()`` (the endpoint stops) and
``pid(replica_id)`` (None where a replica has no local process). A replica is ``starting`` until it answers
its health check with ``ready``; ``failed`` when its process or pod is gone or its model did not load.

lakescore ships one backend, :class:`LocalProcessBackend`. A Kubernetes pod backend plugs in by
implementing the methods of :class:`ReplicaBackend` with a Kubernetes client (``start``
creates a pod that serves ``models:/<model>/<version>`` and returns the address of its service;
``stop`` deletes it and waits until it is gone) and mapping the pod object in ``status`` with
:func:`pod_status`. The endpoint reaches local replicas over :mod:`lakescore.serving.replicas.channel`
(``unix:`` addresses); a pod's replica needs that framing over TCP with a token handshake, which is
not written yet. A pod the scheduler cannot place yet is still
``starting``, with the detail ``waiting for room in the cluster: <scheduler message>``, which the
endpoint treats as waiting, not failed. Nothing here runs or tests such a backend against a real
API server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlparse

from lakescore.config import ReplicaStart
from lakescore.errors import ServingError
from lakescore.serving import forkserver
from lakescore.serving.features import FeatureReader
from lakescore.serving.plan import artifact_location
from lakescore.serving.replicas.channel import PREFIX, ChannelError, health, socket_path
from lakescore.serving.replicas.feature_holder import FeatureHolder, HeldReplica
from lakescore.serving.replicas.memory import process_memory
from lakescore.serving.replicas.replica import ReplicaOptions, run_forked_replica

ReplicaState = Literal["starting", "ready", "failed", "stopped"]
SOCKETS_PREFIX = "lakescore-replicas-"  # then the endpoint's process id: lakescore-replicas-<pid>-<random>


@dataclass(frozen=True)
class ReplicaStatus:
    """What a backend knows about one replica.

    Attributes
    ----------
    state : {"starting", "ready", "failed", "stopped"}
    detail : str
        Plain words: what it waits for, or why it failed.
    rss_bytes : int or None
        Resident memory of the replica's process (bytes), when known; counts pages shared with others.
    pid : int or None
    pss_bytes : int or None
        Proportional resident memory (bytes): unique pages plus an even share of shared ones.
    """

    state: ReplicaState
    detail: str = ""
    rss_bytes: int | None = None
    pid: int | None = None
    pss_bytes: int | None = None


class ReplicaBackend(Protocol):
    """Starts, watches and stops replicas of one endpoint's model."""

    def start(self, replica_id: str, version: int, *, features: FeatureGeneration | None = None) -> str:
        """Start a replica holding ``version``; return its address (``unix:<socket path>`` locally).
        ``features``: the feature generation it joins (one :meth:`load_features` returned, installed
        or not); default the version's current one."""
        ...

    def status(self, replica_id: str, *, fresh: bool = False) -> ReplicaStatus:
        """The replica's current state (never raises for a dead replica: that is ``failed``). ``fresh``:
        ask the replica again even when it answered before (the endpoint asks so for a replica whose
        request failed); a replica that does not answer then, or still scores the failed request, is
        ``starting`` with the reason."""
        ...

    def stop(self, replica_id: str) -> None:
        """Stop the replica and wait for it to be gone (idempotent)."""
        ...

    def stop_all(self) -> None:
        """Stop every replica this backend started and release what they shared (the local backend's
        socket folder); called when the endpoint stops (idempotent)."""
        ...

    def pid(self, replica_id: str) -> int | None:
        """The process id of a replica on this machine (None when it has none here, e.g. a pod)."""
        ...

    def location(self, version: int) -> str | None:
        """Where a process on this machine loads ``version`` from without a registry read (a local
        folder), or None: it loads ``models:/<model>/<version>`` itself."""
        ...

    def holder_pids(self) -> list[int]:
        """Process ids of the feature holders running on this machine (current, loaded and retired
        generations); empty when there are none here (no lookups, or replicas in pods)."""
        ...

    def load_features(self, version: int, reader: FeatureReader, specs: list[dict[str, Any]]) -> FeatureGeneration:
        """Read a lookup version's feature tables once: a new generation, not installed yet (only
        replicas started with ``features=`` it join it) until :meth:`install_features`, or gone with
        :meth:`discard_features`. Only called for a version whose chain has feature lookups."""
        ...

    def install_features(self, version: int, generation: FeatureGeneration) -> None:
        """Make a loaded ``generation`` the one new replicas of ``version`` get; the previous one stays
        until its last replica is stopped."""
        ...

    def discard_features(self, generation: FeatureGeneration) -> None:
        """Drop a loaded generation that was never installed (a failed deploy): it goes once its
        replicas are stopped (idempotent)."""
        ...

    def features(self, version: int) -> FeatureGeneration | None:
        """The generation new replicas of ``version`` get (None: none loaded)."""
        ...

    def replica_features(self, replica_id: str) -> FeatureGeneration | None:
        """The generation a replica was started with (None: the replica joins nothing)."""
        ...

    def release_features(self, version: int) -> None:
        """``version`` is no longer served: its generation goes once its replicas are stopped."""
        ...


class _Forked:
    """A replica forked from the preloaded fork server, with the ``Popen`` methods the backend uses."""

    def __init__(self, process: Any) -> None:
        self.process = process
        self.pid = int(process.pid)

    def poll(self) -> int | None:
        return None if self.process.is_alive() else self.process.exitcode

    def terminate(self) -> None:
        self.process.terminate()

    def kill(self) -> None:
        self.process.kill()

    def wait(self, timeout: float) -> int | None:
        self.process.join(timeout)
        if self.process.is_alive():
            raise subprocess.TimeoutExpired("replica", timeout)
        return self.process.exitcode


@dataclass(frozen=True)
class FeatureGeneration:
    """One read of a lookup version's feature tables: ``generation`` counts reads per backend,
    ``tables`` is ``[{"table", "version"}]`` (the Delta versions read)."""

    generation: int
    tables: list[dict[str, Any]]


@dataclass
class _Process:
    popen: subprocess.Popen[bytes] | _Forked | HeldReplica
    address: str
    version: int
    log_path: Path
    ready: bool = False
    holder: FeatureHolder | None = None
    generation: FeatureGeneration | None = None  # the feature rows it joins (forked from ``holder``)


class LocalProcessBackend:
    """Each replica is its own process listening on a Unix domain socket, scoring one request at a time.

    The parent binds the listening socket in a folder of its own (``tempfile.mkdtemp``: mode 0700,
    so no other local user can connect, which is why replicas need no token: the endpoint checks the
    token and the request before it forwards it; removed by :meth:`stop_all`, or by the next backend
    to start a replica when the endpoint was killed first) and hands it to the replica, so
    the address is known at once and requests that arrive while the model loads wait in the
    socket's backlog. Each replica watches its parent and exits when it dies.

    Two ways to start a replica (``replica_start`` in config/serving.yml):

    - ``preloaded_fork`` (default): a fork server imports pandas, scikit-learn, MLflow and the replica's
      scoring code once (:mod:`lakescore.serving.replicas.preload`); each replica is forked from it, shares those
      pages, and only loads and verifies its model. Faster starts, far less memory per replica; the
      fork server stays resident (one per endpoint process) even at zero replicas.
    - ``new_process``: ``python -m lakescore.serving.replicas.replica`` in a fresh interpreter: full
      isolation, every replica imports everything itself.

    A version with feature lookups is forked from its feature holder whichever way is configured
    (:meth:`load_features`, :mod:`lakescore.serving.replicas.feature_holder`): the holder read the feature
    rows once and the replicas share them.

    A replica loads ``models:/<model_name>/<version>`` from the version's artifact location, read from
    the registry once per version (:func:`lakescore.serving.plan.artifact_location`, in a child of
    the fork server), so replicas and the fork server hold no registry client.

    Parameters
    ----------
    model_name : str
        Registered model name; replicas serve ``models:/<model_name>/<version>``.
    tracking_uri : str
        MLflow tracking and registry URI of the runtime.
    log_dir : Path
        Folder for each replica's stderr (``<replica_id>.log``).
    start : {"preloaded_fork", "new_process"}, default "preloaded_fork"
    """

    def __init__(self, *, model_name: str, tracking_uri: str, log_dir: Path,
                 start: ReplicaStart = "preloaded_fork") -> None:
        self.start_method = start
        self.model_name = model_name
        self.tracking_uri = tracking_uri
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._replicas: dict[str, _Process] = {}
        self._lock = threading.Lock()
        self._sockets: Path | None = None
        self._started = 0
        self._holders: dict[int, tuple[FeatureHolder, FeatureGeneration]] = {}  # version -> its current generation
        self._retired: dict[FeatureHolder, FeatureGeneration] = {}  # older generations with replicas left
        self._loaded: dict[int, tuple[FeatureHolder, FeatureGeneration]] = {}  # generation -> not installed yet
        self._generations = 0
        self._locations: dict[int, str | None] = {}  # version -> local artifact location (a version's files never move)

    def start(self, replica_id: str, version: int, *, features: FeatureGeneration | None = None) -> str:
        held = self._holder_of(version, features)
        with self._lock:
            if self._sockets is None:
                remove_orphan_socket_folders()
                self._sockets = Path(tempfile.mkdtemp(prefix=f"{SOCKETS_PREFIX}{os.getpid()}-"))  # mode 0700
            self._started += 1
            path = self._sockets / f"{self._started}.sock"  # short: a socket path has at most 107 bytes
        log_path = self.log_dir / f"{replica_id}.log"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            sock.listen(64)
            popen = self._spawn(sock, version, replica_id, log_path, held[0] if held else None)
        except BaseException:
            path.unlink(missing_ok=True)  # nothing listens on it
            raise
        finally:
            sock.close()  # the replica holds its own descriptor
        address = f"{PREFIX}{path}"
        with self._lock:
            self._replicas[replica_id] = _Process(popen, address, version, log_path, holder=held[0] if held else None,
                                             generation=held[1] if held else None)
        return address

    def _holder_of(self, version: int, features: FeatureGeneration | None) -> tuple[FeatureHolder,
                                                                                     FeatureGeneration] | None:
        """The holder a replica of ``version`` is forked from: that of ``features``, else the current one."""
        with self._lock:
            current = self._holders.get(version)
            if features is None:
                return current
            if current is not None and current[1] == features:
                return current
            loaded = self._loaded.get(features.generation)
        if loaded is None:
            raise ServingError(f"models:/{self.model_name}/{version}: feature generation {features.generation} is "
                               "not loaded (discarded, or never read by this backend); deploy the version again")
        return loaded

    def _spawn(self, sock: socket.socket, version: int, replica_id: str, log_path: Path,
               holder: FeatureHolder | None) -> subprocess.Popen[bytes] | _Forked | HeldReplica:
        """Start the replica's process on the listening socket ``sock``: forked from ``holder`` (the
        version's feature holder) when it has one (whatever ``replica_start`` says: the rows are shared
        that way)."""
        options = ReplicaOptions(f"models:/{self.model_name}/{version}", version, self.tracking_uri,
                              load_uri=self.location(version))
        if holder is not None:
            return HeldReplica(holder, holder.fork_replica(sock, options, str(log_path)))
        if self.start_method == "preloaded_fork":
            process = forkserver.context().Process(target=run_forked_replica, name=replica_id, daemon=True,
                                                   args=(sock, options, str(log_path)))
            process.start()
            return _Forked(process)
        command = [sys.executable, "-m", "lakescore.serving.replicas.replica", "--model-uri", options.model_uri,
                   *(["--load-uri", options.load_uri] if options.load_uri else []), "--version", str(version), "--fd", str(sock.fileno()),
                   "--tracking-uri", self.tracking_uri, "--parent-pid", str(os.getpid())]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log_path, "ab") as log:
            return subprocess.Popen(command, pass_fds=(sock.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log)

    def location(self, version: int) -> str | None:
        """The version's artifact location when it is a local folder (``file://``; one registry read
        per version and backend), else None, and the process loads ``models:/`` itself:

        - remote storage (Unity Catalog's ``s3://``/``abfss://`` paths) is reached only with the
          temporary credentials the registry hands MLflow's ``models:/`` loader;
        - the registry cannot say (no such version, registry unreachable): the replica's own load then
          fails with the registry's reason, and the replica is ``failed`` with it, as :meth:`status`
          promises for a replica whose model does not load.
        """
        if version not in self._locations:
            try:
                found = artifact_location(self.model_name, version, tracking_uri=self.tracking_uri)
            except Exception:  # noqa: BLE001 - the replica's own load reports the reason (see above)
                return None
            self._locations[version] = found if urlparse(found).scheme in ("", "file") else None
        return self._locations[version]

    def pid(self, replica_id: str) -> int | None:
        proc = self._replicas.get(replica_id)
        return proc.popen.pid if proc else None

    def holder_pids(self) -> list[int]:
        with self._lock:
            holders = {*(h for h, _ in self._holders.values()), *self._retired, *(h for h, _ in self._loaded.values())}
        return sorted(pid for pid in (h.process.pid for h in holders) if pid is not None)

    def load_features(self, version: int, reader: FeatureReader, specs: list[dict[str, Any]]) -> FeatureGeneration:
        """Start a feature holder for ``version`` (:mod:`lakescore.serving.replicas.feature_holder`): it reads
        the feature tables once. It is not installed: replicas started with ``features=`` the returned
        generation are forked from it; :meth:`install_features` makes it the version's current one,
        :meth:`discard_features` stops it.

        Parameters
        ----------
        version : int
        reader : FeatureReader
            Reads the feature tables (in the holder).
        specs : list of dict
            The version's lookup specs (``FeatureLookup.to_json``).

        Returns
        -------
        FeatureGeneration
            The new generation (its number and the Delta versions read).

        Raises
        ------
        ServingError
            The feature tables could not be read (no holder is left running).
        """
        holder = FeatureHolder(reader, specs, what=f"models:/{self.model_name}/{version}")
        with self._lock:
            self._generations += 1
            generation = FeatureGeneration(self._generations, holder.record)
            self._loaded[generation.generation] = (holder, generation)
        return generation

    def install_features(self, version: int, generation: FeatureGeneration) -> None:
        """Make a generation from :meth:`load_features` the one new replicas of ``version`` are forked
        from; the previous one is stopped once its last replica is.

        Raises
        ------
        ServingError
            ``generation`` is not loaded (discarded, or installed already).
        """
        with self._lock:
            loaded = self._loaded.pop(generation.generation, None)
            if loaded is not None:
                previous = self._holders.get(version)
                self._holders[version] = loaded
        if loaded is None:
            raise ServingError(f"models:/{self.model_name}/{version}: feature generation {generation.generation} "
                               "is not loaded (discarded or installed already); deploy the version again")
        if previous is not None:
            self._retire_holder(*previous)

    def discard_features(self, generation: FeatureGeneration) -> None:
        """Stop the holder of a generation that was never installed, now or once its last replica is
        stopped (idempotent)."""
        with self._lock:
            loaded = self._loaded.pop(generation.generation, None)
        if loaded is not None:
            self._retire_holder(*loaded)

    def features(self, version: int) -> FeatureGeneration | None:
        current = self._holders.get(version)
        return current[1] if current else None

    def replica_features(self, replica_id: str) -> FeatureGeneration | None:
        proc = self._replicas.get(replica_id)
        return None if proc is None else proc.generation

    def release_features(self, version: int) -> None:
        with self._lock:
            current = self._holders.pop(version, None)
        if current is not None:
            self._retire_holder(*current)

    def _retire_holder(self, holder: FeatureHolder, generation: FeatureGeneration) -> None:
        """Stop a holder that is no longer current now, or once its last replica is stopped."""
        with self._lock:
            in_use = any(p.holder is holder for p in self._replicas.values())
            if in_use:
                self._retired[holder] = generation
            else:
                self._retired.pop(holder, None)
        if not in_use:
            holder.stop()

    def status(self, replica_id: str, *, fresh: bool = False) -> ReplicaStatus:
        proc = self._replicas.get(replica_id)
        if proc is None:
            return ReplicaStatus("stopped", "not started by this endpoint")
        code = proc.popen.poll()
        if code is not None:
            return ReplicaStatus("failed", f"process {proc.popen.pid} exited with code {code}; see {proc.log_path}",
                              pid=proc.popen.pid)
        rss, pss = _memory(proc.popen.pid)
        if proc.ready and not fresh:
            return ReplicaStatus("ready", "", rss, proc.popen.pid, pss)
        try:
            code, body = health(proc.address, timeout_s=1.0)
        except ChannelError as err:
            why = f"not answering its health check ({err})" if proc.ready else "process started, not answering yet"
            return ReplicaStatus("starting", why, rss, proc.popen.pid)
        if code == 200 and fresh and body.get("scoring_s") is not None:  # still on the request that failed
            return ReplicaStatus("starting", f"still scoring a request after {body['scoring_s']:.1f} s", rss,
                              proc.popen.pid)
        if code == 200:
            proc.ready = True
            return ReplicaStatus("ready", "", rss, proc.popen.pid)
        if code == 503:
            return ReplicaStatus("starting", f"loading models:/{self.model_name}/{proc.version}", rss, proc.popen.pid)
        return ReplicaStatus("failed", f"model did not load: {str(body.get('error', body))[:300]}", rss, proc.popen.pid)

    def stop(self, replica_id: str) -> None:
        with self._lock:
            proc = self._replicas.pop(replica_id, None)
        if proc is None:
            return
        if proc.popen.poll() is None:
            proc.popen.terminate()
            try:
                proc.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=10)
        Path(socket_path(proc.address)).unlink(missing_ok=True)
        if proc.holder is not None and proc.holder in self._retired:
            self._retire_holder(proc.holder, self._retired[proc.holder])

    def stop_all(self) -> None:
        """Stop every replica this backend started, then the feature holders, and remove the socket folder."""
        for replica_id in list(self._replicas):
            self.stop(replica_id)
        for version in list(self._holders):
            self.release_features(version)
        for _, generation in list(self._loaded.values()):
            self.discard_features(generation)
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)
            self._sockets = None


def remove_orphan_socket_folders(root: str | Path | None = None) -> list[Path]:
    """Remove this user's replica socket folders (``lakescore-replicas-<pid>-*`` in the temporary folder)
    whose endpoint process ``<pid>`` is gone, e.g. killed with SIGKILL before :meth:`stop_all` ran.

    Parameters
    ----------
    root : str or Path, optional
        Where to look (default ``tempfile.gettempdir()``).

    Returns
    -------
    list of Path
        The folders removed.
    """
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{SOCKETS_PREFIX}*-*"):
        owner = folder.name[len(SOCKETS_PREFIX):].partition("-")[0]
        try:
            mine = folder.is_dir() and folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _memory(pid: int) -> tuple[int | None, int | None]:
    """(RSS, PSS) of ``pid`` in bytes from one read of its smaps_rollup; (None, None) when unknown."""
    memory = process_memory(pid)
    return (memory.rss_bytes, memory.pss_bytes) if memory else (None, None)


# --- Pod status (for a pod backend) -----------------------------------------------------------


def pod_status(pod: dict[str, Any] | None) -> ReplicaStatus:
    """Map a pod object to a :class:`ReplicaStatus`.

    A Pending pod whose ``PodScheduled`` condition is False is waiting for the scheduler:
    ``starting`` with ``waiting for room in the cluster: <scheduler message>``, never failed.
    """
    if pod is None:
        return ReplicaStatus("stopped", "pod does not exist")
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if phase == "Pending":
        scheduled = conditions.get("PodScheduled")
        if scheduled is not None and scheduled.get("status") == "False":
            message = scheduled.get("message") or scheduled.get("reason") or "no reason given"
            return ReplicaStatus("starting", f"waiting for room in the cluster: {message}")
        return ReplicaStatus("starting", "scheduled; pulling the image and starting the container")
    if phase == "Running":
        ready = conditions.get("Ready", {}).get("status") == "True"
        return ReplicaStatus("ready") if ready else ReplicaStatus("starting", "container running, loading the model")
    reason = status.get("reason") or status.get("message") or phase
    return ReplicaStatus("failed", f"pod {phase.lower()}: {reason}")
