"""The replica backend seam: the pod status mapping a pod backend uses, and the local process backend."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from lakescore.serving import forkserver
from lakescore.serving.replicas import backend as backend_module
from lakescore.serving.replicas.backend import LocalProcessBackend, pod_status, remove_orphan_socket_folders
from lakescore.serving.replicas.channel import socket_path
from lakescore.serving.replicas.memory import ProcessMemory, process_memory


def pod(phase: str, **conditions: tuple[str, str]) -> dict[str, Any]:
    return {"status": {"phase": phase, "conditions": [
        {"type": kind, "status": status, "message": message} for kind, (status, message) in conditions.items()]}}


def test_an_unschedulable_pod_is_starting_and_waits_for_room() -> None:
    message = "0/3 nodes are available: 3 Insufficient memory."
    status = pod_status(pod("Pending", PodScheduled=("False", message)))
    assert (status.state, status.detail) == ("starting", f"waiting for room in the cluster: {message}")


def test_pod_phases_map_to_replica_states() -> None:
    assert pod_status(pod("Pending", PodScheduled=("True", ""))).state == "starting"
    assert pod_status(pod("Running", Ready=("False", ""))).detail == "container running, loading the model"
    assert pod_status(pod("Running", Ready=("True", ""))).state == "ready"
    assert pod_status({"status": {"phase": "Failed", "reason": "OOMKilled"}}).detail == "pod failed: OOMKilled"
    assert pod_status(None).state == "stopped"


@pytest.mark.parametrize("start", ["preloaded_fork", "new_process"])
def test_a_local_replica_that_cannot_load_is_failed_with_the_reason(module_home, tmp_path, start) -> None:
    home, _ = module_home
    backend = LocalProcessBackend(model_name="main.flights.late_arrival", tracking_uri=f"sqlite:///{home / 'mlflow.db'}",
                                  log_dir=tmp_path, start=start)
    address = backend.start("c-v99", 99)
    assert address.startswith("unix:/") and address.endswith(".sock")
    pid = backend.pid("c-v99")
    deadline = time.monotonic() + 120
    status = backend.status("c-v99")
    while status.state == "starting" and time.monotonic() < deadline:
        time.sleep(0.25)
        status = backend.status("c-v99")
    assert status.state == "failed"
    assert "model did not load" in status.detail and "99" in status.detail
    assert "did not load" in (tmp_path / "c-v99.log").read_text()
    backend.stop("c-v99")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert backend.status("c-v99").state == "stopped"
    backend.stop_all()


def test_a_replica_that_cannot_start_leaves_no_socket_behind(module_home, tmp_path) -> None:
    home, _ = module_home
    logs = tmp_path / "logs"
    backend = LocalProcessBackend(model_name="main.flights.late_arrival", tracking_uri=f"sqlite:///{home / 'mlflow.db'}",
                                  log_dir=logs, start="new_process")
    shutil.rmtree(logs)  # the replica's log cannot be opened: starting its process raises
    mine = f"lakescore-replicas-{os.getpid()}-*"
    folders_before, open_before = set(Path(tempfile.gettempdir()).glob(mine)), len(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        backend.start("c-v1", 1)
    assert len(os.listdir("/proc/self/fd")) == open_before  # the listening socket is closed
    [folder] = set(Path(tempfile.gettempdir()).glob(mine)) - folders_before
    assert list(folder.iterdir()) == [] and backend.status("c-v1").state == "stopped"
    backend.stop_all()
    assert not folder.exists()


def test_a_ready_replica_reads_its_memory_once_per_status(module_home, tmp_path, monkeypatch) -> None:
    home, _ = module_home
    backend = LocalProcessBackend(model_name="main.flights.late_arrival", tracking_uri=f"sqlite:///{home / 'mlflow.db'}",
                                  log_dir=tmp_path)
    address = backend.start("c-v1", 1)
    try:
        deadline = time.monotonic() + 120
        while backend.status("c-v1").state == "starting" and time.monotonic() < deadline:
            time.sleep(0.25)
        readings: list[ProcessMemory | None] = []

        def counted(pid: int) -> ProcessMemory | None:
            readings.append(process_memory(pid))
            return readings[-1]

        monkeypatch.setattr(backend_module, "process_memory", counted)
        status = backend.status("c-v1")
        [reading] = readings
        assert status.state == "ready" and reading is not None and reading.pid == backend.pid("c-v1")
        assert (status.rss_bytes, status.pss_bytes) == (reading.rss_bytes, reading.pss_bytes)
    finally:
        backend.stop_all()
    assert not Path(socket_path(address)).parent.exists()


def test_replicas_and_the_fork_server_hold_no_registry_client(module_home, tmp_path, monkeypatch) -> None:
    """A replica loads the version's files from its artifact location, read once in a child of the fork
    server, so neither the replica nor the fork server maps MLflow's SQL store (SQLAlchemy, ~45 MB of
    pages a replica would otherwise share or replica)."""
    home, _ = module_home
    tracking = f"sqlite:///{home / 'mlflow.db'}"
    monkeypatch.setitem(forkserver.child_env, "MLFLOW_TRACKING_URI", tracking)
    monkeypatch.setitem(forkserver.child_env, "MLFLOW_REGISTRY_URI", tracking)
    backend = LocalProcessBackend(model_name="main.flights.late_arrival", tracking_uri=tracking, log_dir=tmp_path)
    try:
        backend.start("c-v1", 1)
        deadline = time.monotonic() + 120
        while backend.status("c-v1").state == "starting" and time.monotonic() < deadline:
            time.sleep(0.25)
        assert backend.status("c-v1").state == "ready"
        for pid in (backend.pid("c-v1"), forkserver.server_pid()):
            maps = Path(f"/proc/{pid}/maps").read_text()
            assert "sqlalchemy" not in maps, f"process {pid} maps SQLAlchemy"
    finally:
        backend.stop_all()


def test_only_a_local_artifact_location_is_loaded_directly(tmp_path, monkeypatch) -> None:
    """A replica reads a ``file://`` location itself; remote storage (Unity Catalog's) is reached only
    through ``models:/``, whose loader gets the registry's credentials; an unreadable registry leaves
    the replica to fail with the registry's own reason (and is asked again next time)."""
    answers = {1: "file:///home/m/artifacts", 2: "s3://bucket/models/m-2/artifacts", 3: "/local/m-3"}
    reads: list[int] = []

    def location(model_name: str, version: int, *, tracking_uri: str | None = None) -> str:
        reads.append(version)
        if version == 4:
            raise OSError("registry unreachable")
        return answers[version]

    monkeypatch.setattr(backend_module, "artifact_location", location)
    backend = LocalProcessBackend(model_name="m", tracking_uri="sqlite:///x.db", log_dir=tmp_path)
    assert [backend.location(v) for v in (1, 2, 3, 4)] == ["file:///home/m/artifacts", None, "/local/m-3", None]
    assert [backend.location(v) for v in (1, 2, 4)] == ["file:///home/m/artifacts", None, None]
    assert reads == [1, 2, 3, 4, 4]  # one read per version, a failed read is not kept


def test_socket_folders_of_killed_endpoints_are_removed(tmp_path) -> None:
    dead = subprocess.Popen(["true"])  # its pid is free once it has exited
    dead.wait()
    orphan = tmp_path / f"lakescore-replicas-{dead.pid}-abc"
    live = tmp_path / f"lakescore-replicas-{os.getpid()}-def"
    other = tmp_path / "lakescore-replicas-notapid-x"
    for folder in (orphan, live, other):
        folder.mkdir()
        (folder / "1.sock").touch()
    assert remove_orphan_socket_folders(tmp_path) == [orphan]
    assert not orphan.exists() and live.exists() and other.exists()


def test_a_fresh_status_asks_a_ready_replica_again(module_home, tmp_path) -> None:
    """Issue 12 review 5: a replica that answered once stayed ``ready`` for good, so a hung replica kept
    taking requests. A stopped process (SIGSTOP) is alive but answers nothing."""
    home, _ = module_home
    backend = LocalProcessBackend(model_name="main.flights.late_arrival", tracking_uri=f"sqlite:///{home / 'mlflow.db'}",
                                  log_dir=tmp_path)
    backend.start("c-v1", 1)
    pid = backend.pid("c-v1")
    try:
        deadline = time.monotonic() + 120
        while backend.status("c-v1").state == "starting" and time.monotonic() < deadline:
            time.sleep(0.25)
        assert backend.status("c-v1").state == "ready"
        os.kill(pid, signal.SIGSTOP)
        assert backend.status("c-v1").state == "ready"  # the cached answer
        hung = backend.status("c-v1", fresh=True)
        assert hung.state == "starting" and hung.detail.startswith("not answering its health check")
        os.kill(pid, signal.SIGCONT)
        assert backend.status("c-v1", fresh=True).state == "ready"
    finally:
        os.kill(pid, signal.SIGCONT)
        backend.stop_all()
