"""The stale mark: an endpoint that follows the alias is stale once the alias moves (audited once per
reason, cleared when the alias comes back); one pinned by a deploy never is, and a check that a
deploy overtakes while it reads the registry marks nothing."""

from __future__ import annotations

import asyncio

import lakescore.serving.stale as stale_module
from lakescore.config import ServingConfig
from lakescore.serving.plan import EndpointPlan
from lakescore.serving.stale import StaleCheck
from lakescore.serving.state import ServingState


def follower(tmp_path) -> EndpointPlan:  # type: ignore[no-untyped-def]
    config = ServingConfig.model_validate({"inference_table": "main.s.inference"})
    return EndpointPlan(name="ep", model_name="main.s.m", version=1, selection="champion", input_columns={"a": "long"},
                        task="classification", settings=config, home=tmp_path, tracking_uri="sqlite://",
                        training_table="main.s.train", training_filter=None)


def test_a_follower_is_stale_while_the_alias_points_elsewhere(tmp_path, monkeypatch) -> None:
    plan, state = follower(tmp_path), ServingState(tmp_path)
    check = StaleCheck(served=lambda: plan, state=state)
    champion = {"v": 2}
    monkeypatch.setattr(stale_module, "alias_version", lambda model_name, alias: champion["v"])
    asyncio.run(check.check())
    asyncio.run(check.check())  # the same reason: audited once
    assert check.reason == ("champion is v2; this endpoint still serves v1, resolved when it started. "
                            "Redeploy with `lakescore serve --deploy 2` to serve it.")
    assert [e.detail for e in state.events("ml.endpoint.stale")] == [{"serving": 1, "champion": 2}]
    champion["v"] = 1  # the alias is moved back
    asyncio.run(check.check())
    assert check.reason == ""


def test_a_stale_check_that_a_deploy_overtakes_marks_nothing(tmp_path, monkeypatch) -> None:
    """Seen in a clean-clone run: the stale check read the alias (v1) while a deploy switched to a
    pinned v2, then marked the deployed endpoint stale."""
    served = [follower(tmp_path)]
    state = ServingState(tmp_path)
    check = StaleCheck(served=lambda: served[0], state=state)

    def alias_read_during_a_deploy(model_name: str, alias: str) -> int:
        plan = served[0]
        served[0] = plan.deployed(2, input_columns=plan.input_columns, task=plan.task, alias_version=1)
        return 3  # the alias moved too: stale for the plan read before, not for the deployed one

    monkeypatch.setattr(stale_module, "alias_version", alias_read_during_a_deploy)
    asyncio.run(check.check())
    assert served[0].version == 2 and served[0].selection == "deploy" and check.reason == ""
    monkeypatch.setattr(stale_module, "alias_version", lambda model_name, alias: 3)
    asyncio.run(check.check())  # pinned by the deploy: never stale
    assert check.reason == "" and state.events("ml.endpoint.stale") == []
