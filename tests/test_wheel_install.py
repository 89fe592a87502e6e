"""The wheel installs into Databricks Runtime 18 LTS ML without replacing the runtime's libraries.

Builds the wheel once (the bundle's own ``artifacts.lakescore.build`` command from databricks.yml,
with the locked ``build``), then asks pip what installing each job's libraries into this
environment would change (``pip install --dry-run --report``): the wheel alone (train, score,
monitor, the workflow, serverless) and the wheel with the serve job's PyPI libraries. It fails when
pip would replace (or add a second copy of) pyspark, mlflow, mlflow-skinny, pandas, numpy or
pyarrow, naming the package, the runtime's version and pip's.

Runs on the Databricks Runtime 18 lane (``make test-dbr``: this environment is
requirements-dbr.lock), not in the main suite's testpaths. Needs PyPI for the requirements the
runtime lacks.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements-dbr.lock"
# what the runtime brings and a cluster library must never replace
RUNTIME_OWNED = ("pyspark", "mlflow", "mlflow-skinny", "pandas", "numpy", "pyarrow")


def _locked() -> dict[str, str]:
    pins = (line.split("==") for line in LOCK.read_text().splitlines() if "==" in line and not line.startswith("#"))
    return {canonicalize_name(name): version.strip() for name, version in pins}


def _job_libraries() -> dict[str, tuple[str, ...]]:
    """Each distinct set of PyPI libraries the bundle's jobs install beside the wheel, by the jobs."""
    sets: dict[tuple[str, ...], list[str]] = {}
    for path in sorted((REPO / "resources").glob("*.yml")):
        for job, spec in (yaml.safe_load(path.read_text()).get("resources", {}).get("jobs") or {}).items():
            for task in spec.get("tasks", []):
                pypi = tuple(sorted(lib["pypi"]["package"] for lib in task.get("libraries", []) if "pypi" in lib))
                sets.setdefault(pypi, []).append(f"{job}.{task['task_key']}")
    return {", ".join(sorted(set(users))): pypi for pypi, users in sets.items()}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once per session by the bundle's build command into a temporary folder."""
    build = yaml.safe_load((REPO / "databricks.yml").read_text())["artifacts"]["lakescore"]["build"]
    command = shlex.split(build)
    if command[0] == "python":
        command[0] = sys.executable
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([*command, "--outdir", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"{build!r} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")
    [built] = out.glob("lakescore-*.whl")
    return built


def test_this_lane_is_the_locked_runtime():
    """The check below is only as good as the environment: the runtime's libraries at the lock's versions."""
    locked = _locked()
    here = {name: metadata.version(name) for name in RUNTIME_OWNED if name in locked}
    assert here == {name: locked[name] for name in here}, "re-run `make install-dbr`"
    assert set(here) == set(RUNTIME_OWNED)


@pytest.mark.parametrize("jobs", sorted(_job_libraries()),
                         ids=lambda jobs: "wheel+pypi" if _job_libraries()[jobs] else "wheel")
def test_the_wheel_installs_without_replacing_the_runtimes_libraries(wheel, tmp_path, jobs):
    libraries = _job_libraries()[jobs]
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
                           "--report", str(report), str(wheel), *libraries],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip cannot install {wheel.name} {' '.join(libraries)} here: {done.stderr.strip()}"
    would = {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
             for item in json.loads(report.read_text())["install"]}
    replaced = [f"{name} {_installed(name)} -> {would[name]}" for name in RUNTIME_OWNED if name in would]
    assert not replaced, (f"installing {wheel.name} {' '.join(libraries)} (jobs {jobs}) would replace the runtime's "
                          f"{'; '.join(replaced)}; widen the requirement in pyproject.toml to include the runtime's "
                          "version (requirements-dbr.lock)")


def _installed(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "(not installed: a second copy beside the runtime's)"
