"""The training fingerprint: which inputs count, and how a change is named."""

from dataclasses import replace

import yaml

from lakescore.config import load_project
from lakescore.training_fingerprint import TrainingFingerprint, training_fingerprint, user_packages


def _edit(project_dir, name, **changes):
    path = project_dir / f"{name}.yml"
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data))
    return load_project(project_dir)


def test_comments_and_key_order_do_not_count_but_values_do(project_dir):
    before = training_fingerprint(load_project(project_dir), 3)
    path = project_dir / "training.yml"
    path.write_text("# a comment only\n" + yaml.safe_dump(yaml.safe_load(path.read_text()), sort_keys=True))
    assert training_fingerprint(load_project(project_dir), 3).digest == before.digest
    model = yaml.safe_load(path.read_text())["model"]
    after = training_fingerprint(_edit(project_dir, "training", model={**model, "params": {"max_iter": 501}}), 3)
    assert after.changes(before) == ["training or scoring config"]
    assert after.digest != before.digest


def test_a_new_table_version_is_named_with_both_versions(project_dir):
    project = load_project(project_dir)
    before, after = training_fingerprint(project, 0), training_fingerprint(project, 2)
    assert after.changes(before) == ["source main.flights.flights version 0 -> 2"]
    assert after.changes(after) == []


def test_the_projects_own_packages_are_digested(project_dir, tmp_path, monkeypatch):
    package = tmp_path / "code" / "myrules"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "scoring.py").write_text("def has_departed(frame, params):\n    return frame['dep_time'].notna()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    project = _edit(project_dir, "scoring", module="myrules.scoring")
    assert user_packages(project) == ["myrules"]
    before = training_fingerprint(project, 0)
    (package / "scoring.py").write_text("def has_departed(frame, params):\n    return frame['dep_time'] > 0\n")
    after = training_fingerprint(project, 0)
    assert after.changes(before) == ["project code (myrules)"]


def test_the_fingerprint_round_trips_through_its_tag_text(project_dir):
    fingerprint = training_fingerprint(load_project(project_dir), 7)
    assert TrainingFingerprint.from_json(fingerprint.to_json()) == fingerprint
    newer = replace(fingerprint, libraries={**fingerprint.libraries, "scikit-learn": "0.0"})
    assert newer.changes(fingerprint) == ["libraries (scikit-learn)"]


def test_a_feature_table_version_and_a_lookup_spec_count(project_dir):
    project = load_project(project_dir)
    plain = training_fingerprint(project, 0)
    assert plain.digest == training_fingerprint(project, 0, feature_tables={}).digest
    before = training_fingerprint(project, 0, feature_tables={"main.flights.planes": 0})
    after = training_fingerprint(project, 0, feature_tables={"main.flights.planes": 3})
    assert after.changes(before) == ["feature table main.flights.planes version 0 -> 3"]
    assert TrainingFingerprint.from_json(after.to_json()) == after and after.digest != before.digest
    lookup = {"table_name": "main.flights.planes", "lookup_key": "tailnum", "feature_names": ["seats"]}
    specced = training_fingerprint(_edit(project_dir, "training", feature_lookups=[lookup]), 0,
                                   feature_tables={"main.flights.planes": 3})
    assert specced.changes(after) == ["training or scoring config"]
