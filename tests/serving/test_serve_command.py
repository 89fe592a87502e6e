"""`lakescore serve`: the plan, the cost ceiling, and errors before anything starts."""

from __future__ import annotations

import json

from lakescore.cli import build_parser, main
from lakescore.serving.run import ceiling_text, monthly_ceiling


def test_the_ceiling_is_24_x_31_x_max_replicas_x_h() -> None:
    assert monthly_ceiling(0.5, 3) == 1116.0
    assert ceiling_text(0.25, 2) == (
        "monthly ceiling: 24 h x 31 days x 2 replicas (replicas.max) x 0.25 per hour = 372.00. This is an upper "
        "bound of compute, not a spending limit: nothing stops the endpoint when it is reached.")


def test_dry_run_prints_the_ceiling_and_the_pinned_version(module_home, capsys) -> None:
    home, config = module_home
    code = main(["serve", "--config-dir", str(config), "--home", str(home), "--cost-per-hour", "1.5", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    first, rest = out.split("\n", 1)
    assert first.startswith("monthly ceiling: 24 h x 31 days x 1 replicas (replicas.max) x 1.5 per hour = 1,116.00.")
    assert "upper bound of compute, not a spending limit" in first
    summary = json.loads(rest)
    assert summary["model"] == "models:/main.flights.late_arrival/1" and summary["monthly_ceiling"] == 1116.0
    assert not (home / "serving" / "token").exists()  # a dry run starts nothing


def test_no_registered_model_is_an_error_before_anything_starts(project_dir, runtime, capsys) -> None:
    code = main(["serve", "--config-dir", str(project_dir), "--home", str(runtime.home), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "config/serving.yml: model_selection 'champion': model_not_found" in err


def test_bundle_parameters_parse() -> None:
    args = build_parser().parse_args(["serve", "--config-dir", "c", "--target", "prod", "--runtime", "databricks",
                                      "--cost-per-hour", "2"])
    assert (args.command, args.target, args.runtime, args.cost_per_hour) == ("serve", "prod", "databricks", 2.0)
