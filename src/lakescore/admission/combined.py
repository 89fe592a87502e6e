"""Admission of a model set: every component on its own, then its combined rules and the whole set.

Each component is a whole chain and is admitted as one (:func:`lakescore.admission.evidence.examine`:
identity, lint, every part probed, compiled plan, fresh process). Then each combined rule is linted
and probed on the rows of the sample that the whole set predicts, fed the rule's declared columns
(inputs and component predictions: ``perturb`` moves both of one row), with the probe's part checks
(``repeat``, ``chunks:1/2/7``, ``reverse``, ``index_shift``, ``empty``, ``perturb``,
``fresh_module``); the whole set is checked on the raw sample (``repeat``, ``chunks:1``,
``chunks:7``, ``fresh_module``). The sample is the first 256 rows given (training passes the
holdout rows of the set's training source).

Evidence (version 2, sealed by the set's certificate)::

    {"evidence_version": 2, "sample_rows": n,
     "model_set": {"components": {<name>: <a chain's evidence>, ...},
                   "combined_rules": [{name, version, kind: "combined", source_sha256, lint, checks}],
                   "set": {"checks": [...]}}}
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from lakescore.admission.answers import Answers
from lakescore.admission.evidence import EVIDENCE_VERSION, checks_json, examine, lint_json, lint_ref
from lakescore.admission.fresh import FreshProcess
from lakescore.admission.parts import set_parts
from lakescore.admission.probe import SAMPLE_ROWS, probe_parts, problem_messages
from lakescore.errors import ProbeError
from lakescore.model_set import ModelSet


def admit_set(model_set: ModelSet, holdout: pd.DataFrame) -> dict[str, Any]:
    """Admit every component and the set's combined rules on the first 256 rows of ``holdout``.

    Parameters
    ----------
    model_set : ModelSet
    holdout : DataFrame of shape (n_rows, >= len(model_set.input_columns))
        Raw rows of the set's training source (training passes its holdout rows).

    Returns
    -------
    dict
        The set's evidence (see the module docstring).

    Raises
    ------
    ProbeError
        Listing every failure: each component's (prefixed ``Component '<name>':``), each combined
        rule's lint findings, and each failed check naming the part and the check
        (``Combined rule 'late_flag' partition probe failed chunks:1: ...``).
    """
    sample = holdout.head(SAMPLE_ROWS)
    problems: list[str] = []
    components = {}
    for name, chain in model_set.components:
        evidence, found = examine(chain, sample)
        components[name] = evidence
        problems += [f"Component '{name}': {problem}" for problem in found]
    lint = {}
    for rule in model_set.combined_rules:
        findings = lint_ref(rule.function, f"Combined rule '{rule.name}'")
        lint[rule.name] = lint_json(findings)
        problems += [f.message for f in findings]
    parts = set_parts(model_set, sample)
    answers = Answers()  # each part's answer on its sample, computed once for its checks
    with FreshProcess(model_set, parts) as fresh:  # the fresh process scores while this one probes
        results = probe_parts(parts, answers=answers)
        for key, result in fresh.results(answers=answers).items():
            results[key].append(result)
    problems += problem_messages(parts, results)
    if problems:
        raise ProbeError(problems)
    rules = [{"name": r.name, "version": r.version, "kind": "combined", "source_sha256": r.function.source_sha256,
              "lint": lint[r.name], "checks": checks_json(results[f"combined_rule:{i}"])}
             for i, r in enumerate(model_set.combined_rules)]
    return {"evidence_version": EVIDENCE_VERSION, "sample_rows": len(sample),
            "model_set": {"components": components, "combined_rules": rules,
                          "set": {"checks": checks_json(results["set"])}}}
