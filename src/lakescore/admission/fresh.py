"""The ``fresh_module`` check: reload the saved chain in a new Python process, through freshly
imported code, and score each part's sample there. Any difference from this process fails.

Run as ``python -m lakescore.admission.fresh <folder>``: the folder holds the saved chain
(``chain/``) and ``job.pkl`` (the samples by part key and the modules to import first); the child
writes ``outputs.pkl``, with the module variables of the user's modules as a fresh import leaves
them. A failure names the variables this process changed (e.g. a dict filled by ``setdefault``
during training), so the message says what differs, not only that answers do.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from lakescore.admission.answers import Answers
from lakescore.admission.compare import compare
from lakescore.admission.parts import Part, chain_parts, set_parts
from lakescore.admission.result import CheckResult
from lakescore.chain import FittedChain
from lakescore.model_set import ModelSet
from lakescore.saved_models import load_saved
from lakescore.usercode import current_module

TIMEOUT_S = 300
SHOWN_CHARS = 60


def _modules(chain: FittedChain | ModelSet) -> list[str]:
    """Modules the chain's code lives in: step kinds, user functions of custom steps, rule functions
    (for a model set: its components', and its combined rules')."""
    if isinstance(chain, ModelSet):
        names = {m for _, component in chain.components for m in _modules(component)}
        return sorted(names | {current_module(rule.function.module) for rule in chain.combined_rules})
    names = {step.impl.__module__ for step in (*chain.pre_split, *chain.steps)}
    for step in (*chain.pre_split, *chain.steps):
        names.update(current_module(ref["module"]) for role in ("apply", "learn")
                     if isinstance(ref := step.state.get(role), dict) and "module" in ref)
    names.update(current_module(rule.function.module) for rule in (*chain.rules, *chain.output_rules))  # type: ignore[attr-defined]  # eligibility and output rules both have function
    return sorted(names)


def module_variables(modules: list[str]) -> dict[str, tuple[str, str]]:
    """The data variables of the user's modules: ``{"module.NAME": (sha256 of repr, short repr)}``.

    Functions, classes and modules are left out, and so are lakescore's own modules and values whose
    repr holds a memory address (they differ in every process)."""
    found: dict[str, tuple[str, str]] = {}
    for name in modules:
        if name == "lakescore" or name.startswith("lakescore."):
            continue
        module = sys.modules.get(name) or importlib.import_module(name)
        for var, value in vars(module).items():
            if var.startswith("__") or isinstance(value, (types.ModuleType, types.FunctionType, type,
                                                           types.BuiltinFunctionType)):
                continue
            text = repr(sorted(value, key=repr)) if isinstance(value, (set, frozenset)) else repr(value)
            if " at 0x" not in text:  # sets sorted: their order follows the process's hash seed
                short = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."
                found[f"{name}.{var}"] = (hashlib.sha256(text.encode()).hexdigest(), short)
    return found


def _changed(here: dict[str, tuple[str, str]], fresh: dict[str, tuple[str, str]]) -> str:
    """What differs between this process's module variables and a fresh import's, for a reason."""
    diffs = [f"{k} is {here[k][1]} in this process but {fresh[k][1] if k in fresh else 'absent'} in a fresh import"
             for k in sorted(here) if here[k][0] != fresh.get(k, ("",))[0]]
    return "; module variable " + "; ".join(diffs) if diffs else ""


def check_fresh_module(chain: FittedChain | ModelSet, parts: list[Part], *,
                       answers: Answers | None = None) -> dict[str, CheckResult]:
    """Score every part's sample in a fresh process and compare with this one.

    ``answers`` (:class:`~lakescore.admission.answers.Answers`) holds this process's answers when
    the probe already computed them; a part's answer is computed here otherwise. To run the fresh
    process while this one probes, use :class:`FreshProcess`.

    Returns
    -------
    dict mapping part key -> CheckResult of check ``fresh_module``.
    """
    with FreshProcess(chain, parts) as fresh:
        return fresh.results(answers=answers)


class FreshProcess:
    """The ``fresh_module`` check's child process, started when this is built, so that it imports
    and scores while this process runs the in-process checks (a context manager: leaving it stops
    a child still running and removes its folder).

    The chain is saved and the samples written when it starts; :meth:`results` waits for the child
    (at most 300 s) and compares its answers with this process's, whose module variables it reads
    then (after the in-process checks, as a check run after them would).
    """

    def __init__(self, chain: FittedChain | ModelSet, parts: list[Part]) -> None:
        self.parts = parts
        self.modules = _modules(chain)
        self._tmp = tempfile.TemporaryDirectory()
        self.folder = Path(self._tmp.name)
        raw = next(p.sample for p in parts if p.kind == "chain")
        chain.save(self.folder / "chain")
        with open(self.folder / "job.pkl", "wb") as fh:
            pickle.dump({"raw": raw, "samples": {p.key: p.sample for p in parts}, "modules": self.modules}, fh)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._stderr = open(self.folder / "stderr.txt", "w+")  # a file, not a pipe: the child never waits on it
        self._child = subprocess.Popen([sys.executable, "-m", "lakescore.admission.fresh", str(self.folder)], env=env,
                                       stdout=subprocess.DEVNULL, stderr=self._stderr, text=True)

    def __enter__(self) -> FreshProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._child.poll() is None:  # left early (an error in this process): the child is not needed
            self._child.kill()
            self._child.wait()
        self._stderr.close()
        self._tmp.cleanup()

    def results(self, *, answers: Answers | None = None) -> dict[str, CheckResult]:
        """Wait for the child and compare: ``{part key: CheckResult of check fresh_module}``.

        Raises
        ------
        subprocess.TimeoutExpired
            When the child runs longer than 300 s (it is stopped).
        """
        try:
            returncode = self._child.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
            raise
        if returncode != 0:
            self._stderr.seek(0)
            stderr = self._stderr.read().strip()
            reason = f"fresh process failed: {stderr.splitlines()[-1] if stderr else returncode}"
            return {p.key: CheckResult(p.label, "fresh_module", "failed", reason) for p in self.parts}
        with open(self.folder / "outputs.pkl", "rb") as fh:
            outputs = pickle.load(fh)
        changed = _changed(module_variables(self.modules), outputs.pop("__module_variables__", {}))
        answers = answers or Answers()
        results = {}
        for part in self.parts:
            got = outputs.get(part.key)
            reason = got if isinstance(got, str) else compare(got, answers.whole(part))  # type: ignore[assignment]  # str or None from here on
            reason = reason + changed if reason else None  # type: ignore[assignment]  # as above
            results[part.key] = CheckResult(part.label, "fresh_module", "failed" if reason else "passed", reason or "")
        return results


def _child(folder: Path) -> None:
    with open(folder / "job.pkl", "rb") as fh:
        job = pickle.load(fh)
    for module in job["modules"]:
        importlib.import_module(module)
    outputs: dict[str, Any] = {"__module_variables__": module_variables(job["modules"])}
    model = load_saved(folder / "chain")
    parts = set_parts(model, job["raw"]) if isinstance(model, ModelSet) else chain_parts(model, job["raw"])
    for part in parts:
        try:
            outputs[part.key] = part.run(job["samples"][part.key])
        except Exception as err:  # reported as the part's failure reason
            outputs[part.key] = f"raised {type(err).__name__}: {err}"
    with open(folder / "outputs.pkl", "wb") as fh:
        pickle.dump(outputs, fh)


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
