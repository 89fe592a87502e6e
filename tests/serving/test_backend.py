"""The replica backend seam: the pod status mapping a pod backend uses, and the local process backend."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psutil
import pytest

from lakescore.serving.backend import LocalProcessBackend, pod_status


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


@pytest.mark.parametrize("start", ["preloaded_fork", "new_process"])
def test_a_local_copy_that_cannot_load_is_failed_with_the_reason(module_home, tmp_path, start) -> None:
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


def test_a_fresh_status_asks_a_ready_copy_again(module_home, tmp_path) -> None:
    """Issue 12 review 5: a copy that answered once stayed ``ready`` for good, so a hung copy kept
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
