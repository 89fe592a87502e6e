"""Does the compiled plan give what the reference walk gives? The checks of the ``compiled`` part.

``FittedChain.predict`` runs the compiled plan (:mod:`lakescore.compiled`); the step-by-step pandas
walk ``FittedChain.reference_predict`` is the reference. On the probe's holdout rows each check
scores a frame both ways and compares them with :func:`lakescore.admission.compare.compare`: labels,
strings, dtypes, index and order exact, floats within the tolerance rule.

Checks: ``agree:whole`` (the sample as one frame), ``agree:rows`` (each row alone), ``agree:empty``
(no rows) and ``agree:nulls`` (:func:`null_patterns`: each input column missing in every row, every
column missing in one row, and the sample in the nullable dtypes the routes bring). When the
reference refuses a frame (raises), the compiled plan must refuse it with the same exception type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from lakescore.admission.answers import Answers
from lakescore.admission.compare import Difference, difference
from lakescore.admission.perturb import blanked, holds_null, missing_column
from lakescore.admission.result import CheckResult

if TYPE_CHECKING:
    from lakescore.admission.parts import Part


Why = Difference | str | None


def _within(label: str, why: Why) -> Why:
    """``why`` with ``label`` before its reason (the column kept)."""
    if isinstance(why, Difference):
        return Difference(f"{label}: {why.reason}", why.column)
    return f"{label}: {why}" if why else None


def _agreement(part: Part, frame: pd.DataFrame, answer: Callable[[], pd.DataFrame] | None = None) -> Why:
    """Why the compiled run of ``frame`` differs from the reference run, or None. ``answer`` gives
    the compiled run of ``frame`` when the admission already has it (:class:`Answers`)."""
    if part.reference is None:
        return "no_reference"
    run = answer or (lambda: part.run(frame))
    try:
        want = part.reference(frame)
    except Exception as err:  # the reference refuses this frame: the plan must refuse it the same way
        try:
            run()
        except Exception as got:
            return None if type(got) is type(err) else \
                f"reference raised {type(err).__name__} but the compiled plan raised {type(got).__name__}"
        return f"reference raised {type(err).__name__} but the compiled plan did not"
    return difference(run(), want)


def _check(name: str, reason: Callable[[Part, Answers], Why]) -> Callable[..., CheckResult]:
    def run(part: Part, *, answers: Answers | None = None) -> CheckResult:
        try:
            why = reason(part, answers or Answers())
        except Exception as err:  # the compiled plan raised where the reference did not
            why = f"raised {type(err).__name__}: {err}"
        if isinstance(why, Difference):
            return CheckResult(part.label, name, "failed", why.reason, why.column)
        return CheckResult(part.label, name, "failed" if why else "passed", why or "")

    run.__name__ = f"check_{name.replace(':', '_')}"
    run.check_name = name  # type: ignore[attr-defined]
    return run


def _rows(part: Part, answers: Answers) -> Why:
    """Each row alone: the compiled answers are the plan's one-row chunks (``chunks:1`` of the chain
    scores the same frames), run anew row by row when the plan raises on one."""
    try:
        alone = answers.pieces(part, 1)
    except Exception:  # the plan refuses a row: each row on its own, the reference deciding
        alone = None
    for i in range(len(part.sample)):
        answer = (lambda piece=alone[i]: piece) if alone is not None else None
        why = _agreement(part, part.sample.iloc[[i]], answer)
        if why:
            return _within(f"row {i}", why)
    return None


def null_patterns(sample: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """``(label, frame)``: ``sample`` with each column that can hold a missing value missing in every
    row, then with every such column missing in the first row; then ``sample`` in the nullable
    dtypes a Spark batch or a conformed request brings (int64 as Int64, bool as boolean), whole and
    with those columns missing in the first row."""
    yield from _blanks(sample)
    nullable = nullable_dtypes(sample)
    if nullable is not sample:
        yield "nullable dtypes", nullable
        yield from ((f"nullable dtypes, {label}", frame) for label, frame in _blanks(nullable)
                    if label == "row 0 missing")


def nullable_dtypes(sample: pd.DataFrame) -> pd.DataFrame:
    """``sample`` with its int64 columns as Int64 and bool columns as boolean (itself when it has none)."""
    kinds = {c: "Int64" if t.kind in "iu" else "boolean" for c, t in sample.dtypes.items()
             if isinstance(t, np.dtype) and t.kind in "iub"}
    return sample.astype(kinds) if kinds else sample


def _blanks(sample: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    for column in sample.columns:
        values = sample[column]
        if holds_null(values.dtype):
            frame = sample.copy()
            frame[column] = missing_column(values)
            yield f"{column} missing", frame
    if len(sample):
        yield "row 0 missing", blanked(sample, 0)


def _nulls(part: Part, answers: Answers) -> Why:
    for label, frame in null_patterns(part.sample):
        why = _agreement(part, frame)
        if why:
            return _within(label, why)
    return None


AGREEMENT_CHECKS = [
    _check("agree:whole", lambda part, answers: _agreement(part, part.sample, lambda: answers.whole(part))),
    _check("agree:rows", _rows),
    _check("agree:empty", lambda part, answers: _agreement(part, part.sample.iloc[:0])),
    _check("agree:nulls", _nulls),
]
