"""The local tools: preview of train and score, and the smoke probe on a sample file."""

from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from fixtures.configs import CONFIG

from lakescore.admission.evidence import admit
from lakescore.chain import FittedChain
from lakescore.config import load_project
from lakescore.errors import LakescoreError
from lakescore.lookup import join_all
from lakescore.packaging import log_and_register
from lakescore.workflows.preview import preview_score, preview_train, smoke_probe


def test_preview_train_lints_rules_and_lists_the_checks():
    lines = preview_train(load_project(CONFIG))
    assert "  eligibility rule cancelled v1: lint passed" in lines
    assert "  whole chain: would probe: repeat, chunks:1, chunks:7" in lines
    assert "  compiled plan: would compare with the step-by-step walk: agree:whole, agree:rows, agree:empty, " \
           "agree:nulls" in lines
    assert any(line.endswith("empty, perturb, fresh_module") for line in lines)


def test_preview_train_shows_a_custom_step_that_fails_the_lint(project_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "admission"))
    path = project_dir / "training.yml"
    cfg = yaml.safe_load(path.read_text())
    cfg["preprocessing"].insert(0, {"step": "custom", "name": "batch_centred", "columns": ["dep_delay"],
                                    "ref": "broken_user_code:batch_centred_step"})
    path.write_text(yaml.safe_dump(cfg))
    text = "\n".join(preview_train(load_project(project_dir)))
    assert "custom step batch_centred (column, inference_context=row): lint FAILED: Custom step 'batch_centred' " \
           "reads a batch statistic (broken_user_code.py line" in text
    assert "frame['dep_delay'].mean()" in text


def _with_lookups(config, rows, demo_tables):
    """``rows`` with the config's feature lookups joined: a smoke sample carries the joined columns."""
    return join_all(rows, demo_tables, [lookup.spec() for lookup in config.training.feature_lookups])


def test_smoke_probe_runs_every_check_on_a_csv_sample(tmp_path, runtime, lookup_tables, flights_sample):
    sample = tmp_path / "sample.csv"
    config = load_project(CONFIG)
    flights_sample.head(300).to_csv(sample, index=False)  # as exported: the lookups are joined from the local tables
    lookup_tables(runtime)
    lines, admitted = smoke_probe(config, sample, runtime=runtime)
    assert lines[0].startswith("Feature lookup main.flights.weather@v0: joined")
    assert admitted and lines[-1] == "Admitted."
    assert lines.count("    fresh_module  passed") == 10  # eligibility rule, 6 steps, model, risk_band, chain
    assert "  rule risk_band" in lines  # the output rule is probed, as training would
    assert "  model LogisticRegression" in lines


def test_smoke_probe_names_the_problem_with_a_bad_sample(tmp_path, flights_sample, demo_tables):
    config = load_project(CONFIG)
    with pytest.raises(LakescoreError, match="does not exist"):
        smoke_probe(config, tmp_path / "nope.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(LakescoreError, match="cannot be read"):
        smoke_probe(config, tmp_path / "empty.csv")
    on_time = flights_sample[(flights_sample["arr_delay"] <= 15) & (flights_sample["month"] <= 9)].head(100)
    on_time = _with_lookups(config, on_time, demo_tables)
    on_time.to_csv(tmp_path / "one_class.csv", index=False)
    with pytest.raises(LakescoreError, match="cannot fit the recipe and model on .*one_class.csv"):
        smoke_probe(config, tmp_path / "one_class.csv")


def test_smoke_probe_refuses_a_sample_under_16_rows(tmp_path, flights_sample):
    sample = tmp_path / "sample.parquet"
    flights_sample.head(10).to_parquet(sample)
    with pytest.raises(LakescoreError, match="has 10 rows; the probe needs at least 16"):
        smoke_probe(load_project(CONFIG), sample)


def test_preview_score_admits_a_certified_version_and_reports_no_rules(runtime, project_dir, small_chain, flights_sample):
    chain = FittedChain(small_chain.input_columns[:-1], small_chain.feature_columns, small_chain.steps,
                        small_chain.model, small_chain.task, small_chain.classes, rules=())
    runtime.mlflow()
    with mlflow.start_run():
        log_and_register(chain, example=flights_sample.head(5), name="main.flights.late_arrival", alias="champion",
                         evidence=admit(chain, flights_sample.iloc[1000:]))
    lines = preview_score(load_project(project_dir), runtime)
    assert lines[0] == "Model main.flights.late_arrival v1 (champion)"
    assert lines[1].startswith("Admission: admitted for batch_compute=spark (apply_probed=True, apply_probed_builtin=True")
    assert lines[2] == "Project scoring rules: disabled"


def test_sample_with_lookups_joins_as_training_does_unless_the_sample_carries_them(tmp_path, runtime, lookup_tables,
                                                                                 flights_sample, demo_tables):
    from lakescore.workflows.preview import read_sample, sample_with_lookups

    lookup_tables(runtime)
    config = load_project(CONFIG)
    flights_sample.head(300).to_csv(tmp_path / "sample.csv", index=False)  # as exported: no lookup columns
    sample = read_sample(tmp_path / "sample.csv")
    joined, lines = sample_with_lookups(config, runtime, sample, source="sample.csv")
    assert lines == ["Feature lookup main.flights.weather@v0: joined temp, wind_speed, precip, visib by origin, "
                     "time_hour",
                     "Feature lookup main.flights.planes@v0: joined plane_year, seats, engines by tailnum"]
    added = ["temp", "wind_speed", "precip", "visib", "plane_year", "seats", "engines"]
    expected = _with_lookups(config, flights_sample.head(300), demo_tables)[added]  # in memory, from the package
    assert list(joined.columns) == [*sample.columns, *added]
    pd.testing.assert_frame_equal(joined[added].reset_index(drop=True), expected.reset_index(drop=True),
                                  check_dtype=False)
    assert joined["temp"].notna().sum() > 250 and joined["seats"].isna().any()  # matched, and a tailnum without a plane
    carried, lines = sample_with_lookups(config, None, joined, source="joined.csv")  # exported joined: kept as it is
    assert carried is joined
    assert lines[0] == "Feature lookup main.flights.weather: the sample carries temp, wind_speed, precip, visib; not joined"


def test_smoke_probe_says_which_columns_a_sample_must_carry_without_the_feature_tables(tmp_path, runtime,
                                                                                       lookup_tables, flights_sample):
    from lakescore.errors import ConfigError, FeatureLookupError

    sample = tmp_path / "sample.csv"
    flights_sample.head(300).to_csv(sample, index=False)
    config = load_project(CONFIG)
    with pytest.raises(FeatureLookupError, match=r"main.flights.weather is not in the local runtime .*give a sample "
                                                 r"that already carries temp, wind_speed, precip, visib \(from "
                                                 r"main.flights.weather by origin, time_hour\); plane_year, seats, "
                                                 r"engines \(from main.flights.planes by tailnum\)"):
        smoke_probe(config, sample, runtime=runtime)
    with pytest.raises(FeatureLookupError, match="no local runtime was given"):
        smoke_probe(config, sample)
    lookup_tables(runtime)
    no_hour = tmp_path / "no_hour.csv"  # a column the model reads, that no lookup adds
    flights_sample.head(300).drop(columns=["hour"]).to_csv(no_hour, index=False)
    with pytest.raises(ConfigError, match=r"no_hour.csv lacks column\(s\) \['hour'\] that config/training.yml "
                                          r"data.feature_columns or a scoring rule reads"):
        smoke_probe(config, no_hour, runtime=runtime)
