"""Admission end to end: identity -> lint -> probe -> evidence (``partition_probe.json``).

Evidence version 2 (exact and tolerant checks); version 1 (exact-only) is not accepted. Its
sections: ``builtins`` (per built-in step: name, kind, recipe, state SHA-256, checks), ``custom``
(per user step: source SHA-256, lint result, checks), ``rules``, ``model``, ``chain``,
``compiled`` (which steps ran a compiled kernel and which their reference apply inside the plan,
and the checks of the plan against the reference walk) and ``sample_rows``. :func:`part_flags`
reduces it to the certificate's per-part flags.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pandas as pd

from lakescore.admission.answers import Answers
from lakescore.admission.fresh import FreshProcess
from lakescore.admission.identity import identity_problems, needs_model_probe
from lakescore.admission.lint import LintFinding, lint_function, lint_source
from lakescore.admission.parts import chain_parts, is_custom
from lakescore.admission.probe import SAMPLE_ROWS, probe_parts, problem_messages
from lakescore.admission.result import CheckResult
from lakescore.chain import FittedChain
from lakescore.errors import ProbeError
from lakescore.frames import encode_state
from lakescore.models import fingerprint
from lakescore.usercode import FunctionRef, UserCodeError

EVIDENCE_VERSION = 2
ROW_CONTEXT = "row"


def lint_ref(ref: FunctionRef, part: str) -> list[LintFinding]:
    """Lint the user function ``ref`` (its saved source when it cannot be imported here)."""
    try:
        return lint_function(ref.load(), part=part)
    except UserCodeError:  # not importable here: lint the source saved with the model
        return lint_source(ref.source, ref.qualname.split(".")[-1], part=part, file=f"{ref.module}.py")


def lint_json(findings: list[LintFinding]) -> dict[str, Any]:
    """A lint result as the evidence records it."""
    return {"status": "failed" if findings else "passed", "findings": [f.message for f in findings]}


def checks_json(results: list[CheckResult]) -> list[dict[str, str]]:
    """Check results as the evidence records them."""
    return [r.to_json() for r in results]


def custom_apply_ref(step: Any) -> FunctionRef | None:
    """The saved ``apply`` function of a user step (state key ``apply``), if any."""
    saved = step.state.get("apply")
    return FunctionRef.from_json(saved) if isinstance(saved, dict) else None


def admit(chain: FittedChain, holdout: pd.DataFrame) -> dict[str, Any]:
    """Run admission on the first 256 raw holdout rows and return the evidence.

    Raises
    ------
    ProbeError
        Listing every failure (see :func:`examine`).
    """
    evidence, problems = examine(chain, holdout)
    if problems:
        raise ProbeError(problems)
    return evidence


def examine(chain: FittedChain, holdout: pd.DataFrame) -> tuple[dict[str, Any], list[str]]:
    """Run identity, lint and every probe check; return the evidence and the list of problems.

    Parameters
    ----------
    chain : FittedChain
    holdout : DataFrame of shape (n_rows, >= len(chain.input_columns))
        Raw holdout rows (before any step).

    Returns
    -------
    (evidence, problems)
        Problems list every failure: identity, lint findings, refused inference contexts and each
        failed check with its fix; empty when the chain is admitted.

    Raises
    ------
    ProbeError
        When fewer than 16 rows reach a step or get a prediction (naming where rows were lost).
    """
    sample = holdout.head(SAMPLE_ROWS)
    problems: list[str] = list(identity_problems(chain.model))
    lint: dict[str, dict[str, Any]] = {}
    for step in chain.steps:
        if is_custom(step):
            context = step.state.get("inference_context", ROW_CONTEXT)
            if context != ROW_CONTEXT:
                problems.append(f"Custom step '{step.name}' is declared inference_context={context!r}; only "
                                "row-local steps can be scored in pieces. Make it row-local or score single-node.")
            ref = custom_apply_ref(step)
            findings = lint_ref(ref, f"Custom step '{step.name}'") if ref else []
            lint[step.name] = lint_json(findings)
            problems += [f.message for f in findings]
    for rule in (*chain.rules, *chain.output_rules):
        findings = lint_ref(rule.function, f"Scoring rule '{rule.name}'")  # type: ignore[attr-defined]  # eligibility and output rules both have function and name
        lint[f"rule:{rule.name}"] = lint_json(findings)  # type: ignore[attr-defined]  # as above
        problems += [f.message for f in findings]
    for step in chain.pre_split:
        if is_custom(step) and chain.pre_split_role(step) != "skip":
            ref = custom_apply_ref(step)
            findings = lint_ref(ref, f"Custom step '{step.name}'") if ref else []
            lint[step.name] = lint_json(findings)
            problems += [f.message for f in findings]
    parts = chain_parts(chain, sample)
    answers = Answers()  # each part's answer on its sample, computed once for its checks
    with FreshProcess(chain, parts) as fresh:  # the fresh process scores while this one probes
        results = probe_parts(parts, answers=answers)
        for key, result in fresh.results(answers=answers).items():
            results[key].append(result)
    problems += problem_messages(parts, results)
    return _evidence(chain, parts, results, lint, len(sample)), problems


def _evidence(chain: FittedChain, parts: list[Any], results: dict[str, list[CheckResult]],
              lint: dict[str, dict[str, Any]], sample_rows: int) -> dict[str, Any]:
    by_key = {p.key: p for p in parts}
    builtins, custom = [], []
    keyed = [(f"pre_split:{i}", s) for i, s in enumerate(chain.pre_split)]
    keyed += [(f"step:{i}", s) for i, s in enumerate(chain.steps)]
    for key, step in keyed:
        if key not in by_key:
            continue
        entry = {"name": step.name, "kind": step.kind, "rows": len(by_key[key].sample),
                 "state_sha256": hashlib.sha256(encode_state(step.state).encode()).hexdigest(),
                 "checks": checks_json(results[key])}
        if is_custom(step):
            ref = custom_apply_ref(step)
            custom.append({**entry, "source_sha256": ref.source_sha256 if ref else None, "lint": lint[step.name]})
        else:
            builtins.append({**entry, "recipe": {k: v for k, v in step.state.items() if k == "columns"}})
    rules = [{"name": r.name, "version": r.version, "kind": "eligibility",
              "source_sha256": r.function.source_sha256,
              "lint": lint[f"rule:{r.name}"], "checks": checks_json(results[f"rule:{i}"])}
             for i, r in enumerate(chain.rules)]
    rules += [{"name": r.name, "version": r.version, "kind": "output", "source_sha256": r.function.source_sha256,
               "lint": lint[f"rule:{r.name}"], "checks": checks_json(results[f"output_rule:{i}"])}
              for i, r in enumerate(chain.output_rules)]
    return {
        "evidence_version": EVIDENCE_VERSION, "sample_rows": sample_rows,
        "builtins": builtins, "custom": custom, "rules": rules,
        "model": {"class": type(chain.model).__name__, "fingerprint": fingerprint(chain.model),
                  "needs_probe": needs_model_probe(chain.model), "decision_rule": chain.decision_rule,
                  "checks": checks_json(results["model"])},
        "chain": {"checks": checks_json(results["chain"])},
        "compiled": {"kernels": chain.plan.kernels, "checks": checks_json(results["compiled"])},
    }


def _all_passed(entries: list[dict[str, Any]]) -> bool:
    return all(c["status"] == "passed" for e in entries for c in e["checks"])


def part_flags(evidence: dict[str, Any]) -> dict[str, bool]:
    """The certificate's per-part flags: every check of that part passed. For a model set
    (:func:`lakescore.admission.combined.admit_set`) each flag holds for every component, and
    ``combined_probed`` says every combined rule and the whole set passed."""
    if "model_set" in evidence:
        found = [part_flags(e) for e in evidence["model_set"]["components"].values()]
        flags = {key: all(f.get(key, False) for f in found) for key in found[0]} if found else {}
        combined = evidence["model_set"]
        return {**flags, "combined_probed": _all_passed(combined["combined_rules"]) and _all_passed([combined["set"]])}
    return {
        "apply_probed_builtin": _all_passed(evidence["builtins"]),
        "apply_probed": _all_passed(evidence["custom"]),
        "rules_probed": _all_passed(evidence["rules"]),
        "model_probed": _all_passed([evidence["model"]]),
        "chain_probed": _all_passed([evidence["chain"]]),
        "compiled_probed": "compiled" in evidence and _all_passed([evidence["compiled"]]),
    }
