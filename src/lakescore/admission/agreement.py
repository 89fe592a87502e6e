"""Does the compiled plan give what the reference walk gives? The checks of the ``compiled`` part.

``FittedChain.predict`` runs the compiled plan (:mod:`lakescore.compiled`); the step-by-step pandas
walk ``FittedChain.reference_predict`` is the reference. On the probe's holdout rows each check
scores a frame both ways and compares them with :func:`lakescore.admission.compare.compare`: labels,
strings, dtypes, index and order exact, floats within the tolerance rule.

Checks: ``agree:whole`` (the sample as one frame), ``agree:rows`` (each row alone, against the
reference on the whole sample), ``agree:empty`` (no rows) and ``agree:nulls`` (each input column
missing in every row, then every column missing in one row: each dtype's own missing value). When
the reference refuses a frame (raises), the compiled plan must refuse it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import pandas as pd

from lakescore.admission.compare import compare
from lakescore.admission.perturb import blanked, holds_null
from lakescore.admission.result import CheckResult

if TYPE_CHECKING:
    from lakescore.admission.parts import Part


def _agreement(part: Part, frame: pd.DataFrame) -> str | None:
    """Why the compiled run of ``frame`` differs from the reference run, or None."""
    if part.reference is None:
        return "no_reference"
    try:
        want = part.reference(frame)
    except Exception as err:  # the reference refuses this frame: the plan must refuse it too
        try:
            part.run(frame)
        except Exception:
            return None
        return f"reference raised {type(err).__name__} but the compiled plan did not"
    return compare(part.run(frame), want)


def _check(name: str, reason: Callable[[Part], str | None]) -> Callable[[Part], CheckResult]:
    def run(part: Part) -> CheckResult:
        try:
            why = reason(part)
        except Exception as err:  # the compiled plan raised where the reference did not
            why = f"raised {type(err).__name__}: {err}"
        return CheckResult(part.label, name, "failed" if why else "passed", why or "")

    run.__name__ = f"check_{name.replace(':', '_')}"
    run.check_name = name  # type: ignore[attr-defined]
    return run


def _rows(part: Part) -> str | None:
    want = part.reference(part.sample) if part.reference else None
    for i in range(len(part.sample)):
        row = part.sample.iloc[[i]]
        why = compare(part.run(row), want.iloc[[i]]) if want is not None else "no_reference"
        if why:
            return f"row {i}: {why}"
    return None


def null_patterns(sample: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """``(label, frame)``: ``sample`` with each column that can hold a missing value missing in every
    row, then with every such column missing in the first row."""
    for column in sample.columns:
        values = sample[column]
        if holds_null(values.dtype):
            frame = sample.copy()  # each dtype's own missing value: None (object), else NaN, NaT, pd.NA
            frame[column] = pd.Series([None] * len(values), index=values.index, dtype=object) \
                if values.dtype == object else values.mask(np.ones(len(values), dtype=bool))
            yield f"{column} missing", frame
    if len(sample):
        yield "row 0 missing", blanked(sample, 0)


def _nulls(part: Part) -> str | None:
    for label, frame in null_patterns(part.sample):
        why = _agreement(part, frame)
        if why:
            return f"{label}: {why}"
    return None


AGREEMENT_CHECKS = [
    _check("agree:whole", lambda part: _agreement(part, part.sample)),
    _check("agree:rows", _rows),
    _check("agree:empty", lambda part: _agreement(part, part.sample.iloc[:0])),
    _check("agree:nulls", _nulls),
]
