"""The lakescore command's own behaviour (subcommands are tested with their modules)."""

import json

import numpy as np

from lakescore.cli import _plain, build_parser


def test_summaries_print_as_strict_json():
    text = json.dumps(_plain({"roc_auc": np.float64("nan"), "rates": [0.5, float("inf")], "n": 3}))
    assert json.loads(text) == {"roc_auc": None, "rates": [0.5, None], "n": 3}


def test_every_subcommand_takes_config_dir():
    parser = build_parser()
    for command in ("train", "score", "publish", "monitor", "demo"):
        assert parser.parse_args([command, "--config-dir", "other"]).config_dir == "other"
