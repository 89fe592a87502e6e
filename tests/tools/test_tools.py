"""src/tools/preview.py and src/tools/smoke.py as a user runs them: a failure is one line on stderr,
as the ``lakescore`` command prints it (lakescore.cli.report_failure), never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _tool(name: str, *args: str, cwd: Path, config: Path = REPO / "config", path: Path | None = None
          ) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *([str(path)] if path else [])])}
    env.pop("LAKESCORE_DEBUG", None)
    return subprocess.run([sys.executable, str(REPO / "src" / "tools" / name), *args, "--config-dir",
                           str(config), "--home", str(cwd / "home")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_smoke_prints_one_line_for_a_failure_that_is_not_lakescores(tmp_path, flights_sample, lookup_tables):
    from lakescore.runtime import LocalRuntime

    lookup_tables(LocalRuntime(tmp_path / "home"))
    rows = flights_sample.head(100).astype({"arr_delay": "string"})
    rows["arr_delay"] = "late by 0.123456"  # training.yml's label expression `arr_delay > 15` fails in pandas
    rows.to_csv(tmp_path / "sample.csv", index=False)

    done = _tool("smoke.py", "--probe", "sample.csv", cwd=tmp_path)

    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smoke: unexpected_error: TypeError (not a lakescore error")
    logs = list((tmp_path / "home" / "logs").glob("smoke-*.log"))
    assert len(logs) == 1 and f"full traceback in {logs[0].resolve()}" in lines[0]
    assert "123456" not in done.stderr and "Traceback (most recent call last)" in logs[0].read_text()


def test_preview_prints_one_line_for_a_failure_that_is_not_lakescores(tmp_path, project_dir):
    (tmp_path / "boom_steps.py").write_text("raise RuntimeError('cannot start: 0.123456')\n")  # user code failing on import
    training = yaml.safe_load((project_dir / "training.yml").read_text())
    training["preprocessing"].insert(0, {"step": "custom", "name": "boom", "ref": "boom_steps:boom", "columns": ["hour"]})
    (project_dir / "training.yml").write_text(yaml.safe_dump(training))

    done = _tool("preview.py", "--action", "train", cwd=tmp_path, config=project_dir, path=tmp_path)

    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preview: unexpected_error: RuntimeError (not a lakescore error")
    assert "123456" not in done.stderr
    assert "cannot start: 0.123456" in next((tmp_path / "home" / "logs").glob("preview-*.log")).read_text()
