"""Jobs in children of the preloaded fork server: the value comes back, an exception is raised
here with its type and message, and a job over its time is killed."""

from __future__ import annotations

import os
import time

import pytest

from lakescore.errors import RequestError
from lakescore.serving import forkserver
from lakescore.serving.endpoint_app import parse_hold


def test_a_job_runs_in_a_child_of_the_fork_server() -> None:
    parent = forkserver.call(os.getppid)
    assert parent == forkserver.server_pid() and parent != os.getpid()
    assert forkserver.running()
    assert forkserver.call(pow, 3, 4) == 81


def test_an_error_in_the_child_is_raised_here_with_its_type_and_message() -> None:
    with pytest.raises(RequestError, match="X-Scale-Up-Timeout must be seconds between 0 and 3600; got 'soon'") as info:
        forkserver.call(parse_hold, "soon")
    assert info.value.http_status == 400


def test_a_child_over_its_time_is_killed() -> None:
    started = time.monotonic()
    child = forkserver.start(time.sleep, 60, what="a sleeper")
    with pytest.raises(TimeoutError, match="a sleeper sent no answer within 0.5 s"):
        child.result(0.5)
    assert time.monotonic() - started < 10
    assert not child.process.is_alive()


def test_child_env_reaches_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(forkserver.child_env, "LAKESCORE_TEST_CHILD_ENV", "seen")
    assert forkserver.call(os.getenv, "LAKESCORE_TEST_CHILD_ENV") == "seen"


def test_an_endpoints_registry_reaches_its_children_only_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(forkserver.child_env, "MLFLOW_TRACKING_URI", "sqlite:///before.db")
    with forkserver.children_env(MLFLOW_TRACKING_URI="sqlite:///endpoint.db", MLFLOW_REGISTRY_URI="sqlite:///endpoint.db"):
        assert forkserver.call(os.getenv, "MLFLOW_TRACKING_URI") == "sqlite:///endpoint.db"
    assert forkserver.child_env == {"MLFLOW_TRACKING_URI": "sqlite:///before.db"}  # a later backend reads its own
