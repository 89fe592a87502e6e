"""Tests of the bundle files: databricks.yml, resources/*.job.yml and the entry points they run.

The Databricks CLI cannot be installed here, so `databricks bundle validate` is replaced by two
offline checks: the YAML against the CLI's published JSON Schema, and every task's parameters
against the real ``lakescore`` argument parser.
"""

from __future__ import annotations

import argparse
import ast
import copy
import functools
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.rehearsal import include
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
REQUIRED_VARIABLES = {"catalog", "schema", "source_catalog", "source_schema", "volume", "grants_principal",
                      "config_dir", "score_cron", "node_type_id", "spark_version"}


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


BUNDLE = _load(ROOT / "databricks.yml")
RESOURCE_FILES = sorted(RESOURCES.glob("*.yml"))
# not included by databricks.yml: a user adds them to `include` (README, "Deploy to Databricks")
OPTIONAL_FILES = sorted((RESOURCES / "optional").glob("*.yml"))
BUNDLE_FILES = [ROOT / "databricks.yml", *RESOURCE_FILES, *OPTIONAL_FILES]
VARIABLES = BUNDLE["variables"]


@functools.cache
def _merged_once() -> dict[str, Any]:
    merged = copy.deepcopy(BUNDLE)
    for path in RESOURCE_FILES:
        include(merged, _load(path), path.name)  # as the CLI merges included files
    return merged


def _merged_bundle() -> dict[str, Any]:
    """databricks.yml with every included file merged in (a copy the caller may change)."""
    return copy.deepcopy(_merged_once())


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

ENTRY_POINTS = {"train", "score", "monitor", "serve"}


def _jobs() -> dict[str, dict[str, Any]]:
    return _merged_once()["resources"]["jobs"]


def _tasks() -> list[Any]:
    return [pytest.param(job_key, task, id=f"{job_key}/{task['task_key']}")
            for job_key, job in _jobs().items() for task in job["tasks"]]


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


@functools.cache
def _target_bundle(target: str) -> dict[str, Any]:
    """The merged bundle with one target's resources merged in, as the CLI selects a target (shared:
    do not change it)."""
    bundle = _merged_bundle()
    spec = BUNDLE["targets"][target] or {}
    for kind, items in spec.get("resources", {}).items():
        for key, value in items.items():
            bundle["resources"].setdefault(kind, {})[key] = copy.deepcopy(value)
    return bundle


def _deployed(kind: str, key: str, field: str, target: str) -> str:
    """``${resources.<kind>.<key>.<field>}`` as deployed: development mode prefixes names like the
    CLI's ApplyPresets (schemas and registered models ``dev_<user>_``, an experiment's last path part
    ``[dev <user>] ``; volumes are not renamed)."""
    resource = _target_bundle(target)["resources"].get(kind, {}).get(key)
    assert resource is not None, f"${{resources.{kind}.{key}}} is not a resource of target {target}"
    value = _substitute(str(resource[field]), target)
    if field == "name" and (BUNDLE["targets"][target] or {}).get("mode") == "development":
        if kind in ("schemas", "registered_models"):
            value = "dev_someone_" + value
        elif kind == "experiments":
            head, _, base = value.rpartition("/")
            value = f"{head}/[dev someone] {base}"
    return value


def _substitute(text: str, target: str = "dev") -> str:
    """Resolve references as the CLI does for one target: its variable values, else the defaults;
    resource references as deployed (:func:`_deployed`)."""
    overrides = (BUNDLE["targets"][target] or {}).get("variables", {})
    references = {"workspace.file_path": f"/Workspace/Users/someone/.bundle/lakescore/{target}/files",
                  "workspace.root_path": f"/Workspace/Users/someone/.bundle/lakescore/{target}",
                  "workspace.current_user.short_name": "someone"}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("var."):
            assert name[4:] in VARIABLES, f"${{{name}}} is not a variable of databricks.yml"
            return _substitute(str(overrides.get(name[4:], VARIABLES[name[4:]]["default"])), target)
        if name.startswith("resources."):
            _, kind, key, field = name.split(".")
            return _deployed(kind, key, field, target)
        if name == "bundle.target":
            return target
        assert name in references, f"unexpected reference ${{{name}}} in task parameters"
        return references[name]

    return re.sub(r"\$\{([^}]+)\}", value, text)


def _job_environments(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {env["environment_key"]: env["spec"] for env in job.get("environments", [])}


@pytest.mark.parametrize(("job_key", "task"), _tasks())
def test_task_runs_an_existing_entry_point_with_the_wheel(job_key: str, task: dict[str, Any]) -> None:
    script = RESOURCES / task["spark_python_task"]["python_file"]
    assert script.parent.resolve() == (ROOT / "src" / "jobs").resolve()
    assert script.stem == task["task_key"] and script.stem in ENTRY_POINTS
    assert script.is_file(), f"{script} does not exist"
    job = _jobs()[job_key]
    if "environment_key" in task:  # serverless: the wheel comes from the job's environment
        assert "job_cluster_key" not in task and "libraries" not in task and "job_clusters" not in job
        spec = _job_environments(job)[task["environment_key"]]
        assert "../dist/*.whl" in spec["dependencies"]
        assert spec["environment_version"] == "${var.serverless_environment_version}"
    else:
        assert task["job_cluster_key"] in {c["job_cluster_key"] for c in job["job_clusters"]}
        assert {"whl": "../dist/*.whl"} in task["libraries"]


def _task_args(job_key: str, target: str, task_key: str | None = None) -> argparse.Namespace:
    tasks = _target_bundle(target)["resources"]["jobs"][job_key]["tasks"]
    (task,) = [t for t in tasks if t["task_key"] == (task_key or job_key)]
    spark_task = task["spark_python_task"]
    fixed = _entry_argv(RESOURCES / spark_task["python_file"])
    return build_parser().parse_args([*fixed, *(_substitute(p, target) for p in spark_task["parameters"])])


@pytest.mark.parametrize(("job_key", "task"), _tasks())
def test_task_parameters_parse_with_the_lakescore_command(job_key: str, task: dict[str, Any]) -> None:
    spark_task = task["spark_python_task"]
    fixed = _entry_argv(RESOURCES / spark_task["python_file"])
    assert fixed[0] == task["task_key"]
    try:
        args = _task_args(job_key, "dev", task["task_key"])
    except SystemExit:
        pytest.fail(f"lakescore rejects the {job_key}/{task['task_key']} task's arguments")
    assert args.command == task["task_key"]
    assert args.config_dir == "/Workspace/Users/someone/.bundle/lakescore/dev/files/config"
    assert args.target == "dev"
    assert args.runtime == "databricks"
    assert (args.catalog, args.schema) == ("main", "dev_someone_flights")
    assert (args.source_catalog, args.source_schema) == ("main", "flights")
    if args.command == "score":
        assert args.publish is True


# --- Each target reads the shared source tables and writes its own --------------------------------

# Worked out by hand from databricks.yml's targets (user "someone" deploys dev; development mode
# prefixes the schema's name) and config/*.yml.
TARGET_NAMESPACES = {"dev": ("main", "dev_someone_flights"), "staging": ("main", "flights_staging"),
                     "prod": ("main", "flights_prod")}
SOURCE_NAMESPACE = ("main", "flights")
TASKS = [pytest.param(job_key, task["task_key"], id=f"{job_key}/{task['task_key']}")
         for job_key, job in _jobs().items() for task in job["tasks"]]


@pytest.mark.parametrize("target", sorted(TARGET_NAMESPACES))
@pytest.mark.parametrize(("job_key", "task_key"), TASKS)
def test_every_task_passes_the_targets_namespaces(job_key: str, task_key: str, target: str) -> None:
    args = _task_args(job_key, target, task_key)
    assert (args.catalog, args.schema) == TARGET_NAMESPACES[target]
    assert (args.source_catalog, args.source_schema) == SOURCE_NAMESPACE
    assert args.target == target


@pytest.mark.parametrize("target", sorted(TARGET_NAMESPACES))
def test_a_target_reads_the_source_tables_and_writes_the_schema_the_bundle_creates(target: str) -> None:
    args = _task_args("score", target)
    assert Path(args.config_dir).name == VARIABLES["config_dir"]["default"] == "config"
    project = load_project(ROOT / "config", catalog=args.catalog, schema=args.schema,
                           source_catalog=args.source_catalog, source_schema=args.source_schema)
    ns, src = ".".join(TARGET_NAMESPACES[target]), ".".join(SOURCE_NAMESPACE)
    assert project.inference.score_source_table == f"{src}.flights_incoming"
    assert project.training.data.table == project.monitoring.label_table == f"{src}.flights"
    assert [lookup.table_name for lookup in project.training.feature_lookups] == [f"{src}.weather", f"{src}.planes"]
    assert project.inference.prediction_table == f"{ns}.late_arrival_predictions"
    assert project.monitoring.quality_table == f"{ns}.late_arrival_quality"
    assert project.serving is not None and project.serving.inference_table == f"{ns}.late_arrival_inference"
    assert project.training.registry.model_name == f"{ns}.late_arrival"
    # the schema written to is the one the bundle creates, and never the source schema
    schema = _target_bundle(target)["resources"]["schemas"]["lakescore"]
    assert (_deployed("schemas", "lakescore", "catalog_name", target),
            _deployed("schemas", "lakescore", "name", target)) == TARGET_NAMESPACES[target]
    assert TARGET_NAMESPACES[target] != SOURCE_NAMESPACE
    assert {g["principal"] for g in schema["grants"]} == {"${var.grants_principal}"}


def test_dev_staging_and_prod_write_no_table_in_common() -> None:
    written = {}
    for target in TARGET_NAMESPACES:
        args = _task_args("score", target)
        project = load_project(ROOT / "config", catalog=args.catalog, schema=args.schema,
                               source_catalog=args.source_catalog, source_schema=args.source_schema)
        assert project.serving is not None
        written[target] = {project.inference.prediction_table, project.monitoring.quality_table,
                           project.serving.inference_table, project.training.registry.model_name}
    assert written["dev"].isdisjoint(written["staging"])
    assert written["dev"].isdisjoint(written["prod"])
    assert written["staging"].isdisjoint(written["prod"])


@pytest.mark.parametrize("target", sorted(TARGET_NAMESPACES))
def test_the_registered_model_the_bundle_declares_is_the_one_train_registers(target: str) -> None:
    args = _task_args("train", target)
    project = load_project(ROOT / "config", catalog=args.catalog, schema=args.schema)
    models = _target_bundle(target)["resources"].get("registered_models", {})
    if target == "dev":  # development mode would rename it dev_someone_late_arrival: train creates it
        assert models == {}
        return
    (key,) = models
    name = ".".join(_deployed("registered_models", key, field, target)
                    for field in ("catalog_name", "schema_name", "name"))
    assert name == project.training.registry.model_name == f"{'.'.join(TARGET_NAMESPACES[target])}.late_arrival"
    assert models[key]["grants"] == [{"principal": "${var.grants_principal}", "privileges": ["EXECUTE"]}]
    assert VARIABLES["grants_principal"]["default"] == "account users"


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


def test_only_the_workflows_are_scheduled_on_the_quartz_schedule_variable() -> None:
    fields = VARIABLES["score_cron"]["default"].split()
    # Quartz: seconds first, 6 or 7 fields, and "?" in day-of-month or day-of-week.
    assert len(fields) in (6, 7) and "?" in (fields[3], fields[5])
    scheduled = {key: job["schedule"] for key, job in _jobs().items() if "schedule" in job}
    assert sorted(scheduled) == ["workflow", "workflow_serverless"]  # nothing scores before train
    for schedule in scheduled.values():
        assert schedule["quartz_cron_expression"] == "${var.score_cron}"


@pytest.mark.parametrize("job_key", ["workflow", "workflow_serverless"])
def test_the_workflow_runs_train_then_score_then_monitor(job_key: str) -> None:
    tasks = {task["task_key"]: task for task in _jobs()[job_key]["tasks"]}
    assert list(tasks) == ["train", "score", "monitor"]
    assert "depends_on" not in tasks["train"]
    assert tasks["score"]["depends_on"] == [{"task_key": "train"}]
    assert tasks["monitor"]["depends_on"] == [{"task_key": "score"}]
    assert _jobs()[job_key]["max_concurrent_runs"] == 1


@pytest.mark.parametrize(("target", "unpaused"), [("dev", set()), ("staging", {"workflow_serverless"}),
                                                  ("prod", {"workflow_serverless"})])
def test_one_workflow_runs_on_schedule_serverless_by_default_and_none_in_dev(target: str, unpaused: set[str]) -> None:
    status = {key: _substitute(job["schedule"]["pause_status"], target)
              for key, job in _jobs().items() if "schedule" in job}
    assert set(status.values()) <= {"PAUSED", "UNPAUSED"}
    assert {key for key, value in status.items() if value == "UNPAUSED"} == unpaused


def test_every_job_but_serve_has_a_serverless_variant() -> None:
    jobs = _jobs()
    classic = {key for key, job in jobs.items() if "job_clusters" in job}
    serverless = {key for key, job in jobs.items() if "environments" in job}
    assert classic.isdisjoint(serverless) and classic | serverless == set(jobs)
    assert serverless == {f"{key}_serverless" for key in classic - {"serve"}}
    for key in serverless:  # the same tasks with the same parameters, compute aside
        strip = ("job_cluster_key", "libraries", "environment_key")
        twin = [{k: v for k, v in task.items() if k not in strip} for task in jobs[key.removesuffix("_serverless")]["tasks"]]
        assert [{k: v for k, v in task.items() if k not in strip} for task in jobs[key]["tasks"]] == twin, key


def test_serverless_environments_use_environment_version_not_the_deprecated_client() -> None:
    spec = json.loads(SCHEMA_PATH.read_text())["$defs"]["github.com"]["databricks"]["databricks-sdk-go"][
        "service"]["compute.Environment"]["oneOf"][0]["properties"]
    assert "environment_version" in spec and "instead" in spec["client"]["description"]
    for key, job in _jobs().items():
        for env in job.get("environments", []):
            assert set(env["spec"]) == {"environment_version", "dependencies"}, key
    assert VARIABLES["serverless_environment_version"]["default"] == "4"


def test_the_scoring_udf_runs_in_the_jobs_own_environment() -> None:
    # serverless installs nothing beside the job environment: spark_udf must not build a virtualenv
    assert load_project(ROOT / "config").inference.spark_udf_env_manager == "local"


@pytest.mark.parametrize("target", sorted(TARGET_NAMESPACES))
@pytest.mark.parametrize(("job_key", "task_key"), TASKS)
def test_every_task_gives_the_databricks_runtime_the_bundles_volume_and_experiment(
        job_key: str, task_key: str, target: str) -> None:
    from lakescore.runtime import get_runtime

    args = _task_args(job_key, target, task_key)
    runtime = get_runtime(args.runtime, home=args.home, target=args.target, catalog=args.catalog,
                          schema=args.schema, experiment=args.experiment)
    catalog, schema = TARGET_NAMESPACES[target]
    volume = _target_bundle(target)["resources"]["volumes"]["lakescore"]
    assert _substitute(volume["name"], target) == VARIABLES["volume"]["default"] == "lakescore"
    assert runtime.kind == "databricks" and runtime.target == target
    assert str(runtime.home) == f"/Volumes/{catalog}/{schema}/lakescore"
    root = f"/Workspace/Users/someone/.bundle/lakescore/{target}"
    assert runtime.experiment == (f"{root}/[dev someone] lakescore" if target == "dev" else f"{root}/lakescore")
    assert runtime.experiment == _deployed("experiments", "lakescore", "name", target)


def test_the_optional_quality_monitor_profiles_the_predictions_and_their_labels(validator: Any) -> None:
    path = RESOURCES / "optional" / "quality_monitor.yml"
    assert "resources/optional" not in " ".join(BUNDLE["include"])  # deploys before the table exists
    bundle = _merged_bundle()
    include(bundle, _load(path), path.name)
    assert _errors(validator, bundle) == []
    (monitor,) = _load(path)["resources"]["quality_monitors"].values()
    log = monitor["inference_log"]
    # columns the published table has (lakescore.scoring: prediction, probability, model_version)
    # and the view's join (monitoring.yml label_column, the flights' scheduled time)
    assert (log["problem_type"], log["prediction_col"], log["prediction_proba_col"], log["model_id_col"]) == (
        "PROBLEM_TYPE_CLASSIFICATION", "prediction", "probability", "model_version")
    project = load_project(ROOT / "config")
    assert log["label_col"] == project.monitoring.label_column == "is_late"
    assert log["timestamp_col"] == "time_hour"
    args = _task_args("score", "staging")
    view = _substitute(monitor["table_name"], "staging")
    assert view == project.inference.prediction_table.replace("main.flights.", f"{args.catalog}.{args.schema}.")\
        .replace("_predictions", "_monitored")


# --- The databricks-bundles package's resource classes --------------------------------------------
#
# A second offline check, by the CLI team's own Python models of the resources: `from_dict` refuses
# a field the class does not have ("Unexpected field 'task_kee' for class Task") and a value of the
# wrong kind, where a JSON Schema oneOf may let a `${...}` string through.

def _bundle_classes() -> dict[str, Any]:
    from databricks.bundles.experiments import MlflowExperiment
    from databricks.bundles.jobs import Job
    from databricks.bundles.model_serving_endpoints import ModelServingEndpoint
    from databricks.bundles.quality_monitors import QualityMonitor
    from databricks.bundles.registered_models import RegisteredModel
    from databricks.bundles.schemas import Schema
    from databricks.bundles.volumes import Volume

    return {"jobs": Job, "schemas": Schema, "volumes": Volume, "experiments": MlflowExperiment,
            "registered_models": RegisteredModel, "quality_monitors": QualityMonitor,
            "model_serving_endpoints": ModelServingEndpoint}


def _all_resources() -> list[Any]:
    cases = []
    for target in sorted(BUNDLE["targets"]):
        bundle = copy.deepcopy(_target_bundle(target))
        for path in OPTIONAL_FILES:
            include(bundle, _load(path), path.name)
        for kind, items in bundle["resources"].items():
            for key, value in items.items():
                cases.append(pytest.param(kind, key, value, id=f"{target}/{kind}/{key}"))
    return cases


@pytest.mark.parametrize(("kind", "key", "resource"), _all_resources())
def test_every_resource_loads_into_the_databricks_bundles_class(kind: str, key: str, resource: dict[str, Any]) -> None:
    classes = _bundle_classes()
    assert kind in classes, f"resources.{kind} has no databricks-bundles class in this test"
    loaded = classes[kind].from_dict(copy.deepcopy(resource))
    assert loaded.as_dict() == resource, key  # nothing dropped or renamed on the way
    if kind == "jobs":
        assert [task.task_key for task in loaded.tasks] == [task["task_key"] for task in resource["tasks"]]


@pytest.mark.parametrize(("where", "key", "value", "message"), [
    ("task", "task_kee", "score", "Unexpected field 'task_kee' for class Task"),
    ("task", "max_retries", "three", "invalid literal for int()"),
    ("cluster", "data_security_mod", "SINGLE_USER", "Unexpected field 'data_security_mod'"),
    ("environment", "client_version", "4", "Unexpected field 'client_version'"),
])
def test_databricks_bundles_rejects_a_broken_job(where: str, key: str, value: Any, message: str) -> None:
    from databricks.bundles.jobs import Job

    job = copy.deepcopy(_jobs()["workflow" if where != "environment" else "workflow_serverless"])
    if where == "task":
        job["tasks"][1][key] = value
    elif where == "cluster":
        job["job_clusters"][0]["new_cluster"][key] = value
    else:
        job["environments"][0]["spec"][key] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        Job.from_dict(job)


@pytest.mark.parametrize("target", ["dev", "staging", "prod"])
def test_the_optional_model_serving_endpoint_is_the_exported_config(validator: Any, target: str) -> None:
    """resources/optional/model_serving.yml serves what `lakescore serve --export-model-serving`
    exports for the same version (entity, scale, route, inference-table capture), and is not
    included by databricks.yml: a deploy before a version is registered never meets it."""
    from lakescore.serving.model_serving import ai_gateway_config, endpoint_config

    path = RESOURCES / "optional" / "model_serving.yml"
    assert "resources/optional" not in " ".join(BUNDLE["include"])
    document = _load(path)
    assert "default" not in document["variables"]["serving_model_version"]  # the deploy must name the version
    bundle = _merged_bundle()
    include(bundle, document, path.name)
    assert _errors(validator, bundle) == []
    (endpoint,) = document["resources"]["model_serving_endpoints"].values()
    text = json.dumps(endpoint).replace("${var.serving_model_version}", "7")
    resource = json.loads(_substitute(text, target))
    args = _task_args("score", target)
    project = load_project(ROOT / "config", catalog=args.catalog, schema=args.schema)
    exported = endpoint_config(project.serving, model_name=project.training.registry.model_name, version=7)
    assert resource["config"] == {k: v for k, v in exported.as_dict().items() if k != "name"}
    assert resource["ai_gateway"] == ai_gateway_config(project.serving).as_dict()
    assert resource["name"] == f"{project.serving.endpoint_name}-{target}"
