"""The lakescore command's own behaviour (subcommands are tested with their modules)."""

import json

import numpy as np

from lakescore.cli import _plain, build_parser, main


def test_summaries_print_as_strict_json():
    text = json.dumps(_plain({"roc_auc": np.float64("nan"), "rates": [0.5, float("inf")], "n": 3}))
    assert json.loads(text) == {"roc_auc": None, "rates": [0.5, None], "n": 3}


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
