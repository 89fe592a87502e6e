"""Config validation: every problem in one message, each naming file, key, bad value and fix."""

from pathlib import Path

import pytest
import yaml

from lakescore.cli import main
from lakescore.config import load_project
from lakescore.errors import ConfigError


def _edit(folder: Path, name: str, **changes) -> None:
    path = folder / name
    data = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if value is None and key in data:
            del data[key]
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data))


def test_the_repository_config_is_valid():
    project = load_project(Path(__file__).resolve().parents[1] / "config")
    assert project.inference.spark_udf_prediction_batch_rows == 10000
    assert project.training.model.class_name == "LogisticRegression"


def test_out_of_range_batch_rows_names_file_key_value_and_range(project_dir):
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=0)
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert "config/inference.yml: spark_udf_prediction_batch_rows must be between 1 and 100000; got 0" in str(err.value)


def test_every_problem_of_every_file_is_listed_at_once(project_dir):
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=100001, batch_compte="spark",
          score_source_table=None)
    _edit(project_dir, "training.yml", registry={"model_name": "late_arrival"})
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    problems = err.value.problems
    assert len(problems) == 4, problems
    text = str(err.value)
    assert "config/inference.yml: unknown key 'batch_compte' (did you mean 'batch_compute'?)" in text
    assert "config/inference.yml: missing required key 'score_source_table'" in text
    assert "got 100001" in text
    assert "config/training.yml: registry.model_name must be a three-part table name" in text


def test_a_bad_choice_lists_the_allowed_values(project_dir):
    _edit(project_dir, "inference.yml", batch_compute="gpu")
    with pytest.raises(ConfigError, match=r"batch_compute must be 'spark' or 'single_node'; got 'gpu'"):
        load_project(project_dir)


def test_pinned_version_needs_a_model_version(project_dir):
    _edit(project_dir, "inference.yml", score_model_selection="pinned_version", model_version=None)
    with pytest.raises(ConfigError, match="model_version is required when score_model_selection is 'pinned_version'"):
        load_project(project_dir)


def test_the_cli_prints_the_problems_and_exits_2(project_dir, capsys):
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=-5)
    assert main(["score", "--config-dir", str(project_dir), "--home", str(project_dir / "home")]) == 2
    err = capsys.readouterr().err
    assert "invalid_config" in err and "got -5" in err


@pytest.mark.parametrize("value,expected", [
    (True, "must be a number between 1 and 100000; got True"),
    ("5000", "must be a number between 1 and 100000; got '5000'"),
    (2.5, "must be a whole number between 1 and 100000; got 2.5"),
])
def test_a_batch_size_that_is_not_a_whole_number_says_what_is_allowed(project_dir, value, expected):
    _edit(project_dir, "inference.yml", spark_udf_prediction_batch_rows=value)
    with pytest.raises(ConfigError) as err:
        load_project(project_dir)
    assert f"config/inference.yml: spark_udf_prediction_batch_rows {expected}" in str(err.value)
