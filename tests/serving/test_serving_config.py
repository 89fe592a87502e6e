"""config/serving.yml: profiles and collected errors."""

from __future__ import annotations

import pytest
import yaml

from lakescore.config import load_project
from lakescore.errors import ConfigError


def write(project_dir, **keys) -> None:  # type: ignore[no-untyped-def]
    settings = yaml.safe_load((project_dir / "serving.yml").read_text())
    settings.update(keys)
    (project_dir / "serving.yml").write_text(yaml.safe_dump(settings))


def test_the_template_loads_with_one_replica(project_dir) -> None:
    serving = load_project(project_dir).serving
    assert (serving.replicas.min, serving.replicas.max, serving.host) == (1, 1, "127.0.0.1")


@pytest.mark.parametrize(("profile", "replicas", "keep_warm", "client"), [
    ("experiment", (0, 1), False, (600, 660, 660, [15, 30, 60, 120], False, False)),
    ("background", (0, 2), False, (45, 60, 600, [15, 30, 60, 120], False, True)),
    ("low_latency", (1, 3), True, (0, 30, 30, [1], True, False)),
])
def test_profiles_fill_what_the_file_leaves_out(project_dir, profile, replicas, keep_warm, client) -> None:
    settings = yaml.safe_load((project_dir / "serving.yml").read_text())
    assert "replicas" not in settings and "keep_warm" not in settings  # left to the profile
    settings["profile"] = profile
    (project_dir / "serving.yml").write_text(yaml.safe_dump(settings))
    serving = load_project(project_dir).serving
    c = serving.client
    assert (serving.replicas.min, serving.replicas.max) == replicas and serving.keep_warm is keep_warm
    assert (c.hold_s, c.timeout_s, c.deadline_s, c.retry_waits_s, c.retry_only_idempotent, c.durable_job_id) == client


def test_keys_in_the_file_override_the_profile(project_dir) -> None:
    write(project_dir, profile="low_latency", replicas={"min": 2, "max": 2}, client={"deadline_s": 45})
    serving = load_project(project_dir).serving
    assert (serving.replicas.min, serving.replicas.max, serving.client.deadline_s) == (2, 2, 45)
    assert serving.client.retry_waits_s == [1]  # the rest of the profile's client block stays


def test_every_problem_is_listed_at_once(project_dir) -> None:
    write(project_dir, replicas={"min": 3, "max": 2}, max_warm_replicas=1, host="0.0.0.0", profile="fast",
          model_selection="pinned_version", idle_timeot_s=5, canary={"share_percent": 0})
    with pytest.raises(ConfigError) as caught:
        load_project(project_dir)
    problems = "\n".join(caught.value.problems)
    assert "serving.yml: unknown key 'idle_timeot_s' (did you mean 'idle_timeout_s'?)" in problems
    assert "serving.yml: host must be '127.0.0.1'; got '0.0.0.0'" in problems
    assert "serving.yml: profile must be 'experiment', 'background' or 'low_latency'; got 'fast'" in problems
    assert "serving.yml: canary.share_percent must be between 1 and 100; got 0" in problems
    write(project_dir, host="127.0.0.1", profile=None, idle_timeout_s=5, canary={"share_percent": 5})
    settings = yaml.safe_load((project_dir / "serving.yml").read_text())
    settings.pop("idle_timeot_s")
    (project_dir / "serving.yml").write_text(yaml.safe_dump(settings))
    with pytest.raises(ConfigError) as caught:
        load_project(project_dir)
    assert caught.value.problems == [
        "config/serving.yml: replicas.min must be at most replicas.max; got min 3, max 2 (raise max or lower min)",
        "config/serving.yml: replicas.max must be at most max_warm_replicas; got 2 > 1 (raise max_warm_replicas or "
        "lower replicas.max)",
        "config/serving.yml: model_version is required when model_selection is 'pinned_version'; got None "
        "(set model_version: N, or use 'champion')",
    ]


def test_the_older_key_names_still_load(project_dir) -> None:
    """A serving.yml written before the keys were named for replicas keeps working."""
    settings = yaml.safe_load((project_dir / "serving.yml").read_text())
    settings.pop("max_warm_replicas")
    settings.pop("replica_start")
    settings.update(max_warm_copies=6, copy_start="new_process", replicas={"min": 1, "max": 5})
    (project_dir / "serving.yml").write_text(yaml.safe_dump(settings))
    serving = load_project(project_dir).serving
    assert (serving.max_warm_replicas, serving.replica_start, serving.replicas.max) == (6, "new_process", 5)
    write(project_dir, replicas={"min": 1, "max": 7})  # the older name is checked like the current one
    with pytest.raises(ConfigError, match="replicas.max must be at most max_warm_replicas; got 7 > 6"):
        load_project(project_dir)


def test_a_key_given_under_both_names_is_a_config_error_naming_both(project_dir) -> None:
    write(project_dir, max_warm_copies=6, copy_start="new_process", port=-1)  # the template has the new names
    with pytest.raises(ConfigError) as caught:
        load_project(project_dir)
    assert sorted(caught.value.problems) == [  # collected with the file's other problems
        "config/serving.yml: copy_start and replica_start are one key (copy_start is its older name) and both are "
        "given; got copy_start: 'new_process' (keep replica_start and remove copy_start)",
        "config/serving.yml: max_warm_copies and max_warm_replicas are one key (max_warm_copies is its older name) "
        "and both are given; got max_warm_copies: 6 (keep max_warm_replicas and remove max_warm_copies)",
        "config/serving.yml: port must be between 0 and 65535; got -1",
    ]
