"""scripts/setup.sh's Python check: 3.11 and 3.12 pass, others are refused before anything is created."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run_setup(tmp_path: Path, minor: int) -> subprocess.CompletedProcess[str]:
    """Run a copy of setup.sh with PYTHON a stand-in that reports Python 3.<minor> to the check and
    stops the script (exit 3, "venv reached") at the first thing it would do after the check."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    fake = tmp_path / "python"
    fake.write_text("#!/usr/bin/env bash\n"
                    f'if [ "$1" = "-c" ]; then exec {sys.executable} -c "import sys; sys.version_info = (3, {minor}, 0); $2"; fi\n'
                    f'if [ "$1" = "--version" ]; then echo "Python 3.{minor}.0"; exit 0; fi\n'
                    'echo "venv reached: $*"; exit 3\n')
    fake.chmod(0o755)
    if shutil.which("java") is None:
        pytest.skip("setup.sh checks Java before Python and this machine has no java on PATH")
    return subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh")], env={"PATH": "/usr/bin:/bin:" +
                          str(Path(shutil.which("java")).parent), "PYTHON": str(fake)},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("minor", [11, 12])
def test_python_3_11_and_3_12_pass_the_check(tmp_path, minor):
    done = _run_setup(tmp_path, minor)
    assert done.returncode == 3 and "venv reached: -m venv .venv" in done.stdout, done.stderr


@pytest.mark.parametrize("minor", [10, 13])
def test_other_pythons_are_refused_with_the_fix(tmp_path, minor):
    done = _run_setup(tmp_path, minor)
    assert done.returncode == 1
    assert f"Python 3.11 or 3.12 is required; '{tmp_path / 'python'}' is Python 3.{minor}.0" in done.stderr
    assert not (tmp_path / ".venv").exists()
