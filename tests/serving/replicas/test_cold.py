"""The cold path: a child forked from the preloaded fork server loads the version and scores exactly
as batch scoring does; the client's fallback (a fresh process) answers the same."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pandas as pd
import pytest
from serving_helpers import MODEL, Trained, assert_same_answers, chain_of, expected_rows, records

from lakescore.errors import ServingError
from lakescore.runtime import LocalRuntime
from lakescore.serving import forkserver
from lakescore.serving.replicas.cold import run_cold, score_cold, score_cold_sync


def split_body(frame: pd.DataFrame, columns: tuple[str, ...]) -> bytes:
    rows = records(frame, columns)
    return json.dumps({"dataframe_split": {"columns": list(columns),
                                           "data": [[row[c] for c in columns] for row in rows]}}).encode()


@pytest.fixture(scope="module")
def tracking(module_home: tuple[Path, Path]) -> str:
    return f"sqlite:///{module_home[0] / 'mlflow.db'}"


def test_the_cold_path_runs_in_a_child_of_the_fork_server_and_answers_as_batch_scoring(
        trained: Trained, module_home: tuple[Path, Path], tracking: str) -> None:
    reply = asyncio.run(run_cold(model_uri=f"models:/{MODEL}/2", version=2, tracking_uri=tracking,
                                 body=split_body(trained.requests, trained.input_columns), timeout_s=120))
    assert reply.parent_pid == forkserver.server_pid()  # forked from the preloaded fork server ...
    assert reply.parent_pid != os.getpid() and reply.pid not in (os.getpid(), reply.parent_pid)  # ... not here
    rows = json.loads(reply.payload)["predictions"]
    want = expected_rows(chain_of(LocalRuntime(module_home[0]), 2), trained.requests)  # the batch routes' call
    assert_same_answers(rows, want)
    assert {(r["served"], r["model_version"]) for r in rows} == {("cold", 2)}
    assert {r["scoring_status"] for r in rows} == {"predicted", "excluded"}  # the picked rows hold both


def test_score_cold_and_the_clients_fresh_process_give_the_same_rows(trained: Trained, tracking: str) -> None:
    body = split_body(trained.requests.head(6), trained.input_columns)
    forked = asyncio.run(score_cold(model_uri=f"models:/{MODEL}/1", version=1, tracking_uri=tracking, body=body,
                                    timeout_s=120))
    fresh = score_cold_sync(model_uri=f"models:/{MODEL}/1", version=1, tracking_uri=tracking, body=body,
                            timeout_s=120)
    assert len(forked) == 6
    assert_same_answers(forked, fresh)


def test_a_version_that_does_not_exist_is_a_serving_error_naming_it(trained: Trained, tracking: str) -> None:
    with pytest.raises(ServingError, match=f"could not score with models:/{MODEL}/99: .*Check that the version"):
        asyncio.run(score_cold(model_uri=f"models:/{MODEL}/99", version=99, tracking_uri=tracking,
                               body=split_body(trained.requests.head(1), trained.input_columns), timeout_s=120))
