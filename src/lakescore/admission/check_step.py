"""``check_step``: every probe check on one step, as scikit-learn's ``check_estimator`` runs its
checks on one estimator.

A step is learned on a frame (or given already fitted), then checked on sample rows with the checks
the admission probe runs on every step of a chain (:mod:`lakescore.admission.probe`: ``repeat``,
``chunks:1``, ``chunks:2``, ``chunks:7``, ``reverse``, ``index_shift``, ``empty``, ``perturb``), plus

- ``json_round_trip``: the state survives :func:`lakescore.frames.encode_state` /
  :func:`~lakescore.frames.decode_state` unchanged, and the reloaded step gives identical output;
- ``dtypes``: the same columns, in the same order, with the same dtypes for a batch of one row, an
  empty batch, an all-null batch and a batch of text values training never saw (a step may refuse
  the last two with a lakescore error: that refusal is the same for every batch);
- ``agree:whole``, ``agree:rows``, ``agree:empty``, ``agree:nulls``
  (:mod:`lakescore.admission.agreement`): the step's compiled kernel gives what its reference
  ``flags``/``apply`` give; skipped for a kind without a kernel and for training-only steps.

Outputs are compared by :func:`lakescore.admission.compare.difference`, as the probe compares them.
``fresh_module`` (a second process) is left to admission.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from lakescore.admission.agreement import AGREEMENT_CHECKS
from lakescore.admission.answers import Answers
from lakescore.admission.compare import difference
from lakescore.admission.parts import Part, is_custom, step_label, step_run
from lakescore.admission.perturb import all_missing, unseen_text
from lakescore.admission.probe import PART_CHECKS, SAMPLE_ROWS
from lakescore.admission.result import CheckResult
from lakescore.columns import Columns
from lakescore.compiled import stage_of
from lakescore.errors import LakescoreError, StepCheckError, StepError
from lakescore.frames import decode_state, encode_state
from lakescore.steps import FittedStep, learn_step

KERNEL_CHECKS = [check.check_name for check in AGREEMENT_CHECKS]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class StepChecks:
    """What :func:`check_step` found: the step it checked and one result per check, in order."""

    step: FittedStep
    results: tuple[CheckResult, ...]

    def __getitem__(self, check: str) -> CheckResult:
        """The result of the check named ``check`` (``"chunks:7"``, ``"json_round_trip"``, ...)."""
        for result in self.results:
            if result.check == check:
                return result
        raise KeyError(f"no check named {check!r}; checks: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        return [r.check for r in self.results]

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "failed"]


def check_step(kind: str | FittedStep, params: dict[str, Any] | None, frame: pd.DataFrame,
               y: pd.Series | None = None, *, sample: pd.DataFrame | None = None,
               raises: bool = True) -> StepChecks:
    """Learn a step and run every probe check and the JSON round trip on it.

    Parameters
    ----------
    kind : str or FittedStep
        A step's config name (``"StandardScaler"``, ``"custom"`` for a user step), or a step already
        fitted (``learn_step(...)``, or a user ``fitted_step`` learned by a chain), checked as it is.
    params : dict or None
        The recipe entry without ``step`` (``{"columns": [...], "strategy": "median"}``; ``name``
        defaults to the kind); None for a fitted step.
    frame : DataFrame of shape (n_rows, n_columns)
        Training rows the step learns on (for a fitted step: the rows it is checked on).
    y : Series of shape (n_rows,), optional
        The label, for steps that learn from it (TargetEncoder).
    sample : DataFrame, optional
        The rows to check on (default: the first 256 rows of ``frame``): an adversarial frame of
        nulls, extremes and unseen categories goes here.
    raises : bool, default True
        Raise on the first failed check; False returns every result instead.

    Returns
    -------
    StepChecks
        The fitted step and a :class:`~lakescore.admission.result.CheckResult` per check
        (``passed | failed | skipped`` with its reason and, where one is to blame, the column).

    Raises
    ------
    StepCheckError
        When a check fails (and ``raises``): each failed check's message names the step, the check,
        the column and one fix.
    StepError
        When the step cannot be learned (bad params, a missing column).
    """
    step = _fitted(kind, params, frame, y)
    rows = frame if sample is None else sample
    part = step_part(step, rows.iloc[:SAMPLE_ROWS])
    answers = Answers()  # the part's answer on its sample, computed once for its checks
    results = [check(part, answers=answers) for check in PART_CHECKS]
    results += [check_json_round_trip(step, part), check_dtypes(part)]
    results += kernel_results(step, part.sample)
    checks = StepChecks(step, tuple(results))
    if raises and checks.failed:
        first = checks.failed[0]
        raise StepCheckError(step.name, [r.located_message for r in checks.failed], check=first.check,
                             column=first.column)
    return checks


def _fitted(kind: str | FittedStep, params: dict[str, Any] | None, frame: pd.DataFrame,
            y: pd.Series | None) -> FittedStep:
    if isinstance(kind, FittedStep):
        if params is not None:
            raise StepError(f"check_step was given the fitted step '{kind.name}' and params {params!r}; "
                            "pass params=None for a fitted step, or the kind's name to learn it", step=kind.name)
        return kind
    raw = {"name": kind, **(params or {})}
    if raw.setdefault("step", kind) != kind:
        raise StepError(f"check_step: params say step {raw['step']!r} but kind is {kind!r}; drop 'step' "
                        "from params", step=str(raw["name"]))
    return learn_step(raw, frame, y)


def step_part(step: FittedStep, sample: pd.DataFrame) -> Part:
    """``step`` as the probe sees it, on ``sample``. A training-only step that reads other rows
    (Deduplicate) never runs at scoring: only its ``apply`` is checked, not its flags."""
    run = step_run(step) if _scored_flags(step) else step.apply
    return Part("custom" if is_custom(step) else "builtin", f"step:{step.name}", step_label(step), run, sample)


def _scored_flags(step: FittedStep) -> bool:
    return not step.training_only or step.impl.row_filter


def _failed(part: Part, check: str, reason: str, column: str = "") -> CheckResult:
    return CheckResult(part.label, check, "failed", reason, column)


def check_json_round_trip(step: FittedStep, part: Part) -> CheckResult:
    """The state encodes to JSON, decodes to an equal state (integer keys, dtypes, NaN kept), and
    the step reloaded from :meth:`FittedStep.to_json` gives identical output (no tolerance)."""
    try:
        text = encode_state(step.state)
    except TypeError as err:
        return _failed(part, "json_round_trip", f"state is not JSON-able ({err})")
    decoded = decode_state(text)
    if encode_state(decoded) != text or not same_state(decoded, step.state):
        return _failed(part, "json_round_trip", "state changed in a JSON round trip")
    reloaded = replace(part, run=step_part(FittedStep.from_json(step.to_json()), part.sample).run)
    try:
        found = difference(reloaded.run(part.sample), part.run(part.sample), exact=True)
    except Exception as err:  # the reloaded step fails where the learned one did not
        return _failed(part, "json_round_trip", f"reloaded step raised {type(err).__name__}: {err}")
    if found:
        return _failed(part, "json_round_trip", f"reloaded step: {found.reason}", found.column)
    return CheckResult(part.label, "json_round_trip", "passed")


def check_dtypes(part: Part) -> CheckResult:
    """The sample's output columns and dtypes, for a batch of one row, an empty batch, an all-null
    batch and a batch of unseen text. The last two may be refused with a lakescore error."""
    try:
        want = part.run(part.sample).iloc[:0]
    except Exception as err:
        return _failed(part, "dtypes", f"raised {type(err).__name__}: {err}")
    batches: list[tuple[str, pd.DataFrame, bool]] = [
        ("one row", part.sample.iloc[:1], False), ("empty", part.sample.iloc[:0], False),
        ("all null", all_missing(part.sample), True), ("unseen values", unseen_text(part.sample), True)]
    for label, batch, may_refuse in batches:
        try:
            got = part.run(batch).iloc[:0]
        except LakescoreError:
            if may_refuse:
                continue
            raise
        except Exception as err:
            return _failed(part, "dtypes", f"{label} batch raised {type(err).__name__}: {err}")
        found = difference(got, want, check_index=False)
        if found:
            shown = f" ({got[found.column].dtype}, not {want[found.column].dtype})" if found.column else ""
            return _failed(part, "dtypes", f"{label} batch: {found.reason}{shown}", found.column)
    return CheckResult(part.label, "dtypes", "passed")


def kernel_results(step: FittedStep, sample: pd.DataFrame) -> list[CheckResult]:
    """The agreement checks of the step's compiled kernel against its reference flags/apply, or
    one skipped result per check saying why there is nothing to compare."""
    label = step_label(step)
    if step.training_only and not step.impl.row_filter:
        why = "a training-only step that reads other rows never runs at scoring"
    elif step.kernel() is None:
        why = f"{step.kind} has no compiled kernel: the compiled chain runs its reference apply"
    else:
        part = Part("compiled", f"kernel:{step.name}", label, kernel_run(step), sample,
                    reference=reference_run(step))
        return [check(part) for check in AGREEMENT_CHECKS]
    return [CheckResult(label, name, "skipped", why) for name in KERNEL_CHECKS]


def _prefix(step: FittedStep) -> str | None:
    """The reason prefix of the rows the step excludes at scoring (None: it excludes none)."""
    return step.impl.exclusion or ("ineligible" if step.training_only else None)


def kernel_run(step: FittedStep) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The step's stage of the compiled plan as ``frame -> frame``: its flags drop rows, its kernel
    edits the rest; columns sorted by name."""
    stage = stage_of(step, _prefix(step))

    def run(frame: pd.DataFrame) -> pd.DataFrame:
        batch = Columns.from_frame(frame, frame.columns)
        if stage.prefix and stage.kernel.flags:
            batch.keep(~np.asarray(stage.kernel.flags(batch), dtype=bool))
        if not step.training_only:
            stage.kernel.apply(batch)
        return batch.frame(sorted(batch.arrays))

    return run


def reference_run(step: FittedStep) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """What :func:`kernel_run` must give, by the step's reference ``flags`` then ``apply``."""

    def run(frame: pd.DataFrame) -> pd.DataFrame:
        flagged = step.flags(frame) if _prefix(step) else np.zeros(len(frame), dtype=bool)
        kept = frame[~flagged]
        out = kept if step.training_only else step.apply(kept)
        return out[sorted(out.columns)]

    return run


def same_state(a: Any, b: Any) -> bool:
    """True when two states are equal value for value and type for type (arrays with their dtype,
    NaN equal to NaN, a tuple not equal to the list JSON makes of it, integer keys not equal to their text)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return type(a) is type(b) and a == b
