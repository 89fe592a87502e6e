"""A rehearsal of the bundle's jobs: every task of every job, run as ``databricks bundle run`` would.

databricks.yml and resources/*.yml are read and resolved for a target (tests/fixtures/rehearsal.py),
the Unity Catalog resources the target declares are "deployed" (schemas created, volumes made,
the experiment and registered models created in MLflow), and then each job's tasks run in
``depends_on`` order by executing the task's own entry point (``python_file`` as ``__main__``,
with ``sys.argv`` exactly the declared ``parameters``) in this process, on a local Spark Connect
session (what serverless hands a job).

The workspace is replaced at two seams only:
- ``lakescore.runtime.databricks.from_environment`` (how a job's ``--runtime databricks`` becomes a
  runtime): its real result is kept, except that the volume path ``/Volumes/...`` is mapped to a
  temporary folder (the cluster's FUSE mount; the volume must be one the bundle deploys) and
  MLflow's ``databricks`` / ``databricks-uc`` URIs point at one SQLite store per workspace;
- ``databricks.feature_engineering``, the workspace's package, is the suite's stand-in
  (tests/fixtures/fake_feature_engineering.py).
Unity Catalog's metastore is local Spark's ``spark_catalog``: each target runs with
``--var catalog=spark_catalog --var source_catalog=spark_catalog``, as a user points a deploy at
another catalog. ``${workspace.file_path}`` (where the bundle's files are synced) is the checkout.

The serve job's task runs its entry point with its parameters too, with ``lakescore serve``'s
workflow asked for its plan only (``dry_run``): a warm endpoint runs until stopped, and
tests/serving covers it.

Runs on the Databricks Runtime 18 lane (``make test-dbr``), not in the main suite's testpaths.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import runpy
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from fixtures.fake_feature_engineering import install as install_feature_engineering
from fixtures.mlflow_store import seed
from fixtures.rehearsal import Bundle, BundleError, Task, check_files, load_bundle, local_parameters, task_order

from lakescore.errors import RuntimeUnsupportedError
from lakescore.runtime import databricks
from lakescore.runtime.local_spark import CONNECT_MODE_ENV

pytestmark = [pytest.mark.spark, pytest.mark.connect]

ROOT = Path(__file__).resolve().parents[1]
METASTORE = {"catalog": "spark_catalog", "source_catalog": "spark_catalog"}  # UC's catalogs -> local Spark's
SOURCE = "spark_catalog.flights"  # var.source_catalog.var.source_schema: the shared tables every target reads


@dataclasses.dataclass
class Workspace:
    """What a workspace holds for the rehearsal: the metastore (Spark), MLflow, the volumes' mount."""

    spark: Any
    mlflow_uri: str
    volumes: Path  # the FUSE mount: /Volumes/<c>/<s>/<v> is volumes/<c>/<s>/<v>


@dataclasses.dataclass(frozen=True)
class TaskRun:
    job: str
    task: str
    code: int
    stdout: str
    stderr: str
    tables: frozenset[str]  # tables of the target's schema after the task
    seconds: float


class TaskFailed(AssertionError):
    """A task of the rehearsal exited non-zero (its stderr says why)."""


@pytest.fixture(scope="module")
def source_tables(spark, flights_sample: pd.DataFrame, demo_tables: dict[str, pd.DataFrame]) -> str:
    """The shared source tables (``${source_catalog}.${source_schema}``), written once: the 2,000-flight
    sample as flights (training and labels), the feature tables weather and planes, and 200 flights
    of months 10-12 as the CDF-enabled score source flights_incoming."""
    from lakescore.demo_data import PLANES, WEATHER

    writer = databricks.DatabricksRuntime(Path("/Volumes/x/y/z"), session=spark)  # writes by name only
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SOURCE}")
    writer.write_table(f"{SOURCE}.flights", flights_sample, mode="error")
    for name in (WEATHER, PLANES):
        writer.write_table(f"{SOURCE}.{name.split('.')[-1]}", demo_tables[name], mode="error")
    incoming = flights_sample[flights_sample["month"] >= 10].head(200).reset_index(drop=True)
    writer.write_table(f"{SOURCE}.flights_incoming", incoming, mode="error",
                       configuration={"delta.enableChangeDataFeed": "true"})
    return SOURCE


def deploy(bundle: Bundle, workspace: Workspace) -> None:
    """What ``databricks bundle deploy`` creates of the target's resources: schemas, volumes, the
    experiment(s) and registered model(s)."""
    import mlflow

    resources = bundle.config["resources"]
    for schema in resources.get("schemas", {}).values():
        workspace.spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{schema['catalog_name']}`.`{schema['name']}`")
    for volume in resources.get("volumes", {}).values():
        (workspace.volumes / volume["catalog_name"] / volume["schema_name"] / volume["name"]).mkdir(parents=True)
    client = mlflow.MlflowClient(tracking_uri=workspace.mlflow_uri, registry_uri=workspace.mlflow_uri)
    for experiment in resources.get("experiments", {}).values():
        client.create_experiment(experiment["name"], artifact_location=str(workspace.volumes.parent / "mlartifacts"))
    for model in resources.get("registered_models", {}).values():
        client.create_registered_model(f"{model['catalog_name']}.{model['schema_name']}.{model['name']}")


def _on_workspace(workspace: Workspace):
    """``from_environment`` as on the workspace: the real runtime with the volume mount and MLflow's
    server replaced."""
    real = databricks.from_environment

    def from_environment(**kwargs: Any) -> databricks.DatabricksRuntime:
        runtime = real(**kwargs)
        match = databricks.VOLUME_PATH.match(str(runtime.home))
        mounted = workspace.volumes / str(runtime.home).removeprefix("/Volumes/")
        if not match or not Path(workspace.volumes, *match.groups()[:3]).is_dir():
            raise RuntimeUnsupportedError(f"--home {runtime.home} is not on a volume this bundle deploys")
        return dataclasses.replace(runtime, home=mounted,
                                   uris=databricks.MlflowUris(workspace.mlflow_uri, workspace.mlflow_uri))

    return from_environment


def _schema_tables(bundle: Bundle, spark: Any) -> frozenset[str]:
    tables: set[str] = set()
    if spark is None:  # a task run without a workspace (parse_task)
        return frozenset()
    for schema in bundle.config["resources"].get("schemas", {}).values():
        name = f"`{schema['catalog_name']}`.`{schema['name']}`"
        tables |= {f"{schema['catalog_name']}.{schema['name']}.{r['tableName']}"
                   for r in spark.sql(f"SHOW TABLES IN {name}").collect()}
    return frozenset(tables)


def run_task(bundle: Bundle, task: Task, spark: Any) -> TaskRun:
    """Execute one task's entry point with exactly its parameters; its exit status and output."""
    argv = [str(task.file), *local_parameters(bundle, task)]
    if task.kind == "spark_python_task":
        def start() -> None:
            runpy.run_path(str(task.file), run_name="__main__")
    else:  # python_wheel_task: the wheel's console script (pyproject.toml [project.scripts])
        from importlib.metadata import entry_points

        package, name = task.entry_point.split(":")
        found = [ep for ep in entry_points(group="console_scripts", name=name) if ep.dist and ep.dist.name == package]
        if not found:
            raise BundleError(f"job {task.job} task {task.key}: package {package} has no entry point {name!r}")

        def start() -> None:
            sys.exit(found[0].load()())
    out, err = io.StringIO(), io.StringIO()
    began = time.perf_counter()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.setattr(sys, "argv", argv)
        try:
            start()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    seconds = time.perf_counter() - began
    print(f"rehearsal {bundle.target} job {task.job} task {task.key}: exit {code} in {seconds:.1f} s")
    return TaskRun(task.job, task.key, code, out.getvalue(), err.getvalue(), _schema_tables(bundle, spark), seconds)


def job_order(bundle: Bundle) -> list[str]:
    """Jobs of several tasks first (the workflows build what a manual run of one task finds: a
    registered model, published predictions), then the rest by name."""
    return sorted(bundle.jobs, key=lambda key: (-len(bundle.jobs[key]), key))


def rehearse(bundle: Bundle, workspace: Workspace, *, jobs: list[str] | None = None) -> list[TaskRun]:
    """Deploy ``bundle`` into ``workspace`` and run every task of ``jobs`` (default all, in
    :func:`job_order`), each job's tasks in :func:`task_order`.

    Raises
    ------
    BundleError
        A task names a missing file, or ``depends_on`` is broken (before anything runs).
    TaskFailed
        A task exited non-zero; its stderr is in the message.
    """
    check_files(bundle)
    ordered = {key: task_order(bundle.jobs[key]) for key in (jobs or job_order(bundle))}
    deploy(bundle, workspace)
    runs = []
    for tasks in ordered.values():
        for task in tasks:
            run = run_task(bundle, task, workspace.spark)
            runs.append(run)
            if run.code != 0:
                raise TaskFailed(f"job {task.job} task {task.key} (target {bundle.target}) exited {run.code}: "
                                 f"{run.stderr.strip()[-2000:]}")
    return runs


@pytest.fixture
def workspace(spark_connect, source_tables: str, tmp_path: Path, migrated_mlflow,
              monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A fresh workspace for one rehearsal: the shared Spark Connect server (and its source tables),
    an empty MLflow store, an empty volumes mount; pyspark in Connect mode, as on serverless."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(CONNECT_MODE_ENV, "1")
    install_feature_engineering(monkeypatch)
    seed(tmp_path / "workspace-mlflow.db", migrated_mlflow())
    ws = Workspace(spark_connect, f"sqlite:///{tmp_path / 'workspace-mlflow.db'}", tmp_path / "Volumes")
    monkeypatch.setattr(databricks, "from_environment", _on_workspace(ws))
    import lakescore.cli

    write_traceback = lakescore.cli._write_traceback  # a failure before the runtime exists logs to --home
    monkeypatch.setattr(lakescore.cli, "_write_traceback", lambda home, name, err: write_traceback(
        ws.volumes / str(home).removeprefix("/Volumes/") if str(home).startswith("/Volumes/") else home, name, err))
    import lakescore.workflows.serve as serving

    plan_only = serving.serve
    monkeypatch.setattr(serving, "serve", lambda project, runtime, **kw: plan_only(project, runtime, **{**kw, "dry_run": True}))
    return ws


def _copy_bundle(tmp_path: Path) -> Path:
    """databricks.yml and resources/ copied into ``tmp_path/bundle`` (to be changed); src/ and config/
    linked, so relative paths resolve as in the checkout."""
    root = tmp_path / "bundle"
    root.mkdir()
    shutil.copy(ROOT / "databricks.yml", root)
    shutil.copytree(ROOT / "resources", root / "resources")
    for linked in ("src", "config"):
        (root / linked).symlink_to(ROOT / linked)
    return root


def _edit_job(root: Path, file: str, job: str, change: Any) -> None:
    path = root / "resources" / file
    document = yaml.safe_load(path.read_text())
    change(document["resources"]["jobs"][job])
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def _user() -> str:
    """A fresh development-mode user: its schema dev_<user>_flights is new to the shared metastore."""
    return f"u{uuid.uuid4().hex[:8]}@example.com"


# --- the rehearsal -------------------------------------------------------------------------------

def test_dev_runs_every_task_of_every_job_in_order(workspace: Workspace) -> None:
    user = _user()
    bundle = load_bundle(ROOT, "dev", overrides=METASTORE, user=user)
    runs = rehearse(bundle, workspace)

    expected = [(job, task.key) for job in job_order(bundle) for task in task_order(bundle.jobs[job])]
    assert [(r.job, r.task) for r in runs] == expected
    assert len(runs) == sum(len(tasks) for tasks in bundle.jobs.values()) == 13
    schema = f"spark_catalog.dev_{user.split('@')[0]}_flights"
    steps = {(r.job, r.task): r for r in runs}
    assert job_order(bundle)[:2] == ["workflow", "workflow_serverless"]  # the two train -> score -> monitor jobs
    first = [steps["workflow", key] for key in ("train", "score", "monitor")]
    assert f"{schema}.late_arrival_predictions" not in first[0].tables
    assert f"{schema}.late_arrival_predictions" in first[1].tables  # score published ...
    assert f"{schema}.late_arrival_quality" not in first[1].tables
    assert f"{schema}.late_arrival_quality" in first[2].tables  # ... and monitor measured it
    predictions = workspace.spark.read.table(f"{schema}.late_arrival_predictions")
    assert predictions.count() == 200  # every row of flights_incoming, once, whatever ran after
    quality = workspace.spark.read.table(f"{schema}.late_arrival_quality")
    assert quality.count() == 1  # one published run, measured once: the later monitors had nothing new
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=workspace.mlflow_uri, registry_uri=workspace.mlflow_uri)
    versions = client.search_model_versions(f"name = '{schema}.late_arrival'")
    assert [int(v.version) for v in versions] == [1]  # the later trains reused it: nothing changed
    names = {e.name for e in client.search_experiments()} - {"Default"}
    assert names == {e["name"] for e in bundle.config["resources"]["experiments"].values()}


class Parsed(BaseException):
    """Raised in place of ``lakescore.cli.run``: the task's entry point parsed its parameters into ``args``."""

    def __init__(self, parsed: Any) -> None:
        super().__init__("parsed")
        self.parsed = parsed  # not .args: BaseException's own tuple


def parse_task(bundle: Bundle, task: Task) -> Any:
    """The ``argparse.Namespace`` a task's entry point makes of exactly its parameters (the entry
    point runs; the workflow it would call does not).

    Raises
    ------
    TaskFailed
        The entry point refused the parameters (argparse's exit status 2 and its message).
    """
    import lakescore.cli

    def stop(args: Any) -> dict:
        raise Parsed(args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lakescore.cli, "run", stop)
        patch.setattr(lakescore.cli, "_write_traceback", lambda home, name, err: None)  # no volume mounted here
        try:
            run = run_task(bundle, task, None)
        except Parsed as stopped:
            return stopped.parsed
    raise TaskFailed(f"job {task.job} task {task.key} (target {bundle.target}) exited {run.code}: {run.stderr.strip()}")


def test_prod_tasks_parse_and_name_the_tables_the_target_deploys_and_reads(
        spark, source_tables: str) -> None:
    """prod without a second model fit (the dev rehearsal runs the same config and code): every
    task's file exists, its entry point takes its parameters, and what they name exists or is
    deployed by prod: the schema, volume and experiment it writes, the registered model train
    registers, the source tables every task reads."""
    from lakescore.config import load_project

    bundle = load_bundle(ROOT, "prod", overrides=METASTORE)
    check_files(bundle)
    resources = bundle.config["resources"]
    schema, volume = resources["schemas"]["lakescore"], resources["volumes"]["lakescore"]
    model = resources["registered_models"]["lakescore"]
    assert (schema["catalog_name"], schema["name"]) == ("spark_catalog", "flights_prod")
    writes_to = "spark_catalog.flights_prod"
    tasks = [task for job in job_order(bundle) for task in task_order(bundle.jobs[job])]
    assert len(tasks) == 13
    for task in tasks:
        args = parse_task(bundle, task)
        where = f"job {task.job} task {task.key}"
        assert (args.target, args.runtime, f"{args.catalog}.{args.schema}") == ("prod", "databricks", writes_to), where
        assert args.home == f"/Volumes/{volume['catalog_name']}/{volume['schema_name']}/{volume['name']}", where
        assert args.experiment == resources["experiments"]["lakescore"]["name"], where
        project = load_project(args.config_dir, catalog=args.catalog, schema=args.schema,
                               source_catalog=args.source_catalog, source_schema=args.source_schema)
        reads = [project.training.data.table, *(lookup.table_name for lookup in project.training.feature_lookups),
                 project.inference.score_source_table, project.monitoring.label_table]
        assert [name for name in reads if not spark.catalog.tableExists(name)] == [], where
        writes = [project.inference.prediction_table, project.monitoring.quality_table]
        assert [name.rpartition(".")[0] for name in writes] == [writes_to] * 2, where
        assert project.training.registry.model_name == f"{model['catalog_name']}.{model['schema_name']}.{model['name']}"


# --- what the rehearsal catches ----------------------------------------------------------------

def test_a_task_naming_a_missing_file_fails_before_anything_runs(workspace: Workspace, tmp_path: Path) -> None:
    root = _copy_bundle(tmp_path)
    _edit_job(root, "workflow.job.yml", "workflow",
              lambda job: job["tasks"][1]["spark_python_task"].update(python_file="../src/jobs/scoring.py"))
    bundle = load_bundle(root, "dev", overrides=METASTORE, user=_user())
    with pytest.raises(BundleError, match=r"job workflow task score: python_file \S+/src/jobs/scoring.py does not exist"):
        rehearse(bundle, workspace)
    assert not workspace.volumes.exists()  # nothing was deployed or run
    with pytest.raises(BundleError, match=r"job workflow task score: python_file \S+/src/jobs/scoring.py does not exist"):
        check_files(load_bundle(root, "prod", overrides=METASTORE))  # what the prod check runs


def test_a_parameter_the_entry_point_does_not_take_fails_its_task(workspace: Workspace, tmp_path: Path) -> None:
    root = _copy_bundle(tmp_path)
    _edit_job(root, "train.job.yml", "train", lambda job: job["tasks"][0]["spark_python_task"]["parameters"].extend(
        ["--source_schema", "flights"]))  # underscore: the CLI's flag is --source-schema
    bundle = load_bundle(root, "dev", overrides=METASTORE, user=_user())
    with pytest.raises(TaskFailed, match=r"(?s)job train task train \(target dev\) exited 2: .*"
                                         r"unrecognized arguments: --source_schema flights"):
        rehearse(bundle, workspace, jobs=["train"])
    prod = load_bundle(root, "prod", overrides=METASTORE)
    with pytest.raises(TaskFailed, match=r"job train task train \(target prod\) exited 2: (?s:.*)"
                                         r"unrecognized arguments: --source_schema flights"):
        parse_task(prod, prod.jobs["train"][0])  # what the prod check runs


def test_a_task_reading_a_table_no_earlier_task_wrote_fails(workspace: Workspace, tmp_path: Path) -> None:
    root = _copy_bundle(tmp_path)

    def forget_dependency(job: dict) -> None:
        job["tasks"][2].pop("depends_on")  # monitor no longer waits for score (nor train)

    _edit_job(root, "serverless.job.yml", "workflow_serverless", forget_dependency)
    user = _user()
    bundle = load_bundle(root, "dev", overrides=METASTORE, user=user)
    schema = f"spark_catalog.dev_{user.split('@')[0]}_flights"
    with pytest.raises(TaskFailed, match=r"(?s)job workflow_serverless task monitor \(target dev\) exited 2: "
                                         rf".*nothing is published in {schema}.late_arrival_predictions yet"):
        rehearse(bundle, workspace, jobs=["workflow_serverless"])
