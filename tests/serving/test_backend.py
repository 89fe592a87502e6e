"""The replica backend seam: pod states (Kubernetes) and the local process backend."""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest

from lakescore.serving.backend import KubernetesPodBackend, LocalProcessBackend, pod_status


def pod(phase: str, **conditions: tuple[str, str]) -> dict[str, Any]:
    return {"status": {"phase": phase, "conditions": [
        {"type": kind, "status": status, "message": message} for kind, (status, message) in conditions.items()]}}


def test_an_unschedulable_pod_is_starting_and_waits_for_room() -> None:
    message = "0/3 nodes are available: 3 Insufficient memory."
    status = pod_status(pod("Pending", PodScheduled=("False", message)))
    assert (status.state, status.detail) == ("starting", f"waiting for room in the cluster: {message}")


def test_pod_phases_map_to_copy_states() -> None:
    assert pod_status(pod("Pending", PodScheduled=("True", ""))).state == "starting"
    assert pod_status(pod("Running", Ready=("False", ""))).detail == "container running, loading the model"
    assert pod_status(pod("Running", Ready=("True", ""))).state == "ready"
    assert pod_status({"status": {"phase": "Failed", "reason": "OOMKilled"}}).detail == "pod failed: OOMKilled"
    assert pod_status(None).state == "stopped"


class FakePods:
    """Stands in for the cluster's pod API (the one thing that cannot exist here)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}

    def create_pod(self, name: str, *, model_uri: str) -> str:
        self.pods[name] = {"model_uri": model_uri, **pod("Pending", PodScheduled=("False", "no nodes"))}
        return f"http://{name}.serving.svc:8080"

    def read_pod(self, name: str) -> dict[str, Any] | None:
        return self.pods.get(name)

    def delete_pod(self, name: str) -> None:
        self.pods.pop(name, None)


def test_the_pod_backend_goes_through_the_seam() -> None:
    pods = FakePods()
    backend = KubernetesPodBackend(pods, model_name="main.flights.late_arrival")
    assert backend.start("ep-serve-v3-1", 3) == "http://ep-serve-v3-1.serving.svc:8080"
    assert pods.pods["ep-serve-v3-1"]["model_uri"] == "models:/main.flights.late_arrival/3"
    assert backend.status("ep-serve-v3-1").detail == "waiting for room in the cluster: no nodes"
    backend.stop("ep-serve-v3-1")
    assert backend.status("ep-serve-v3-1").state == "stopped"


@pytest.mark.parametrize("start", ["preloaded_fork", "new_process"])
def test_a_local_copy_that_cannot_load_is_failed_with_the_reason(module_home, tmp_path, start) -> None:
    home, _ = module_home
    backend = LocalProcessBackend(model_name="main.flights.late_arrival", tracking_uri=f"sqlite:///{home / 'mlflow.db'}",
                                  token="t", log_dir=tmp_path, max_body_bytes=1024, max_rows=10, start=start)
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
