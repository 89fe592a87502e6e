"""The stale mark: an endpoint that follows the alias is stale once the alias moves or no longer
resolves (audited once per reason, cleared when the alias comes back); any endpoint is stale once
its served version is deleted, and then starts no new replica of it (nor a cold-path process); one
pinned by a deploy is otherwise never stale, and a check that a deploy overtakes while it reads the
registry marks nothing."""

from __future__ import annotations

import asyncio

import pytest
from serving_fakes import fake_endpoint, one_row, ready_replica

import lakescore.serving.policy.stale as stale_module
from lakescore.config import ServingConfig
from lakescore.errors import ModelNotFoundError
from lakescore.serving.plan import EndpointPlan, RegistryView
from lakescore.serving.policy.stale import StaleCheck
from lakescore.serving.replicas.backend import ReplicaStatus
from lakescore.serving.state.store import ServingState


class Registry:
    """A stand-in for the registry read (``registry_view``): the alias's version and whether the
    served version is registered; ``asked`` records the alias each read asked for."""

    def __init__(self, champion: int | None, *, registered: bool = True) -> None:
        self.champion, self.registered = champion, registered
        self.asked: list[str | None] = []

    def __call__(self, model_name: str, version: int, *, alias: str | None) -> RegistryView:
        self.asked.append(alias)
        return RegistryView(None if alias is None else self.champion, self.registered)


def follower(tmp_path) -> EndpointPlan:  # type: ignore[no-untyped-def]
    config = ServingConfig.model_validate({"inference_table": "main.s.inference"})
    return EndpointPlan(name="ep", model_name="main.s.m", version=1, selection="champion", input_columns={"a": "long"},
                        task="classification", settings=config, home=tmp_path, tracking_uri="sqlite://",
                        training_table="main.s.train", training_filter=None)


def test_a_follower_is_stale_while_the_alias_points_elsewhere(tmp_path, monkeypatch) -> None:
    plan, state = follower(tmp_path), ServingState(tmp_path)
    check = StaleCheck(served=lambda: plan, state=state)
    registry = Registry(2)
    monkeypatch.setattr(stale_module, "registry_view", registry)
    asyncio.run(check.check())
    asyncio.run(check.check())  # the same reason: audited once
    assert check.reason == ("champion is v2; this endpoint still serves v1, resolved when it started. "
                            "Redeploy with `lakescore serve --deploy 2` to serve it.")
    assert [e.detail for e in state.events("ml.endpoint.stale")] == [{"serving": 1, "champion": 2,
                                                                      "cause": "alias_moved"}]
    registry.champion = 1  # the alias is moved back
    asyncio.run(check.check())
    assert check.reason == ""


def test_a_stale_check_that_a_deploy_overtakes_marks_nothing(tmp_path, monkeypatch) -> None:
    """Seen in a clean-clone run: the stale check read the alias (v1) while a deploy switched to a
    pinned v2, then marked the deployed endpoint stale."""
    served = [follower(tmp_path)]
    state = ServingState(tmp_path)
    check = StaleCheck(served=lambda: served[0], state=state)

    def alias_read_during_a_deploy(model_name: str, version: int, *, alias: str | None) -> RegistryView:
        plan = served[0]
        served[0] = plan.deployed(2, input_columns=plan.input_columns, task=plan.task, alias_version=1)
        return RegistryView(3, False)  # the alias moved, v1 deleted: stale for the plan read before, not the new one

    monkeypatch.setattr(stale_module, "registry_view", alias_read_during_a_deploy)
    asyncio.run(check.check())
    assert served[0].version == 2 and served[0].selection == "deploy" and check.reason == ""
    assert check.deleted == set()
    monkeypatch.setattr(stale_module, "registry_view", Registry(3))
    asyncio.run(check.check())  # pinned by the deploy: never stale
    assert check.reason == "" and state.events("ml.endpoint.stale") == []


def test_an_alias_that_no_longer_resolves_is_stale_once(tmp_path, monkeypatch) -> None:
    """Seen: alias moved to v2 (stale), then v2 deleted: `stale: false` with an empty reason."""
    plan, state = follower(tmp_path), ServingState(tmp_path)
    check = StaleCheck(served=lambda: plan, state=state)
    registry = Registry(2)
    monkeypatch.setattr(stale_module, "registry_view", registry)
    asyncio.run(check.check())
    registry.champion = None  # v2 deleted: the alias on it is gone
    asyncio.run(check.check())
    asyncio.run(check.check())
    assert check.reason == ("alias champion no longer resolves (it, or the version it pointed at, was deleted); "
                            "this endpoint still serves v1, resolved when it started. Set the alias again, or "
                            "redeploy with `lakescore serve --deploy N`.")
    assert check.refusal(1) == ""  # v1 is registered: replicas of it still start
    assert [e.detail["cause"] for e in state.events("ml.endpoint.stale")] == ["alias_moved", "alias_unresolved"]


def test_a_deleted_served_version_is_stale_once_and_starts_nothing_more(tmp_path, monkeypatch) -> None:
    """Seen: v3 deployed, then deleted: `stale: false`, and a killed replica was replaced by a new one
    of v3 in 4 s."""
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, replicas={"min": 1, "max": 2}, target_rpm_per_replica=1)
        ep.plan = ep.plan.deployed(3, input_columns={"a": "long"}, task="classification", alias_version=1)
        ep.autoscaler.version = 3
        view = Registry(1, registered=False)
        monkeypatch.setattr(stale_module, "registry_view", view)
        held = await ready_replica(ep, backend, "serve", 3)
        await ep.stale.check()
        await ep.stale.check()
        assert view.asked == [None, None]  # pinned by the deploy: the alias is not read
        status = ep.status()
        assert status["stale"] and status["stale_reason"] == (
            "v3 was deleted from the registry; this endpoint keeps answering with the warm replicas it holds, and "
            "starts no new replica of v3 (its files may be gone). To serve again, deploy a registered version with "
            "`lakescore serve --deploy N`.")
        assert [e.detail for e in state.events("ml.endpoint.stale")] == [
            {"serving": 3, "champion": None, "cause": "version_deleted"}]
        request = one_row({"a": "long"}, {"a": 5})
        reply = await ep.answer(request, request.to_body(), hold_s=None)  # the warm replica answers
        assert reply.status == 200 and reply.payload["served"] == "warm"
        ep.autoscaler.arrivals, ep.autoscaler.reading = 100, (ep.autoscaler.reading[0] - 60, 0)
        decision = await ep.autoscaler.scale_pass()  # wants a second replica
        assert decision.action == "hold" and decision.reason.endswith(
            "but v3 was deleted from the registry, so no new replica of it starts")
        backend.states[held.replica_id] = ReplicaStatus("failed", "killed")  # the replica dies: no replacement
        await ep.health.check()
        await ep.autoscaler.scale_pass()
        assert backend.started == [held.replica_id] and ep.pool.replicas == {}
        assert await ep._start_replica("serve", 3) is None and not ep.autoscaler.can_start()
        with pytest.raises(ModelNotFoundError, match="endpoint ep holds no ready replica of v3, and v3 was deleted "
                                                     "from the registry, so no new replica of it starts, nor a cold"):
            await ep.answer(request, request.to_body(), hold_s=None)
        assert len(state.events("ml.endpoint.stale")) == 1
        view.registered = True  # the check sees it again (a registry that was behind): replicas start again
        await ep.stale.check()
        assert ep.stale.reason == "" and ep.autoscaler.can_start()

    asyncio.run(scenario())


def test_a_served_version_deleted_from_the_registry_keeps_its_warm_replica_and_starts_no_other(
        trained, tmp_path) -> None:
    """A real endpoint following champion (v1): the alias moves to v2 (stale), v2 is deleted (the alias no
    longer resolves), then v1 itself: the warm replica keeps answering; once it is killed no replica of v1
    starts again, and a request is refused with model_not_found."""
    import os
    import shutil
    import signal
    import time

    from serving_helpers import MODEL, launch, ready_replicas, records

    from lakescore.runtime import LocalRuntime

    shutil.copytree(trained.home, tmp_path / ".lakescore", ignore=shutil.ignore_patterns("serving"))
    shutil.copytree(trained.config_dir, tmp_path / "config")  # its own registry: versions are deleted here
    home = tmp_path / ".lakescore"
    registry = LocalRuntime(home).mlflow().MlflowClient()
    ep = launch(home, tmp_path / "config", endpoint_name="deleted", scale_interval_s=1)
    try:
        replica = ready_replicas(ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica"))[0]
        registry.set_registered_model_alias(MODEL, "champion", "2")
        ep.wait_for(lambda s: s["stale_reason"].startswith("champion is v2"), what="stale: alias moved", timeout_s=60)
        registry.delete_model_version(MODEL, "2")
        status = ep.wait_for(lambda s: s["stale_reason"].startswith("alias champion no longer resolves"),
                             what="stale: alias unresolved", timeout_s=60)
        assert status["stale"] is True
        registry.delete_model_version(MODEL, "1")
        status = ep.wait_for(lambda s: s["stale_reason"].startswith("v1 was deleted from the registry"),
                             what="stale: served version deleted", timeout_s=60)
        rows = records(trained.requests.head(2), trained.input_columns)
        answered = ep.score(rows)
        assert answered.status_code == 200 and answered.json()["served"] == "warm"  # the replica it holds
        os.kill(replica["pid"], signal.SIGKILL)
        ep.wait_for(lambda s: s["replicas"] == [], what="the killed replica dropped", timeout_s=60)
        time.sleep(5)  # before: a new replica of the deleted version within 4 s
        status = ep.status()
        assert status["replicas"] == [] and status["stale"] is True
        refused = ep.score(rows)
        assert refused.status_code == 404 and refused.json()["error_code"] == "model_not_found"
        assert "no ready replica of v1, and v1 was deleted from the registry" in refused.json()["message"]
        assert [e.detail["cause"] for e in ep.events("ml.endpoint.stale")] == [
            "alias_moved", "alias_unresolved", "version_deleted"]
        assert len(ep.events("ml.replica.failed")) == 1
    finally:
        ep.stop()
