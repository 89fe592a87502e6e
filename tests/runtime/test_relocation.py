"""A local home is a folder a user can copy or move: the copy scores from its own artifacts, with
the original gone, and MLflow's database names no other home afterwards."""

import dataclasses
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import mlflow
import pytest

from lakescore.config import load_project
from lakescore.demo_data import INCOMING
from lakescore.packaging import log_and_register
from lakescore.runtime import LocalRuntime
from lakescore.workflows.score import score

NAME = "main.flights.late_arrival"


@pytest.fixture
def original(tmp_path: Path, flights_sample, small_chain, small_evidence) -> LocalRuntime:
    """A home with ten incoming flights and ``small_chain`` registered as v1 (alias champion)."""
    home = LocalRuntime(tmp_path / "original" / ".lakescore")
    home.write_table(INCOMING, flights_sample.head(10))
    home.mlflow()
    with mlflow.start_run():
        log_and_register(small_chain, example=flights_sample.head(5), name=NAME, alias="champion",
                         evidence=small_evidence)
    return home


def _single_node(project_dir: Path):
    project = load_project(project_dir)
    return dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))


def _dump(home: Path) -> str:
    with closing(sqlite3.connect(home / "mlflow.db")) as db:
        return "\n".join(db.iterdump())


def test_a_moved_home_and_then_a_copy_of_it_score_from_their_own_artifacts_with_the_original_gone(
        original, project_dir, tmp_path, small_chain, flights_sample):
    made = _dump(original.home)
    LocalRuntime(original.home).mlflow()  # opened where it was made: the database is left as it is
    assert _dump(original.home) == made
    project = _single_node(project_dir)
    expected = small_chain.predict(flights_sample.head(10))  # independent: the chain in memory
    moved = tmp_path / "moved home" / ".lakescore"  # a space: file URIs are percent-encoded
    moved.parent.mkdir()
    shutil.move(original.home, moved)
    copied = tmp_path / "copied" / ".lakescore"
    for gone, there in ((original.home, moved), (moved, copied)):
        if there == copied:
            shutil.copytree(moved, copied)
            shutil.rmtree(moved)
        assert not gone.exists()
        run = score(project, LocalRuntime(there))
        got = run.predictions.set_index("flight_id").loc[flights_sample.head(10)["flight_id"]]
        assert run.plan.model_version == 1 and len(got) == 10
        assert got["scoring_status"].tolist() == expected["scoring_status"].tolist()
        assert got["probability"].tolist() == expected["probability"].tolist()
        dump = _dump(there)
        assert str(gone) not in dump and gone.as_uri() not in dump and str(original.home) not in dump
        assert f"{there.as_uri()}/mlartifacts/models/" in dump  # the version's storage location, here


def test_a_home_copied_without_its_artifacts_names_the_folder_and_does_not_advise_retraining(
        original, project_dir, tmp_path):
    there = tmp_path / "copy" / ".lakescore"
    shutil.copytree(original.home, there, ignore=shutil.ignore_patterns("mlartifacts"))
    with pytest.raises(Exception) as caught:
        score(_single_node(project_dir), LocalRuntime(there))
    message = str(caught.value)
    storage = next((original.home / "mlartifacts" / "models").iterdir()).name  # the logged model's id
    assert f"model_artifacts_missing: artifacts of {NAME} v1 are expected at " \
           f"{there / 'mlartifacts' / 'models' / storage / 'artifacts'}, which does not exist: was the home moved" \
           in message
    assert "retrain" not in message.lower() and "uncertified" not in message
