"""The compiled chain: a fitted chain's rules, steps and model matrix as one plan over arrays.

:class:`CompiledPlan` is built once per loaded chain and runs every ``FittedChain.predict``, for
every frame size and every route. A batch is held as :class:`lakescore.columns.Columns` (one array
per column); each step runs as its kernel (:meth:`lakescore.steps.base.StepKind.kernel`): category
lookups, vectorised arithmetic on the fitted state, exclusions as masks. Rows a rule or step excludes
are dropped from the arrays once, so later steps never see them.

A step with no kernel (and every user step) runs its reference ``flags``/``apply`` on a pandas
frame built only from its own input columns, inside the plan; :attr:`CompiledPlan.kernels` says
which ran how, and admission records it. Eligibility rules are user functions: each gets a pandas
frame of its declared columns, as written.

The step-by-step pandas walk (``FittedChain.reference_predict``) stays as the reference the
admission probe compares this plan against (``compiled_probed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lakescore import model_input as containers
from lakescore.columns import Columns, Kernel
from lakescore.errors import InputError
from lakescore.steps import FittedStep

COMPILED = "compiled"
REFERENCE = "reference"


@dataclass(frozen=True)
class Stage:
    """One scoring step in the plan: the step, the reason prefix of the rows it excludes (None
    when it excludes none), its kernel, and whether that kernel is compiled or the reference."""

    step: FittedStep
    prefix: str | None
    kernel: Kernel
    compiled: bool


def reference_kernel(step: FittedStep) -> Kernel:
    """The step's reference ``flags``/``apply`` as a kernel: each call gets a pandas frame of the
    step's own input columns (its index the batch's), and the frame it returns goes back into the batch."""

    def flags(columns: Columns) -> np.ndarray:
        return step.flags(columns.frame(step.inputs))

    def apply(columns: Columns) -> None:
        columns.replace(step.inputs, step.apply(columns.frame(step.inputs)))

    return Kernel(apply=apply, flags=flags)


def stage_of(step: FittedStep, prefix: str | None) -> Stage:
    """Compile one step: its kind's kernel, else the reference kernel."""
    kernel = step.kernel()
    if kernel is None:
        return Stage(step, prefix, reference_kernel(step), compiled=False)
    if prefix is not None and kernel.flags is None:
        kernel = Kernel(apply=kernel.apply, flags=reference_kernel(step).flags)
    return Stage(step, prefix, kernel, compiled=True)


class CompiledPlan:
    """Rules, compiled steps and the model matrix of one chain.

    Parameters
    ----------
    input_columns : sequence of str
        Raw columns the batch starts with (the chain's ``input_columns``).
    rules : sequence of EligibilityRule
    steps : sequence of (FittedStep, str or None)
        The scoring steps in order, each with its exclusion reason prefix.
    feature_columns : sequence of str
        The model matrix's columns, in order.
    model_input : {"dense", "sparse"}, default "dense"
        The chain's sealed model container (:mod:`lakescore.model_input`).
    """

    def __init__(self, input_columns: Sequence[str], rules: Sequence[Any],
                 steps: Sequence[tuple[FittedStep, str | None]], feature_columns: Sequence[str], *,
                 model_input: containers.ModelInput = "dense") -> None:
        self.model_input = model_input
        self.input_columns = tuple(input_columns)
        self.rules = tuple(rules)
        self.stages = tuple(stage_of(step, prefix) for step, prefix in steps)
        self.feature_columns = tuple(feature_columns)
        self.feature_names = list(self.feature_columns)

    @property
    def kernels(self) -> dict[str, str]:
        """Step name -> ``"compiled"`` or ``"reference"`` (the step's own apply ran inside the plan)."""
        return {s.step.name: COMPILED if s.compiled else REFERENCE for s in self.stages}

    def run(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rules and steps on ``frame`` (n_rows, >= input columns), then the model matrix.

        Returns
        -------
        rows : int array (n_kept,)
            Positions in ``frame`` of the rows that reach the model, in order.
        matrix : float64 array or scipy CSR (n_kept, n_features)
            In the chain's ``model_input`` container.
        reasons : object array (n_rows,)
            The first exclusion reason of each excluded row; None for kept rows.

        Raises
        ------
        InputError
            A rule returns something other than one boolean per row, or a feature is missing after
            the steps. A step's own errors (StepError) pass through.
        """
        reasons = np.full(len(frame), None, dtype=object)
        rows = np.arange(len(frame))
        batch = Columns.from_frame(frame, self.input_columns)
        for rule in self.rules:
            eligible = rule.eligible_on(batch.frame(rule.columns, copy=True))
            rows = _exclude(batch, rows, reasons, ~eligible, rule.reason)
        for stage in self.stages:  # with no rows left too: a missing column is an error in any batch
            missing = [c for c in stage.step.inputs if c not in batch]
            if missing:
                raise InputError(f"step '{stage.step.name}' needs column(s) {missing} that the frame "
                                 "does not have at that point; check the recipe's column names")
            if stage.prefix is not None and stage.kernel.flags is not None:
                flagged = stage.kernel.flags(batch)
                rows = _exclude(batch, rows, reasons, flagged, f"{stage.prefix}:{stage.step.name}")
            stage.kernel.apply(batch)
        return rows, self._matrix(batch, len(rows)), reasons

    def _matrix(self, batch: Columns, n_rows: int) -> Any:
        if not n_rows:
            return containers.build([np.empty(0)] * len(self.feature_columns), 0, self.model_input)
        arrays = batch.arrays
        missing = [c for c in self.feature_names if c not in arrays]
        if missing:
            raise InputError(f"after preprocessing, model feature(s) {missing} are missing; "
                             "check the recipe's column names")
        values = [arrays[c] for c in self.feature_names]
        sparse = [isinstance(v, pd.arrays.SparseArray) for v in values]
        if self.model_input == "dense" and not any(sparse):
            return batch.float_matrix(self.feature_names, step="model")
        columns = [v if is_sparse else batch.floats(c, step="model")
                   for c, v, is_sparse in zip(self.feature_names, values, sparse)]
        return containers.build(columns, n_rows, self.model_input)


def _exclude(batch: Columns, rows: np.ndarray, reasons: np.ndarray, excluded: np.ndarray,
             reason: str) -> np.ndarray:
    """Give the ``excluded`` rows (boolean, over the batch's rows) ``reason`` and drop them from the batch."""
    if not excluded.any():
        return rows
    reasons[rows[excluded]] = reason
    batch.keep(~excluded)
    return rows[~excluded]
