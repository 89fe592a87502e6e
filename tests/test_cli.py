"""The lakescore command's own behaviour (subcommands are tested with their modules)."""

from lakescore.cli import build_parser, main


def test_every_subcommand_takes_config_dir():
    parser = build_parser()
    for command in ("train", "score", "publish", "monitor", "demo"):
        assert parser.parse_args([command, "--config-dir", "other"]).config_dir == "other"


def test_every_subcommand_takes_catalog_and_schema():
    parser = build_parser()
    for command in ("train", "score", "publish", "monitor", "demo", "serve"):
        args = parser.parse_args([command, "--catalog", "dev", "--schema", "flights_alice"])
        assert (args.catalog, args.schema) == ("dev", "flights_alice")
    assert (parser.parse_args(["score"]).catalog, parser.parse_args(["score"]).schema) == (None, None)


def test_the_schema_flag_reaches_the_config_loader(project_dir, capsys):
    assert main(["score", "--config-dir", str(project_dir), "--schema", "flights-dev",
                 "--home", str(project_dir / "home")]) == 2
    err = capsys.readouterr().err
    assert "invalid_config" in err and "--schema must be a Unity Catalog name" in err and "'flights-dev'" in err


def test_every_subcommand_takes_source_catalog_and_source_schema():
    parser = build_parser()
    for command in ("train", "score", "publish", "monitor", "demo", "serve"):
        args = parser.parse_args([command, "--source-catalog", "main", "--source-schema", "flights"])
        assert (args.source_catalog, args.source_schema) == ("main", "flights")
    args = parser.parse_args(["score"])
    assert (args.source_catalog, args.source_schema) == (None, None)


def test_the_source_schema_flag_reaches_the_config_loader(project_dir, capsys):
    assert main(["train", "--config-dir", str(project_dir), "--source-schema", "shared-flights",
                 "--home", str(project_dir / "home")]) == 2
    err = capsys.readouterr().err
    assert "invalid_config" in err and "--source-schema must be a Unity Catalog name" in err
    assert "'shared-flights'" in err


def test_serve_refuses_flags_that_another_of_its_modes_would_ignore(tmp_path, capsys):
    mixed = [(["--deploy", "2", "--export-model-serving", "out.json"], "--export-model-serving", "--deploy"),
             (["--deploy", "2", "--create"], "--create", "--deploy"),
             (["--deploy", "2", "--candidate-version", "3"], "--candidate-version", "--deploy"),
             (["--deploy", "2", "--dry-run"], "--deploy", "--dry-run"),
             (["--deploy", "2", "--cost-per-hour", "0.5"], "--deploy", "--cost-per-hour"),
             (["--create", "--dry-run"], "--create", "--dry-run")]
    for flags, first, second in mixed:
        assert main(["serve", "--config-dir", str(tmp_path / "no-config"), *flags]) == 2, flags
        err = capsys.readouterr().err
        assert "invalid_config" in err and f"lakescore serve: {first} cannot be combined with {second}" in err, err


FAILING_RULE = '''
def has_departed(frame, params):
    """An eligibility rule that fails the way library errors do: quoting the rows it was given."""
    raise ValueError("cannot read these rows:\\n" + frame.head(3).to_string())
'''


def test_an_unexpected_failure_prints_one_line_without_row_values(project_dir, tmp_path, monkeypatch, capsys,
                                                                   flights_sample, lookup_tables):
    import yaml

    from lakescore.cli import main
    from lakescore.runtime import LocalRuntime

    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "lakescore_failing_rules.py").write_text(FAILING_RULE)
    monkeypatch.syspath_prepend(str(folder))
    scoring = yaml.safe_load((project_dir / "scoring.yml").read_text())
    scoring.update(module="lakescore_failing_rules", output=[])
    (project_dir / "scoring.yml").write_text(yaml.safe_dump(scoring))
    home = tmp_path / "home"
    flights = flights_sample.assign(dep_time=flights_sample["dep_time"] + 0.123456)  # values no message invents
    LocalRuntime(home).write_table("main.flights.flights", flights)
    lookup_tables(LocalRuntime(home))  # config/training.yml's feature tables
    monkeypatch.delenv("LAKESCORE_DEBUG", raising=False)
    argv = ["train", "--config-dir", str(project_dir), "--home", str(home)]

    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and "123456" not in err and "cannot read these rows" not in err
    # progress lines and MLflow's own notices may come first; the failure itself is one line
    lines = [line for line in err.strip().splitlines() if line.startswith("lakescore train: ")]
    assert len(lines) == 1 and lines[0].startswith("lakescore train: unexpected_error: ValueError (not a lakescore error")
    assert "run with --debug or LAKESCORE_DEBUG=1" in lines[0]
    logs = list((home / "logs").glob("train-*.log"))
    assert len(logs) == 1 and f"full traceback in {logs[0].resolve()}" in lines[0]
    assert "ValueError: cannot read these rows" in logs[0].read_text() and "123456" in logs[0].read_text()

    monkeypatch.setenv("LAKESCORE_DEBUG", "1")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "cannot read these rows" in err
    assert len(list((home / "logs").glob("train-*.log"))) == 2
