"""Tests of the bundle files: databricks.yml, resources/*.job.yml and the entry points they run.

The Databricks CLI cannot be installed here, so `databricks bundle validate` is replaced by two
offline checks: the YAML against the CLI's published JSON Schema, and every task's parameters
against the real ``lakescore`` argument parser.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import tomllib

import pytest
import yaml
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for
from packaging.requirements import Requirement

from lakescore.cli import build_parser
from lakescore.config import DEFAULT_CATALOG, DEFAULT_SCHEMA, load_project

ROOT = Path(__file__).resolve().parents[1]
RESOURCES = ROOT / "resources"
# The CLI's published schema, kept in the repository (tests/fixtures/reference/README.md);
# LAKESCORE_BUNDLE_SCHEMA names another copy (a newer CLI's).
SCHEMA_PATH = Path(os.environ.get("LAKESCORE_BUNDLE_SCHEMA",
                                  ROOT / "tests" / "fixtures" / "reference" / "databricks_bundle_schema.json"))
# Stand-ins for references that only the CLI resolves, used when parsing task parameters.
WORKSPACE_FILE_PATH = "/Workspace/Users/someone/.bundle/lakescore/dev/files"
CLI_REFERENCES = {"workspace.file_path": WORKSPACE_FILE_PATH, "workspace.current_user.short_name": "someone",
                  "workspace.root_path": "/Workspace/Users/someone/.bundle/lakescore/dev"}
REQUIRED_VARIABLES = {"catalog", "schema", "config_dir", "score_cron", "node_type_id", "spark_version"}


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


BUNDLE = _load(ROOT / "databricks.yml")
RESOURCE_FILES = sorted(RESOURCES.glob("*.yml"))
BUNDLE_FILES = [ROOT / "databricks.yml", *RESOURCE_FILES]
VARIABLES = BUNDLE["variables"]


def _merge(into: dict[str, Any], other: dict[str, Any], where: str = "") -> None:
    """Deep-merge mappings as the CLI does for included files; a key defined twice is an error."""
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, f"{where}.{key}")
        elif key in into:
            raise AssertionError(f"{where}.{key} is defined in more than one bundle file")
        else:
            into[key] = copy.deepcopy(value)


def _merged_bundle() -> dict[str, Any]:
    merged = copy.deepcopy(BUNDLE)
    for path in RESOURCE_FILES:
        _merge(merged, _load(path))
    return merged


# --- JSON Schema validation -------------------------------------------------------------------
#
# The schema's patterns use \p{L} (a letter) and \p{N} (a number), which Python's `re` cannot
# compile ("bad escape \p"), so jsonschema would crash on the first string it checks. Rather than
# add the `regex` package, the two forms the schema uses are translated to `re` syntax, relying on
# a str pattern's \w being exactly the characters with str.isalnum() or "_":
#   [\p{L}\p{N}] -> [^\W_]     letters and numbers: exact (checked over all code points, Python 3.11)
#   \p{L}        -> [^\W\d_]   letters plus the ~1100 non-decimal numbers (categories No, Nl: "²")
# The first is exact and the second slightly wider, so a translated pattern accepts every string
# the original accepts and rejects almost all it rejects. Any other \p / \P form fails loudly.
def _translate(pattern: str) -> str:
    out = pattern.replace(r"[\p{L}\p{N}]", r"[^\W_]").replace(r"\p{L}", r"[^\W\d_]")
    if r"\p" in out or r"\P" in out:
        raise ValueError(f"schema pattern {pattern!r} has a Unicode class this test does not translate")
    return out


def _with_python_patterns(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _translate(value) if key == "pattern" and isinstance(value, str)
                else _with_python_patterns(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_with_python_patterns(item) for item in node]
    return node


@pytest.fixture(scope="module")
def validator() -> Any:
    if not SCHEMA_PATH.is_file():
        raise FileNotFoundError(f"bundle JSON Schema not found at {SCHEMA_PATH}: restore "
                                "tests/fixtures/reference/databricks_bundle_schema.json from git")
    schema = _with_python_patterns(json.loads(SCHEMA_PATH.read_text()))
    cls = validator_for(schema, default=Draft202012Validator)  # the schema names no $schema
    cls.check_schema(schema)  # includes format "regex": every translated pattern compiles
    return cls(schema)


def _errors(validator: Any, document: dict[str, Any]) -> list[str]:
    """Each failure as "path: message", descending through oneOf branches to the deepest ones."""
    def leaves(errors: Any) -> Any:
        for err in errors:
            if err.context:
                yield from leaves(err.context)
            else:
                yield f"{'/'.join(map(str, err.absolute_path)) or '<root>'}: {err.message[:200]}"

    return list(leaves(validator.iter_errors(document)))


def test_translated_reference_pattern_matches_like_the_original() -> None:
    var_ref = re.compile(_translate(r"^\$\{(var(\.\p{L}+([-_]*[\p{L}\p{N}]+)*(\[[0-9]+\])*)+)\}$"))
    for ok in ["${var.catalog}", "${var.score_cron}", "${var.café-2}", "${var.x.y[0]}", "${var.ä١}"]:
        assert var_ref.match(ok), ok
    for bad in ["${var.2x}", "${var._x}", "${var.x_}", "${var.}", "${bundle.target}"]:
        assert not var_ref.match(bad), bad
    with pytest.raises(ValueError, match="does not translate"):
        _translate(r"\p{Lu}+")


def test_merged_bundle_matches_the_schema(validator: Any) -> None:
    assert _errors(validator, _merged_bundle()) == []


@pytest.mark.parametrize("path", BUNDLE_FILES, ids=lambda p: p.name)
def test_each_bundle_file_matches_the_schema(validator: Any, path: Path) -> None:
    assert _errors(validator, _load(path)) == []


@pytest.mark.parametrize(("where", "key", "value"), [
    ("task", "task_kee", "score"),                      # unknown key
    ("task", "max_retries", "three"),                   # string where an integer belongs
    ("cluster", "num_workers", [2]),                    # list where an integer belongs
    ("cluster", "spark_version", 15.4),                 # number where a string belongs
])
def test_schema_rejects_a_broken_job(validator: Any, where: str, key: str, value: Any) -> None:
    bundle = _merged_bundle()
    job = bundle["resources"]["jobs"]["score"]
    if where == "task":
        job["tasks"][0][key], prefix = value, "resources/jobs/score/tasks/0"
    else:
        job["job_clusters"][0]["new_cluster"][key] = value
        prefix = "resources/jobs/score/job_clusters/0/new_cluster"
    errors = _errors(validator, bundle)
    assert errors, f"{where}.{key}={value!r} was accepted"
    assert any(e.startswith(prefix) and key in e for e in errors), errors


# --- Tasks against the lakescore command ------------------------------------------------------


def _tasks() -> list[Any]:
    cases = []
    for path in RESOURCE_FILES:
        jobs = _load(path)["resources"]["jobs"]
        assert len(jobs) == 1, f"{path.name} should hold one job, has {sorted(jobs)}"
        for job_key, job in jobs.items():
            for task in job["tasks"]:
                cases.append(pytest.param(job_key, task, id=f"{job_key}/{task['task_key']}"))
    return cases


def _entry_argv(script: Path) -> list[str]:
    """The fixed leading arguments the entry point passes to main(), e.g. ["score", "--publish"]."""
    calls = [node for node in ast.walk(ast.parse(script.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "main"]
    assert len(calls) == 1 and isinstance(calls[0].args[0], ast.List), f"{script}: expected one main([...])"
    fixed = []
    for element in calls[0].args[0].elts:
        if not isinstance(element, ast.Constant):
            break
        fixed.append(element.value)
    return fixed


def _substitute(text: str, target: str = "dev") -> str:
    """Resolve references as the CLI does for one target: its variable values, else the defaults."""
    overrides = (BUNDLE["targets"][target] or {}).get("variables", {})

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("var."):
            assert name[4:] in VARIABLES, f"${{{name}}} is not a variable of databricks.yml"
            return _substitute(str(overrides.get(name[4:], VARIABLES[name[4:]]["default"])), target)
        if name == "bundle.target":
            return target
        assert name in CLI_REFERENCES, f"unexpected reference ${{{name}}} in task parameters"
        return CLI_REFERENCES[name]

    return re.sub(r"\$\{([^}]+)\}", value, text)


@pytest.mark.parametrize(("job_key", "task"), _tasks())
def test_task_runs_an_existing_entry_point_with_the_wheel(job_key: str, task: dict[str, Any]) -> None:
    script = RESOURCES / task["spark_python_task"]["python_file"]
    assert script.resolve() == (ROOT / "src" / "jobs" / f"{job_key}.py").resolve()
    assert script.is_file(), f"{script} does not exist"
    assert {"whl": "../dist/*.whl"} in task["libraries"]


@pytest.mark.parametrize(("job_key", "task"), _tasks())
def test_task_parameters_parse_with_the_lakescore_command(job_key: str, task: dict[str, Any]) -> None:
    spark_task = task["spark_python_task"]
    fixed = _entry_argv(RESOURCES / spark_task["python_file"])
    assert fixed[0] == job_key
    argv = [*fixed, *(_substitute(p) for p in spark_task["parameters"])]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"lakescore rejects the {job_key} task's arguments {argv}")
    assert args.command == job_key
    assert args.config_dir == "/Workspace/Users/someone/.bundle/lakescore/dev/files/config"
    assert args.target == "dev"
    assert args.runtime == "databricks"
    assert (args.catalog, args.schema) == ("main", "flights_someone")
    if job_key == "score":
        assert args.publish is True


# --- Each target writes its own tables ----------------------------------------------------------

# Worked out by hand from databricks.yml's targets and config/*.yml (user "someone" deploys dev).
TARGET_NAMESPACES = {"dev": ("main", "flights_someone"), "staging": ("main", "flights_staging"),
                     "prod": ("main", "flights")}


def _task_args(job_key: str, target: str) -> argparse.Namespace:
    (task,) = _load(RESOURCES / f"{job_key}.job.yml")["resources"]["jobs"][job_key]["tasks"]
    spark_task = task["spark_python_task"]
    fixed = _entry_argv(RESOURCES / spark_task["python_file"])
    return build_parser().parse_args([*fixed, *(_substitute(p, target) for p in spark_task["parameters"])])


@pytest.mark.parametrize("target", sorted(TARGET_NAMESPACES))
@pytest.mark.parametrize("job_key", ["train", "score", "monitor", "serve"])
def test_every_task_passes_the_targets_catalog_and_schema(job_key: str, target: str) -> None:
    args = _task_args(job_key, target)
    assert (args.catalog, args.schema) == TARGET_NAMESPACES[target]
    assert args.target == target


@pytest.mark.parametrize("target", sorted(TARGET_NAMESPACES))
def test_a_targets_variables_name_the_tables_through_the_config_loader(target: str) -> None:
    args = _task_args("score", target)
    assert Path(args.config_dir).name == VARIABLES["config_dir"]["default"] == "config"
    project = load_project(ROOT / "config", catalog=args.catalog, schema=args.schema)
    ns = ".".join(TARGET_NAMESPACES[target])
    assert project.inference.score_source_table == f"{ns}.flights_incoming"
    assert project.inference.prediction_table == f"{ns}.late_arrival_predictions"
    assert project.monitoring.quality_table == f"{ns}.late_arrival_quality"
    assert project.serving is not None and project.serving.inference_table == f"{ns}.late_arrival_inference"
    assert project.training.registry.model_name == f"{ns}.late_arrival"


def test_dev_staging_and_prod_write_no_table_in_common() -> None:
    written = {}
    for target in TARGET_NAMESPACES:
        args = _task_args("score", target)
        project = load_project(ROOT / "config", catalog=args.catalog, schema=args.schema)
        assert project.serving is not None
        written[target] = {project.inference.prediction_table, project.monitoring.quality_table,
                           project.serving.inference_table, project.training.registry.model_name}
    assert written["dev"].isdisjoint(written["staging"])
    assert written["dev"].isdisjoint(written["prod"])
    assert written["staging"].isdisjoint(written["prod"])


# --- databricks.yml ---------------------------------------------------------------------------


def test_every_variable_has_a_description() -> None:
    assert REQUIRED_VARIABLES <= set(VARIABLES)
    missing = [name for name, spec in VARIABLES.items() if not str(spec.get("description", "")).strip()]
    assert missing == []
    assert (VARIABLES["catalog"]["default"], VARIABLES["schema"]["default"]) == ("main", "flights")
    # a local run (no --catalog / --schema) names the same tables as the bundle's defaults
    assert (DEFAULT_CATALOG, DEFAULT_SCHEMA) == ("main", "flights")


def _schema_enum(name: str) -> list[str]:
    node = json.loads(SCHEMA_PATH.read_text())["$defs"]["github.com"]["databricks"]["databricks-sdk-go"]["service"]
    return next(branch["enum"] for branch in node[name]["oneOf"] if "enum" in branch)


def test_job_clusters_run_the_18_lts_ml_runtime_in_dedicated_access_mode() -> None:
    # Unity Catalog needs an access mode that supports it, and standard (USER_ISOLATION) access mode
    # has no ML runtime: dedicated it is, under its legacy name, which needs no `kind: CLASSIC_PREVIEW`
    assert VARIABLES["spark_version"]["default"] == "18.x-cpu-ml-scala2.13"
    assert "SINGLE_USER" in _schema_enum("compute.DataSecurityMode")
    clusters = [(path.name, cluster["new_cluster"]) for path in RESOURCE_FILES
                for job in (_load(path).get("resources", {}).get("jobs") or {}).values()
                for cluster in job.get("job_clusters", [])]
    assert len(clusters) >= 4
    for name, cluster in clusters:
        assert cluster["spark_version"] == "${var.spark_version}", name
        assert cluster.get("data_security_mode") == "SINGLE_USER", name


# --- The wheel on Databricks Runtime 18 LTS ML --------------------------------------------------

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CORE = {Requirement(text).name: Requirement(text) for text in PROJECT["dependencies"]}
# Versions the runtime brings: MLflow from the DBR 18 LTS ML release notes; the others are the
# 17.3 LTS ML versions (pietern/databricks-environments constraints), which 18 LTS ML does not go
# below; the upper ends are this machine's versions (README, "Databricks Runtime").
RUNTIME_VERSIONS = {"mlflow-skinny": ["3.8.1", "3.17.2"], "pandas": ["2.2.3", "2.3.3", "3.1.1"],
                    "numpy": ["2.1.3", "2.4.6"], "pyarrow": ["19.0.1", "25.0.1"],
                    "scikit-learn": ["1.6.1", "1.9.1"], "pydantic": ["2.10.6", "2.14.4"], "pyyaml": ["6.0.2"]}


@pytest.mark.parametrize("name", sorted(RUNTIME_VERSIONS))
def test_core_dependency_ranges_keep_the_runtimes_own_versions(name: str) -> None:
    for version in RUNTIME_VERSIONS[name]:
        assert CORE[name].specifier.contains(version), f"{CORE[name]} would replace the runtime's {name} {version}"


def test_the_wheel_leaves_pyspark_and_full_mlflow_to_the_runtime_and_allows_python_3_12() -> None:
    assert "pyspark" not in CORE and "mlflow" not in CORE
    assert not CORE["mlflow-skinny"].specifier.contains("3.8.0")  # older than DBR 18 LTS ML's MLflow
    requires = Requirement(f"python{PROJECT['requires-python']}").specifier
    assert [v for v in ("3.10", "3.11.7", "3.12.3", "3.13.0") if requires.contains(v)] == ["3.11.7", "3.12.3"]


def test_the_dbr_lock_satisfies_the_wheels_core_dependencies() -> None:
    # requirements-dbr.lock: what `make test-dbr` installs as Databricks Runtime 18 LTS ML; the wheel
    # installed there must find every core dependency already satisfied (nothing replaced)
    lines = (ROOT / "requirements-dbr.lock").read_text().splitlines()
    pins = dict(line.lower().split("==") for line in lines if line and not line.startswith("#"))
    assert (pins["pyspark"], pins["mlflow-skinny"], pins["pandas"], pins["pyarrow"]) == ("4.1.0", "3.8.1", "2.2.3", "21.0.0")
    for name, requirement in CORE.items():
        assert requirement.specifier.contains(pins[name]), f"{requirement} would replace the lock's {name} {pins[name]}"


def test_the_serve_job_installs_the_serve_extra_with_the_wheel() -> None:
    # a cluster library cannot name a wheel's extra: each package of `serve` is a PyPI library
    (task,) = _load(RESOURCES / "serve.job.yml")["resources"]["jobs"]["serve"]["tasks"]
    pypi = {Requirement(lib["pypi"]["package"]) for lib in task["libraries"] if "pypi" in lib}
    extra = {Requirement(text) for text in PROJECT["optional-dependencies"]["serve"]}
    assert {str(r) for r in pypi} == {str(r) for r in extra}
    assert {r.name for r in pypi} >= {"fastapi", "uvicorn", "httptools", "uvloop", "orjson", "httpx", "psutil"}


def test_targets_dev_staging_prod_with_dev_the_default() -> None:
    targets = BUNDLE["targets"]
    assert {"dev", "staging", "prod"} <= set(targets)
    assert [name for name, spec in targets.items() if (spec or {}).get("default")] == ["dev"]
    assert targets["dev"]["mode"] == "development"
    assert targets["prod"]["mode"] == "production"


def test_wheel_artifact_is_built_from_the_repository_root() -> None:
    (artifact,) = BUNDLE["artifacts"].values()
    assert (artifact["type"], artifact["path"]) == ("whl", ".")
    assert BUNDLE["include"] == ["resources/*.yml"]


def test_score_job_runs_on_the_quartz_schedule_variable() -> None:
    schedule = _load(RESOURCES / "score.job.yml")["resources"]["jobs"]["score"]["schedule"]
    assert schedule["quartz_cron_expression"] == "${var.score_cron}"
    fields = VARIABLES["score_cron"]["default"].split()
    # Quartz: seconds first, 6 or 7 fields, and "?" in day-of-month or day-of-week.
    assert len(fields) in (6, 7) and "?" in (fields[3], fields[5])


@pytest.mark.parametrize("target", sorted(TARGET_NAMESPACES))
@pytest.mark.parametrize("job_key", ["train", "score", "monitor", "serve"])
def test_every_task_gives_the_databricks_runtime_its_volume_and_experiment(job_key: str, target: str) -> None:
    from lakescore.runtime import get_runtime

    args = _task_args(job_key, target)
    runtime = get_runtime(args.runtime, home=args.home, target=args.target, catalog=args.catalog,
                          schema=args.schema, experiment=args.experiment)
    catalog, schema = TARGET_NAMESPACES[target]
    assert runtime.kind == "databricks" and runtime.target == target
    assert str(runtime.home) == f"/Volumes/{catalog}/{schema}/lakescore"
    assert runtime.experiment == "/Workspace/Users/someone/.bundle/lakescore/dev/lakescore"
