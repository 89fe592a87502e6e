"""The partition probe: does every part give each row the same answer whatever batch it is in?

Modelled on scikit-learn's estimator checks: each check is a plain function
``check_<property>(part) -> CheckResult``; :func:`checks_for` yields the checks that apply to a part
(keyed on its kind); results are records with status ``passed | failed | skipped`` and a reason.

Checks (on the first 256 holdout rows): ``repeat`` (twice, exact), ``chunks:1``, ``chunks:2``,
``chunks:7``, ``reverse``, ``index_shift``, ``empty``, ``perturb`` (values moved, then values blanked)
and ``fresh_module`` for every rule, step and the model; ``repeat``, ``chunks:1`` and ``chunks:7`` for
the whole chain; the agreement checks of :mod:`lakescore.admission.agreement` for the compiled plan.
Rows are changed by :mod:`lakescore.admission.perturb`; results are :class:`~lakescore.admission.result.CheckResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from lakescore.admission.agreement import AGREEMENT_CHECKS
from lakescore.admission.answers import Answers
from lakescore.admission.compare import Difference, difference
from lakescore.admission.parts import Part
from lakescore.admission.perturb import blanked, perturbed
from lakescore.admission.result import CheckResult

SAMPLE_ROWS = 256


def _result(part: Part, check: str, why: str | Difference | None) -> CheckResult:
    if isinstance(why, Difference):
        return CheckResult(part.label, check, "failed", why.reason, why.column)
    return CheckResult(part.label, check, "failed" if why else "passed", why or "")


Check = Callable[..., CheckResult]  # check(part, *, answers=None): answers shared within one admission


def _guarded(check: Check) -> Check:
    name = check.__name__.removeprefix("check_")

    def run(part: Part, *, answers: Answers | None = None) -> CheckResult:
        try:
            return check(part, answers or Answers())
        except Exception as err:  # a part that raises fails the check, with the error as reason
            return CheckResult(part.label, getattr(check, "check_name", name), "failed",
                               f"raised {type(err).__name__}: {err}")

    run.__name__ = check.__name__
    return run


@_guarded
def check_repeat(part: Part, answers: Answers) -> CheckResult:
    """Scored twice, the answers are identical (no tolerance): the shared answer, then a new run."""
    first = answers.whole(part)
    return _result(part, "repeat", difference(part.run(part.sample), first, exact=True))


def make_check_chunks(size: int) -> Check:
    """Check ``chunks:<size>``: scored in consecutive chunks of ``size`` rows, as a whole."""

    @_guarded
    def check_chunks(part: Part, answers: Answers) -> CheckResult:
        whole = answers.whole(part)
        pieces = answers.pieces(part, size)  # no rows: one empty chunk
        return _result(part, f"chunks:{size}", difference(pd.concat(pieces), whole))

    check_chunks.__name__ = f"check_chunks_{size}"
    check_chunks.check_name = f"chunks:{size}"  # type: ignore[attr-defined]
    return check_chunks


@_guarded
def check_reverse(part: Part, answers: Answers) -> CheckResult:
    """Scored in reverse row order, each row gets the same answer."""
    whole = answers.whole(part)
    backwards = part.run(part.sample.iloc[::-1]).iloc[::-1]
    return _result(part, "reverse", difference(backwards, whole))


@_guarded
def check_index_shift(part: Part, answers: Answers) -> CheckResult:
    """With the index renumbered, each row gets the same answer and keeps its new index."""
    whole = answers.whole(part)
    shifted_index = pd.RangeIndex(10**6, 10**6 + len(part.sample))
    shifted = part.run(part.sample.set_axis(shifted_index))
    if not shifted.index.equals(shifted_index):
        return _result(part, "index_shift", "index_mismatch")
    return _result(part, "index_shift", difference(shifted.set_axis(whole.index), whole))


@_guarded
def check_empty(part: Part, answers: Answers) -> CheckResult:
    """No rows in: no error, no rows out, the same columns and dtypes."""
    whole = answers.whole(part)
    empty = part.run(part.sample.iloc[:0])
    return _result(part, "empty", difference(empty, whole.iloc[:0], check_index=False))


def _blank_reason(part: Part, whole: pd.DataFrame, row: int) -> Difference | None:
    """Why blanking ``row`` fails: other rows (values or dtypes) moved, or the blanked row gets
    another answer alone than among its neighbours (a fill from other rows). A part that refuses
    missing values outright (raises) is loud for every batch alike, so it passes here."""
    sample = blanked(part.sample, row)
    try:
        moved = part.run(sample)
    except Exception:  # refuses missing values for any batch: not batch-dependent
        return None
    others = np.arange(len(sample)) != row
    found = difference(moved[others], whole[others])
    if found:
        return Difference({"output_mismatch": "blank_moved_other_rows", "dtype_mismatch": "blank_changed_dtype"}.get(
            found.reason, f"blank_{found.reason}"), found.column)
    found = difference(part.run(sample.iloc[[row]]), moved.iloc[[row]])
    if found:
        return Difference("blanked_row_reads_neighbours", found.column)
    return None


def _perturb_rows(sample: pd.DataFrame) -> list[int]:
    """Rows to perturb: first, middle, last, and the row with the largest magnitude of each numeric
    column (batch extremes are what max/min/scale statistics react to); at most 8."""
    rows = [0, len(sample) // 2, len(sample) - 1]
    for col in sample.columns:
        values = sample[col]
        if pd.api.types.is_numeric_dtype(values.dtype) and not pd.api.types.is_bool_dtype(values.dtype) \
                and values.notna().any():
            rows.append(int(np.nanargmax(np.abs(values.to_numpy(dtype="float64", na_value=np.nan)))))
    return list(dict.fromkeys(r for r in rows if 0 <= r < len(sample)))[:8]


@_guarded
def check_perturb(part: Part, answers: Answers) -> CheckResult:
    """Changing one row's inputs moves no other row (retried with text unchanged if it raises);
    blanking them (:func:`blanked`) moves no other row's values or dtypes, and the blanked row gets
    the same answer alone as among the others.

    Tried one row at a time on the rows of :func:`_perturb_rows`: every moved row first, then
    every blanked row."""
    whole = answers.whole(part)
    for row in _perturb_rows(part.sample):
        try:
            moved = part.run(perturbed(part.sample, row))
        except Exception:
            moved = part.run(perturbed(part.sample, row, text=False))
        others = np.arange(len(part.sample)) != row
        found = difference(moved[others], whole[others])
        if found:
            reason = "other_rows_moved" if found.reason == "output_mismatch" else found.reason
            return _result(part, "perturb", Difference(reason, found.column))
    for row in _perturb_rows(part.sample):
        reason = _blank_reason(part, whole, row)  # type: ignore[assignment]  # the name is reused for the blank check's reason
        if reason:
            return _result(part, "perturb", reason)
    return _result(part, "perturb", None)


PART_CHECKS = [check_repeat, make_check_chunks(1), make_check_chunks(2), make_check_chunks(7), check_reverse,
               check_index_shift, check_empty, check_perturb]
CHAIN_CHECKS = [check_repeat, make_check_chunks(1), make_check_chunks(7)]


def checks_for(part: Part) -> Iterator[Check]:
    """The in-process checks that apply to ``part`` (``fresh_module`` runs for all parts at once)."""
    yield from {"chain": CHAIN_CHECKS, "compiled": AGREEMENT_CHECKS}.get(part.kind, PART_CHECKS)


def problem_messages(parts: list[Part], results: dict[str, list[CheckResult]]) -> list[str]:
    """One line per failed check, in scoring order.

    A part that scores through the whole chain (``Part.runs_chain``: an output rule, the chain) and
    fails after an earlier part failed is reported as failing because of that part, which is named
    with its own message first: the innocent part gets no fix of its own."""
    first: CheckResult | None = None
    lines = []
    for part in parts:
        failed = [r for r in results[part.key] if r.status == "failed"]
        for r in failed:
            if part.runs_chain and first is not None:
                lines.append(f"{r.part} partition probe failed {r.check} only because {first.part} failed "
                             f"{first.check} first (see above); fixing that fixes this.")
            else:
                lines.append(r.message)
        first = first or (failed[0] if failed else None)
    return lines


def probe_parts(parts: list[Part], *, answers: Answers | None = None) -> dict[str, list[CheckResult]]:
    """Run every in-process check of every part: ``{part.key: [CheckResult, ...]}``.

    ``answers`` (:class:`~lakescore.admission.answers.Answers`, one per admission; a new one by
    default) keeps each part's answer on its sample, so its checks compute it once."""
    answers = answers or Answers()
    return {part.key: [check(part, answers=answers) for check in checks_for(part)] for part in parts}
