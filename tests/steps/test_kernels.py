"""Each built-in step's compiled kernel gives what its reference apply/flags give.

For every recipe entry of the step contract (tests/fixtures/step_contract.py), learned on real flights:
the step's stage in the compiled plan (its kernel, or the reference run inside the plan when its kind
has none) against ``FittedStep.flags`` then ``FittedStep.apply`` on the kept rows: whole frame, each
sample row alone, the empty frame and every null pattern (each column missing in every row, every
column missing in one row). Flags equal, then values and dtypes (floats within the tolerance rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import CASES, COLUMNS, assert_same, available, cases, learning_frame, sample_rows

from lakescore.admission.agreement import null_patterns
from lakescore.columns import Columns
from lakescore.compiled import stage_of
from lakescore.steps import STEPS, FittedStep, learn_step

SCORED = [k for k in CASES if not (STEPS[k].training_only and not STEPS[k].row_filter)]
# every built-in kind that runs at scoring has a compiled kernel; user steps run as written
COMPILED = set(SCORED) - {"custom"}


def prefix_of(step: FittedStep) -> str | None:
    """The reason prefix the chain gives the step (a row filter re-used as eligibility: ineligible)."""
    return step.impl.exclusion or ("ineligible" if step.training_only else None)


def compiled(step: FittedStep, frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    stage = stage_of(step, prefix_of(step))
    batch = Columns.from_frame(frame, frame.columns)
    flagged = stage.kernel.flags(batch) if stage.prefix and stage.kernel.flags else np.zeros(len(frame), bool)
    batch.keep(~flagged)
    if not step.training_only:
        stage.kernel.apply(batch)
    return flagged, batch.frame(sorted(batch.arrays))


def reference(step: FittedStep, frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    flagged = step.flags(frame) if prefix_of(step) else np.zeros(len(frame), bool)
    kept = frame[~flagged]
    out = kept if step.training_only else step.apply(kept)
    return flagged, out[sorted(out.columns)]


def assert_agrees(step: FittedStep, frame: pd.DataFrame, what: str) -> None:
    try:
        want_flags, want = reference(step, frame)
    except Exception as err:  # the reference refuses this frame: the kernel must refuse it too
        with pytest.raises(type(err)):
            compiled(step, frame)
        return
    got_flags, got = compiled(step, frame)
    assert (got_flags == want_flags).all(), f"{what}: flags differ"
    assert_same(got, want, what)


@pytest.mark.parametrize("raw", cases(*SCORED))
def test_the_compiled_stage_equals_the_reference(raw: dict[str, Any], flights_sample: pd.DataFrame):
    train, label = learning_frame(flights_sample)
    step = learn_step(raw, train, label)
    whole = flights_sample[COLUMNS]
    assert_agrees(step, whole, f"{raw['name']} whole")
    for i in sample_rows(whole)[:25]:
        assert_agrees(step, whole.iloc[[i]], f"{raw['name']} row {i} alone")
    assert_agrees(step, whole.iloc[:0], f"{raw['name']} empty")
    for label_, frame in null_patterns(whole.iloc[:60]):
        assert_agrees(step, frame, f"{raw['name']} {label_}")


def test_the_kinds_with_a_compiled_kernel(flights_sample: pd.DataFrame):
    train, label = learning_frame(flights_sample)
    here = [k for k in SCORED if available(k)]  # a kind whose optional package is absent cannot learn
    steps = [learn_step({"step": k, **CASES[k][0]}, train, label) for k in here]
    assert {s.kind for s in steps if stage_of(s, prefix_of(s)).compiled} == COMPILED & set(here)
