"""What the local tools print: ``src/tools/preview.py`` (:func:`preview`) and ``src/tools/smoke.py``
(:func:`smoke_probe`).

- :func:`preview_train`: lint the selected recipe's user steps and the scoring rules, and list
  what the probe would check (no data is read);
- :func:`preview_score`: the admission decision for the registered version inference.yml selects;
- :func:`smoke_probe`: fit the recipe on a small sample (CSV or Parquet, 16+ rows, the training
  table's columns plus the target) with the recipe's feature lookups joined as training joins them
  (:func:`sample_with_lookups`), use it as training rows and holdout, and run lint and probe, one
  line per check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from lakescore.admission.agreement import AGREEMENT_CHECKS
from lakescore.admission.certificate import require_admitted
from lakescore.admission.evidence import examine
from lakescore.admission.lint import lint_function
from lakescore.admission.probe import CHAIN_CHECKS, PART_CHECKS
from lakescore.config import ProjectConfig
from lakescore.custom import resolve_user_step
from lakescore.errors import ConfigError, FeatureLookupError, LakescoreError, ProbeError, TableNotFoundError
from lakescore.lookup import FeatureLookup
from lakescore.packaging import read_certificate, resolve_version
from lakescore.rules import load_output_rules, load_rules
from lakescore.runtime import Runtime
from lakescore.training import fit_project_chain, prepare_rows, recipe_problems, with_threshold

MIN_SAMPLE_ROWS = 16


def _check_names(checks: list[Any]) -> str:
    names = [getattr(c, "check_name", c.__name__.removeprefix("check_")) for c in checks]
    return ", ".join(names)


def preview(project: ProjectConfig, runtime: Runtime, *, action: Literal["train", "score"] = "train") -> list[str]:
    """``src/tools/preview.py --action``: :func:`preview_train` (reads nothing) or :func:`preview_score`."""
    return preview_train(project) if action == "train" else preview_score(project, runtime)


def _single_model(project: ProjectConfig) -> None:
    """Refuse a model set: the preview and the smoke probe describe and fit one model."""
    if project.training.model_set is not None:
        from lakescore.errors import ConfigError

        raise ConfigError([f"{project.shown('training')}: declares model_set; the preview and the smoke probe "
                           "handle a single model for now. Run `lakescore train` (it admits every component)"])


def preview_train(project: ProjectConfig) -> list[str]:
    """Lines describing the lint result of every user function and the checks the probe would run."""
    _single_model(project)
    part_checks = _check_names(PART_CHECKS) + ", fresh_module"
    lines = [f"Recipe ({len(project.training.preprocessing)} steps), model {project.training.model.class_name}:"]  # type: ignore[union-attr]  # _single_model() refused a model set: model is set
    for raw in project.training.preprocessing:
        name, kind = raw.get("name"), raw.get("step")
        if str(kind).lower() == "custom":
            declared = resolve_user_step(str(raw.get("ref")), step=str(name))
            findings = lint_function(declared.callables["apply"], part=f"Custom step '{name}'")
            verdict = "lint passed" if not findings else "lint FAILED: " + "; ".join(f.message for f in findings)
            lines.append(f"  custom step {name} ({declared.flavour}, inference_context={declared.inference_context}): "
                         f"{verdict}")
        else:
            lines.append(f"  built-in step {name} ({kind})")
        lines.append(f"    would probe: {part_checks}")
    rules = [("eligibility", r) for r in load_rules(project.scoring)]
    rules += [("output", r) for r in load_output_rules(project.scoring)]  # type: ignore[misc]  # eligibility and output rules, listed together
    lines.append(f"Project scoring rules: {'disabled' if not rules else len(rules)}")
    for kind, rule in rules:
        findings = lint_function(rule.function.load(), part=f"Scoring rule '{rule.name}'")
        verdict = "lint passed" if not findings else "lint FAILED: " + "; ".join(f.message for f in findings)
        lines.append(f"  {kind} rule {rule.name} v{rule.version}: {verdict}")
        lines.append(f"    would probe: {part_checks}")
    lines.append(f"  model {project.training.model.class_name}: would probe: {part_checks}")  # type: ignore[union-attr]  # _single_model() refused a model set: model is set
    lines.append(f"  compiled plan: would compare with the step-by-step walk: {_check_names(AGREEMENT_CHECKS)}")
    lines.append(f"  whole chain: would probe: {_check_names(CHAIN_CHECKS)}")
    return lines


def preview_score(project: ProjectConfig, runtime: Runtime) -> list[str]:
    """Lines with the admission decision for the registered version inference.yml selects."""
    mlflow = runtime.mlflow()
    inf = project.inference
    name = project.training.registry.model_name
    version = resolve_version(name, selection=inf.score_model_selection, version=inf.model_version,
                              alias=project.training.registry.alias)
    uri = f"models:/{name}/{version}"
    lines = [f"Model {name} v{version} ({inf.score_model_selection})"]
    try:
        certificate = read_certificate(uri)
        require_admitted(certificate)
        parts = ", ".join(f"{k}={v}" for k, v in certificate.evidence["parts"].items())
        lines.append(f"Admission: admitted for batch_compute={inf.batch_compute} ({parts})")
    except LakescoreError as err:
        lines.append(f"Admission: refused ({err.code}: {err})")
    from lakescore.model_uri import pyfunc_uri  # a Feature Engineering model: its raw model

    chain = json.loads(Path(mlflow.artifacts.download_artifacts(f"{pyfunc_uri(uri)}/artifacts/chain/chain.json"))
                       .read_text())
    rules = chain.get("rules", [])
    lines.append("Project scoring rules: disabled" if not rules else
                 "Project scoring rules: " + ", ".join(f"{r['name']} v{r['version']}" for r in rules))
    return lines


def read_sample(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet sample of at least 16 rows.

    Raises
    ------
    LakescoreError
        For another file type or fewer than 16 rows.
    """
    path = Path(path)
    if path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise LakescoreError(f"sample {path} must be .csv or .parquet; got {path.suffix or 'no suffix'}")
    if not path.is_file():
        raise LakescoreError(f"sample {path} does not exist; give the path of a CSV or Parquet file")
    try:
        frame = pd.read_csv(path) if path.suffix.lower() == ".csv" else pd.read_parquet(path)
    except (ValueError, OSError) as err:  # empty or unreadable file (pandas EmptyDataError is a ValueError)
        raise LakescoreError(f"sample {path} cannot be read ({err}); give a CSV or Parquet file with a "
                             "header row and at least 16 rows") from err
    if len(frame) < MIN_SAMPLE_ROWS:
        raise LakescoreError(f"sample {path} has {len(frame)} rows; the probe needs at least {MIN_SAMPLE_ROWS}")
    return frame


def sample_with_lookups(project: ProjectConfig, runtime: Runtime | None, sample: pd.DataFrame, *,
                        source: str) -> tuple[pd.DataFrame, list[str]]:
    """``sample`` with the recipe's feature lookups (training.yml ``feature_lookups``) joined, as
    training joins them (:func:`lakescore.workflows.lookups.read_feature_tables`, each table at its
    current version, then :meth:`~lakescore.workflows.lookups.FeatureTables.join`).

    A lookup whose output columns the sample already carries (all of them: it was exported joined)
    is not joined again.

    Parameters
    ----------
    project : ProjectConfig
    runtime : Runtime or None
        Where the feature tables live (the local runtime of ``--home``); None: join nothing.
    sample : DataFrame of shape (n_rows, n_columns)
    source : str
        How messages name the sample (its path).

    Returns
    -------
    (frame, lines)
        The sample with the lookups' columns, same rows and order, and one line per lookup saying
        what it did (empty without lookups).

    Raises
    ------
    FeatureLookupError
        The sample lacks a lookup's key or timestamp column, or carries some but not all of its
        output columns (from :func:`lakescore.lookup.check_columns`).
        Also a lookup to join and no feature table to join it from (no runtime, or the table is
        not there): names the table, the columns the sample would have to carry instead, and the fix.
    """
    specs = [lookup.spec() for lookup in project.training.feature_lookups]
    carried = [spec for spec in specs if set(spec.output_columns) <= set(sample.columns)]
    lines = [f"Feature lookup {spec.table_name}: the sample carries {', '.join(spec.output_columns)}; not joined"
             for spec in carried]
    joining = [spec for spec in specs if spec not in carried]
    if not joining:
        return sample, lines
    from lakescore.workflows.lookups import read_feature_tables  # reads Delta: only when a lookup is joined

    if runtime is None:
        raise _lookup_missing(project, joining, source=source, why="no local runtime was given to read them from")
    try:
        features = read_feature_tables(runtime, joining)
    except TableNotFoundError as err:
        where = getattr(runtime, "home", "the runtime")
        raise _lookup_missing(project, joining, source=source, home=str(where),
                              why=f"{err.fields.get('table')} is not in the local runtime {where}") from err
    lines += [f"Feature lookup {spec.table_name}@v{features.versions[spec.table_name]}: joined "
              f"{', '.join(spec.output_columns)} by {', '.join(spec.row_columns)}" for spec in joining]
    return features.join(sample, joining), lines


def _lookup_missing(project: ProjectConfig, specs: list[FeatureLookup], *, source: str, why: str,
                    home: str = "HOME") -> FeatureLookupError:
    """The refusal of a sample whose lookups cannot be joined: why, and the columns it must carry instead."""
    wanted = "; ".join(f"{', '.join(spec.output_columns)} (from {spec.table_name} by {', '.join(spec.row_columns)})"
                       for spec in specs)
    return FeatureLookupError(f"sample {source}: {project.shown('training')} feature_lookups join columns the recipe "
                              f"reads, and {why}. Load the feature tables (python scripts/load_demo_data.py --home "
                              f"{home}), or give a sample that already carries {wanted}",
                              table=specs[0].table_name, columns=[c for spec in specs for c in spec.output_columns])


def smoke_probe(project: ProjectConfig, sample_path: str | Path, *,
                runtime: Runtime | None = None) -> tuple[list[str], bool]:
    """Join the recipe's feature lookups onto the sample (:func:`sample_with_lookups`), fit on it,
    use it as both training rows and holdout (the decision threshold too), run lint and probe.

    Parameters
    ----------
    project : ProjectConfig
    sample_path : str or Path
        A CSV or Parquet file of at least 16 rows.
    runtime : Runtime, optional
        The local runtime whose feature tables the lookups read (``src/tools/smoke.py --home``);
        without it the sample must carry the lookups' columns itself.

    Returns
    -------
    (lines, admitted)

    Raises
    ------
    ConfigError
        When the recipe names a column that neither the sample, ``feature_columns`` nor an earlier
        step's outputs give (:func:`lakescore.training.recipe_problems`, as training's preflight),
        or the joined sample lacks a column the model or a rule reads.
    LakescoreError
        For a bad sample, lookups that cannot be joined, or a recipe and model that cannot be fitted on it.
    """
    _single_model(project)
    sample = read_sample(sample_path)
    sample, lookup_lines = sample_with_lookups(project, runtime, sample, source=str(sample_path))
    problems = recipe_problems(project, set(sample.columns), source=str(sample_path))
    cfg = project.training
    read = [*cfg.data.feature_columns, *(c for r in (*project.scoring.eligibility, *project.scoring.output)
                                         for c in r.columns)]  # type: ignore[attr-defined]  # eligibility and output rule configs both have columns
    missing = [c for c in dict.fromkeys(read) if c not in sample.columns]
    if missing:
        problems.append(f"sample {sample_path} lacks column(s) {missing} that {project.shown('training')} "
                        "data.feature_columns or a scoring rule reads; export them with the sample "
                        f"(available: {', '.join(map(str, sample.columns))})")
    if problems:  # the same recipe check as training's preflight, so both accept the same recipes
        raise ConfigError(problems)
    try:
        frame, y, pre = prepare_rows(project, sample)
        chain = fit_project_chain(project, frame, y, pre)
        chain = with_threshold(chain, project.training.model.threshold, frame, y, shown=project.shown("training"))  # type: ignore[union-attr]  # _single_model() refused a model set: model is set
    except ValueError as err:  # e.g. scikit-learn refusing a one-class sample
        raise LakescoreError(f"cannot fit the recipe and model on {sample_path}: {err}. Give a sample with "
                             "every class of the target and the recipe's columns.") from err
    try:
        evidence, problems = examine(chain, frame)
    except ProbeError as err:
        return [*lookup_lines, str(err)], False
    lines = [*lookup_lines, f"Probe on {evidence['sample_rows']} rows of {sample_path}:"]
    sections = [(f"step {e['name']} ({e['kind']})", e) for e in evidence["builtins"]]
    sections += [(f"custom step {e['name']}", e) for e in evidence["custom"]]
    sections += [(f"rule {e['name']}", e) for e in evidence["rules"]]
    sections += [(f"model {evidence['model']['class']}", evidence["model"]), ("chain", evidence["chain"])]
    for label, entry in sections:
        lines.append(f"  {label}")
        for check in entry["checks"]:
            lines.append(f"    {check['check']:<13} {check['status']}" + (f"  {check['reason']}" if check["reason"] else ""))
    lines += [f"  problem: {p}" for p in problems]
    lines.append("Admitted." if not problems else f"Refused: {len(problems)} problem(s).")
    return lines, not problems
