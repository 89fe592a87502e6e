"""``POST /deploy`` and ``lakescore serve --deploy N``: a redeploy under load fails no request and
every answer names the version that gave it; stale applies only to an endpoint that follows the alias.
Over a scripted backend: a deploy adopts the candidate's replica of its version and retires one of
another, and a failed or cancelled deploy leaves no ``next`` replica and is audited."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import httpx
import pytest
from serving_fakes import FakeBackend, fake_endpoint, ready_replica
from serving_helpers import (
    MODEL,
    Trained,
    assert_same_answers,
    chain_of,
    expected_rows,
    launch,
    ready_replicas,
    records,
)

from lakescore.runtime import LocalRuntime
from lakescore.serving.endpoint import Endpoint
from lakescore.serving.policy.candidates import Candidate
from lakescore.serving.policy.shadow import ShadowTally
from lakescore.serving.replicas.backend import ReplicaStatus

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def runtime(module_home) -> LocalRuntime:
    rt = LocalRuntime(module_home[0])
    rt.mlflow()
    return rt


async def deploy_marking_replicas_ready(ep: Endpoint, backend: FakeBackend, version: int) -> dict:  # type: ignore[type-arg]
    """Run ``ep.deploy(version)`` while the new replicas become ready (the health loop's part)."""
    task = asyncio.create_task(ep.deploy(version))
    while not task.done():
        for replica in ep.pool.of("next", "starting"):
            backend.states[replica.replica_id] = ReplicaStatus("ready")
        await ep.health.check()
        await asyncio.sleep(0.05)
    return await task


def test_a_deploy_reports_adopted_replicas_apart_from_started_ones(tmp_path, runtime: LocalRuntime) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, replicas={"min": 2, "max": 2})
        for _ in range(2):
            await ready_replica(ep, backend, "serve", 1)
        ep.candidates.candidate = Candidate(2, "classification", {"a": "long"})
        candidate = await ready_replica(ep, backend, "candidate", 2)
        report = await deploy_marking_replicas_ready(ep, backend, 2)
        assert (report["replicas_started"], report["adopted_replicas"], report["drained_replicas"]) == (1, 1, 2)
        assert candidate.role == "serve" and sorted(c.version for c in ep.autoscaler.live()) == [2, 2]
        [audited] = [e.detail for e in state.events("ml.deploy")]
        assert audited["adopted_replicas"] == 1 and audited["replicas_started"] == 1

    asyncio.run(scenario())


def test_a_deploy_retires_a_candidate_of_another_version(tmp_path, runtime: LocalRuntime) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path)
        await ready_replica(ep, backend, "serve", 1)
        ep.candidates.candidate = Candidate(3, "classification", {"a": "long"})
        ep.candidates.shadow = ShadowTally(3, 1, "classification", 1e-9, 1e-12)
        candidate = await ready_replica(ep, backend, "candidate", 3)
        report = await deploy_marking_replicas_ready(ep, backend, 2)
        assert (report["replicas_started"], report["adopted_replicas"]) == (1, 0)
        assert ep.candidates.candidate is None and ep.candidates.shadow is None
        assert candidate.replica_id in backend.stopped
        stops = [e.detail for e in state.events("ml.shadow.stop")]
        assert [(s["reason"], s["served_version"]) for s in stops] == [("endpoint ep now serves v2", 1)]

    asyncio.run(scenario())


def test_a_failed_or_cancelled_deploy_leaves_no_next_replica_and_is_audited(tmp_path, runtime: LocalRuntime) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, replicas={"min": 2, "max": 2})
        for _ in range(2):
            await ready_replica(ep, backend, "serve", 1)
        backend.fail_start = {4}  # the deploy's second replica cannot start
        with pytest.raises(OSError, match="no room"):
            await ep.deploy(2)
        assert ep.pool.of("next") == [] and backend.stopped == [backend.started[2]]
        cancelled = asyncio.create_task(ep.deploy(2))  # its replicas never become ready
        while len(ep.pool.of("next")) < 2:
            await asyncio.sleep(0.05)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert ep.pool.of("next") == [] and set(backend.started[4:]) <= set(backend.stopped)
        assert ep.plan.version == 1 and [c.version for c in ep.autoscaler.live()] == [1, 1]
        failed = [e.detail for e in state.events("ml.deploy.failed")]
        assert [(f["version"], f["previous_version"], f["error"].split(":")[0]) for f in failed] == \
            [(2, 1, "OSError"), (2, 1, "CancelledError")]

    asyncio.run(scenario())


def deploy_cli(home, config, version: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lakescore.cli", "serve", "--deploy", str(version), "--config-dir",
                           str(config), "--home", str(home)], capture_output=True, text=True, timeout=300)


def test_a_redeploy_under_load_fails_no_request_and_each_answer_names_its_version(
        module_home, trained: Trained, runtime: LocalRuntime) -> None:
    home, config = module_home
    ep = launch(home, config, endpoint_name="redeploy", replicas={"min": 1, "max": 1}, scale_interval_s=1)
    try:
        old = ready_replicas(ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica"))[0]
        frame = trained.requests.head(6)
        rows = records(frame, trained.input_columns)
        answers: list[tuple[float, int, str, list]] = []  # (sent at, status, X-Model-Version, predictions)
        stop = threading.Event()

        def client_loop() -> None:
            with httpx.Client(base_url=ep.address, headers={"Authorization": f"Bearer {ep.token}"},
                              timeout=120) as client:
                while not stop.is_set():
                    sent = time.monotonic()
                    resp = client.post("/invocations", json={"dataframe_records": rows})
                    body = resp.json()
                    answers.append((sent, resp.status_code, resp.headers.get("x-model-version", ""),
                                    body.get("predictions", body)))

        threads = [threading.Thread(target=client_loop) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            while len(answers) < 30:
                time.sleep(0.05)
            done = deploy_cli(home, config, 2)
            switched = time.monotonic()
            before = len(answers)
            while len(answers) < before + 60:
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert [a[1] for a in answers] == [200] * len(answers)
        v1, v2 = expected_rows(chain_of(runtime, 1), frame), expected_rows(chain_of(runtime, 2), frame)
        for _, _, header, predictions in answers:
            versions = {p["model_version"] for p in predictions}
            assert len(versions) == 1 and str(versions.pop()) == header  # the reply names the version that answered
            assert_same_answers(predictions, v1 if header == "1" else v2)
        assert {a[2] for a in answers if a[0] > switched} == {"2"}  # sent after the switch: the new version
        assert {a[2] for a in answers} == {"1", "2"}

        status = ep.wait_for(lambda s: old["replica_id"] not in [c["replica_id"] for c in s["replicas"]],
                             what="the old replica drained and stopped")
        assert status["version"] == 2 and status["pinned_by"] == "deploy" and not status["stale"]
        assert [c["version"] for c in ready_replicas(status)] == [2]
        deployed = [e.detail for e in ep.events("ml.deploy") if e.endpoint == "redeploy"]
        assert [(d["previous_version"], d["version"], d["replicas_started"], d["drained_replicas"]) for d in deployed] \
            == [(1, 2, 1, 1)]
    finally:
        ep.stop()


def test_only_an_endpoint_that_follows_the_alias_is_stale_and_a_deploy_of_the_champion_clears_it(
        module_home, trained: Trained, runtime: LocalRuntime) -> None:
    home, config = module_home
    client = runtime.mlflow().MlflowClient()
    client.set_registered_model_alias(MODEL, "champion", "1")
    following = launch(home, config, endpoint_name="follows", replicas={"min": 0, "max": 1}, scale_interval_s=1)
    try:
        pinned_config = config.parent / "config_pinned"
        if not pinned_config.exists():
            import shutil

            shutil.copytree(config, pinned_config)
        pinned = launch(home, pinned_config, endpoint_name="pinned", replicas={"min": 0, "max": 1},
                        scale_interval_s=1, model_selection="pinned_version", model_version=1)
        try:
            client.set_registered_model_alias(MODEL, "champion", "2")
            status = following.wait_for(lambda s: s["stale"], what="stale", timeout_s=30)
            assert status["stale_reason"] == ("champion is v2; this endpoint still serves v1, resolved when it "
                                              "started. Redeploy with `lakescore serve --deploy 2` to serve it.")
            time.sleep(2.5)  # two more stale checks of the pinned endpoint
            assert pinned.status()["stale"] is False and pinned.status()["pinned_by"] == "pinned_version"
        finally:
            pinned.stop()
        reply = following.client.post("/deploy", json={"version": 2}, timeout=300)  # at zero replicas: switches at once
        assert reply.status_code == 200, reply.text
        assert reply.json()["replicas_started"] == 0 and reply.json()["pinned_by"] == "champion"
        status = following.status()
        assert status["version"] == 2 and not status["stale"] and status["stale_reason"] == ""
        answered = following.score(records(trained.requests.head(2), trained.input_columns))
        assert answered.status_code == 200 and answered.headers["x-model-version"] == "2"
    finally:
        following.stop()
        client.set_registered_model_alias(MODEL, "champion", "1")


def test_a_deploy_of_an_unknown_or_the_served_version_is_refused(module_home) -> None:
    home, config = module_home
    ep = launch(home, config, endpoint_name="refuse", replicas={"min": 0, "max": 1})
    try:
        unknown = ep.client.post("/deploy", json={"version": 99})
        assert unknown.status_code == 404 and unknown.json()["error_code"] == "model_not_found"
        same = ep.client.post("/deploy", json={"version": 1})
        assert same.status_code == 409 and same.json()["message"] == "endpoint refuse already serves v1"
        bad = ep.client.post("/deploy", json={"version": "2"})
        assert bad.status_code == 400 and "version must be a whole number" in bad.json()["message"]
        assert ep.status()["version"] == 1
    finally:
        ep.stop()
    missing = deploy_cli(home, config, 2)  # the endpoint is gone
    assert missing.returncode != 0 and "no endpoint 'refuse' is running" in missing.stderr + missing.stdout
