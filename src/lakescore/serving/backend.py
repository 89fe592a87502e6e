"""How copies start and stop: the ``ReplicaBackend`` seam, the local process backend, and the
status mapping a Kubernetes pod backend uses.

A backend knows nothing of routing or scaling: ``start(copy_id, version) -> address``,
``status(copy_id) -> CopyStatus`` and ``stop(copy_id)``. A copy is ``starting`` until it answers
``/health`` with ``ready``; ``failed`` when its process or pod is gone or its model did not load.
A pod that the scheduler cannot place yet is still ``starting``, with the detail
``waiting for room in the cluster: <scheduler message>`` — waiting, not failed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from lakescore.serving import forkserver
from lakescore.serving.app import TOKEN_ENV, CopyOptions, run_forked_copy
from lakescore.serving.memory import process_memory

CopyState = Literal["starting", "ready", "failed", "stopped"]


@dataclass(frozen=True)
class CopyStatus:
    """What a backend knows about one copy.

    Attributes
    ----------
    state : {"starting", "ready", "failed", "stopped"}
    detail : str
        Plain words: what it waits for, or why it failed.
    rss_bytes : int or None
        Resident memory of the copy's process (bytes), when known; counts pages shared with others.
    pid : int or None
    pss_bytes : int or None
        Proportional resident memory (bytes): unique pages plus an even share of shared ones.
    """

    state: CopyState
    detail: str = ""
    rss_bytes: int | None = None
    pid: int | None = None
    pss_bytes: int | None = None


class ReplicaBackend(Protocol):
    """Starts, watches and stops copies of one endpoint's model."""

    def start(self, copy_id: str, version: int) -> str:
        """Start a copy holding ``version``; return its base address (``http://host:port``)."""
        ...

    def status(self, copy_id: str) -> CopyStatus:
        """The copy's current state (never raises for a dead copy: that is ``failed``)."""
        ...

    def stop(self, copy_id: str) -> None:
        """Stop the copy and wait for it to be gone (idempotent)."""
        ...


class _Forked:
    """A copy forked from the preloaded fork server, with the ``Popen`` methods the backend uses."""

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
            raise subprocess.TimeoutExpired("copy", timeout)
        return self.process.exitcode


@dataclass
class _Process:
    popen: subprocess.Popen[bytes] | _Forked
    address: str
    version: int
    log_path: Path
    ready: bool = False


class LocalProcessBackend:
    """Each copy is its own process on 127.0.0.1, scoring one request at a time.

    The parent binds the listening socket on an ephemeral loopback port and hands it to the copy,
    so the address is known at once and requests that arrive while the model loads wait in the
    socket's backlog. Each copy watches its parent and exits when it dies.

    Two ways to start a copy (``copy_start`` in config/serving.yml):

    - ``preloaded_fork`` (default): a fork server imports pandas, scikit-learn, MLflow and the web
      server once (:mod:`lakescore.serving.preload`); each copy is forked from it, shares those
      pages, and only loads and verifies its model. Faster starts, far less memory per copy; the
      fork server stays resident (one per endpoint process) even at zero copies.
    - ``new_process``: ``python -m lakescore.serving.app`` in a fresh interpreter: full isolation,
      every copy imports everything itself.

    Parameters
    ----------
    model_name : str
        Registered model name; copies load ``models:/<model_name>/<version>``.
    tracking_uri : str
        MLflow tracking and registry URI of the runtime.
    token : str
        Bearer token the copies require (passed in the environment).
    log_dir : Path
        Folder for each copy's stderr (``<copy_id>.log``).
    max_body_bytes, max_rows : int
        Request limits the copies enforce.
    start : {"preloaded_fork", "new_process"}, default "preloaded_fork"
    """

    def __init__(self, *, model_name: str, tracking_uri: str, token: str, log_dir: Path,
                 max_body_bytes: int, max_rows: int,
                 start: Literal["preloaded_fork", "new_process"] = "preloaded_fork") -> None:
        self.start_method = start
        self.model_name = model_name
        self.tracking_uri = tracking_uri
        self.token = token
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.max_body_bytes = max_body_bytes
        self.max_rows = max_rows
        self._copies: dict[str, _Process] = {}
        self._lock = threading.Lock()

    def start(self, copy_id: str, version: int) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY only for IPPROTO_TCP
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # loopback only
        sock.listen(128)
        address = f"http://127.0.0.1:{sock.getsockname()[1]}"
        log_path = self.log_dir / f"{copy_id}.log"
        popen: subprocess.Popen[bytes] | _Forked
        if self.start_method == "preloaded_fork":
            options = CopyOptions(f"models:/{self.model_name}/{version}", version, self.tracking_uri,
                                  self.max_body_bytes, self.max_rows)
            process = forkserver.context().Process(target=run_forked_copy, name=copy_id, daemon=True,
                                             args=(sock, options, self.token, str(log_path)))
            process.start()
            popen = _Forked(process)
        else:
            command = [sys.executable, "-m", "lakescore.serving.app", "--model-uri",
                       f"models:/{self.model_name}/{version}", "--version", str(version), "--fd", str(sock.fileno()),
                       "--tracking-uri", self.tracking_uri, "--parent-pid", str(os.getpid()),
                       "--max-body-bytes", str(self.max_body_bytes), "--max-rows", str(self.max_rows)]
            env = {**os.environ, TOKEN_ENV: self.token, "PYTHONUNBUFFERED": "1"}
            with open(log_path, "ab") as log:
                popen = subprocess.Popen(command, pass_fds=(sock.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log)
        sock.close()  # the copy holds its own descriptor
        with self._lock:
            self._copies[copy_id] = _Process(popen, address, version, log_path)
        return address

    def pid(self, copy_id: str) -> int | None:
        proc = self._copies.get(copy_id)
        return proc.popen.pid if proc else None

    def status(self, copy_id: str) -> CopyStatus:
        proc = self._copies.get(copy_id)
        if proc is None:
            return CopyStatus("stopped", "not started by this endpoint")
        code = proc.popen.poll()
        if code is not None:
            return CopyStatus("failed", f"process {proc.popen.pid} exited with code {code}; see {proc.log_path}",
                              pid=proc.popen.pid)
        rss = _rss(proc.popen.pid)
        if proc.ready:
            return CopyStatus("ready", "", rss, proc.popen.pid, _pss(proc.popen.pid))
        try:
            health = httpx.get(f"{proc.address}/health", headers={"Authorization": f"Bearer {self.token}"},
                               timeout=1.0)
        except httpx.HTTPError:
            return CopyStatus("starting", "process started, server not answering yet", rss, proc.popen.pid)
        body = health.json() if health.headers.get("content-type", "").startswith("application/json") else {}
        if health.status_code == 200:
            proc.ready = True
            return CopyStatus("ready", "", rss, proc.popen.pid)
        if health.status_code == 503:
            return CopyStatus("starting", f"loading models:/{self.model_name}/{proc.version}", rss, proc.popen.pid)
        return CopyStatus("failed", f"model did not load: {body.get('error', health.text[:200])}", rss,
                          proc.popen.pid)

    def stop(self, copy_id: str) -> None:
        with self._lock:
            proc = self._copies.pop(copy_id, None)
        if proc is None:
            return
        if proc.popen.poll() is None:
            proc.popen.terminate()
            try:
                proc.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=10)

    def stop_all(self) -> None:
        """Stop every copy this backend started."""
        for copy_id in list(self._copies):
            self.stop(copy_id)


def _pss(pid: int) -> int | None:
    memory = process_memory(pid)
    return memory.pss_bytes if memory else None


def _rss(pid: int) -> int | None:
    memory = process_memory(pid)
    return memory.rss_bytes if memory else None


# --- Kubernetes pods (the seam, for a cluster backend) --------------------------------------


class PodsApi(Protocol):
    """The narrow part of a Kubernetes client a pod backend needs (pods as plain dicts)."""

    def create_pod(self, name: str, *, model_uri: str) -> str:
        """Create the pod; return the address its service will answer on."""
        ...

    def read_pod(self, name: str) -> dict[str, Any] | None:
        """The pod object (``status.phase``, ``status.conditions``), or None when it does not exist."""
        ...

    def delete_pod(self, name: str) -> None:
        ...


def pod_status(pod: dict[str, Any] | None) -> CopyStatus:
    """Map a pod object to a :class:`CopyStatus`.

    A Pending pod whose ``PodScheduled`` condition is False is waiting for the scheduler:
    ``starting`` with ``waiting for room in the cluster: <scheduler message>``, never failed.
    """
    if pod is None:
        return CopyStatus("stopped", "pod does not exist")
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if phase == "Pending":
        scheduled = conditions.get("PodScheduled")
        if scheduled is not None and scheduled.get("status") == "False":
            message = scheduled.get("message") or scheduled.get("reason") or "no reason given"
            return CopyStatus("starting", f"waiting for room in the cluster: {message}")
        return CopyStatus("starting", "scheduled; pulling the image and starting the container")
    if phase == "Running":
        ready = conditions.get("Ready", {}).get("status") == "True"
        return CopyStatus("ready") if ready else CopyStatus("starting", "container running, loading the model")
    reason = status.get("reason") or status.get("message") or phase
    return CopyStatus("failed", f"pod {phase.lower()}: {reason}")


class KubernetesPodBackend:
    """Copies as pods, through a :class:`PodsApi` (wired on a cluster; not used locally)."""

    def __init__(self, pods: PodsApi, *, model_name: str) -> None:
        self.pods = pods
        self.model_name = model_name

    def start(self, copy_id: str, version: int) -> str:
        return self.pods.create_pod(copy_id, model_uri=f"models:/{self.model_name}/{version}")

    def status(self, copy_id: str) -> CopyStatus:
        return pod_status(self.pods.read_pod(copy_id))

    def stop(self, copy_id: str) -> None:
        self.pods.delete_pod(copy_id)
        deadline = time.monotonic() + 60
        while self.pods.read_pod(copy_id) is not None and time.monotonic() < deadline:
            time.sleep(1.0)
