"""The ``fresh_module`` check: reload the saved chain in a new Python process, through freshly
imported code, and score each part's sample there. Any difference from this process fails.

Run as ``python -m lakescore.admission.fresh <folder>``: the folder holds the saved chain
(``chain/``) and ``job.pkl`` (the samples by part key and the modules to import first); the child
writes ``outputs.pkl``.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from lakescore.admission.compare import compare
from lakescore.admission.parts import Part, chain_parts
from lakescore.admission.probe import CheckResult
from lakescore.chain import FittedChain

TIMEOUT_S = 300


def check_fresh_module(chain: FittedChain, parts: list[Part]) -> dict[str, CheckResult]:
    """Score every part's sample in a fresh process and compare with this one.

    Returns
    -------
    dict mapping part key -> CheckResult of check ``fresh_module``.
    """
    raw = next(p.sample for p in parts if p.kind == "chain")
    modules = sorted({step.impl.__module__ for step in chain.steps})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        chain.save(folder / "chain")
        with open(folder / "job.pkl", "wb") as fh:
            pickle.dump({"raw": raw, "samples": {p.key: p.sample for p in parts}, "modules": modules}, fh)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        done = subprocess.run([sys.executable, "-m", "lakescore.admission.fresh", str(folder)], env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            reason = f"fresh process failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
            return {p.key: CheckResult(p.label, "fresh_module", "failed", reason) for p in parts}
        with open(folder / "outputs.pkl", "rb") as fh:
            outputs = pickle.load(fh)
    results = {}
    for part in parts:
        got = outputs.get(part.key)
        if isinstance(got, str):
            reason = got
        else:
            reason = compare(got, part.run(part.sample))
        results[part.key] = CheckResult(part.label, "fresh_module", "failed" if reason else "passed", reason or "")
    return results


def _child(folder: Path) -> None:
    with open(folder / "job.pkl", "rb") as fh:
        job = pickle.load(fh)
    for module in job["modules"]:
        importlib.import_module(module)
    chain = FittedChain.load(folder / "chain")
    outputs: dict[str, object] = {}
    for part in chain_parts(chain, job["raw"]):
        try:
            outputs[part.key] = part.run(job["samples"][part.key])
        except Exception as err:  # reported as the part's failure reason
            outputs[part.key] = f"raised {type(err).__name__}: {err}"
    with open(folder / "outputs.pkl", "wb") as fh:
        pickle.dump(outputs, fh)


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
