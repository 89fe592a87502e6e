"""The pre-split recipe: fixed steps learned on the whole table before the train/holdout split.

Only steps that learn nothing from the rows (``fixed``: Casting, ValueReplacement, ClipValues,
FeatureInteraction, DateFeatures, ManualBounds, DropMissingRows, Deduplicate, ``column_step`` and
``filter_step``) may run there, so the holdout never leaks into a learned statistic. Rows their
filters drop leave both training and holdout. At scoring the chain re-applies the fixed edits, and
the row-local filters as eligibility when scoring.yml says ``mode: pre_split | combined``; a step
that reads the target is skipped at scoring (scoring.yml ``skip_target_pre_split_steps: true``,
the default) or refused at training (``false``), since a scoring request has no target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from lakescore.errors import StepError
from lakescore.steps.base import FittedStep, learn_step


@dataclass(frozen=True)
class PreSplit:
    """A learned pre-split recipe.

    Attributes
    ----------
    steps : tuple of FittedStep
        In recipe order.
    skipped : tuple of str
        Names of the steps that read the target (never run at scoring).
    kept : pandas.Index
        Index labels of the input rows that every filter kept.
    """

    steps: tuple[FittedStep, ...]
    skipped: tuple[str, ...]
    kept: pd.Index


def learn_pre_split(frame: pd.DataFrame, *, recipe: list[dict[str, Any]], target_columns: list[str],
                    skip_target: bool = True) -> PreSplit:
    """Learn the ``pre_split:`` recipe on the whole table, in order.

    Parameters
    ----------
    frame : DataFrame of shape (n_rows, n_columns)
        Every row of the training table (after ``data.filter``), with a unique index.
    recipe : list of dict
        The ``pre_split:`` entries of training.yml.
    target_columns : list of str
        The label column and the columns its expression reads.
    skip_target : bool, default True
        scoring.yml ``skip_target_pre_split_steps``.

    Raises
    ------
    StepError
        For a step that learns from the rows (move it to ``preprocessing:``), or one that reads the
        target while ``skip_target`` is false.
    """
    data, steps, skipped = frame, [], []
    for raw in recipe:
        step = learn_step(raw, data, None)
        if not step.impl.fixed:
            raise StepError(f"pre-split step '{step.name}' ({step.kind}) learns from the rows, which before "
                            "the split would leak the holdout into training; move it to preprocessing:",
                            step=step.name)
        reads = sorted(set(step.inputs) & set(target_columns))
        if reads and not skip_target:
            raise StepError(f"pre-split step '{step.name}' reads the target column(s) {reads}, which a scoring "
                            "request does not carry; set skip_target_pre_split_steps: true in "
                            "config/scoring.yml, or remove the step", step=step.name)
        if reads:
            skipped.append(step.name)
        data = step.apply(data[~step.flags(data)])
        steps.append(step)
    return PreSplit(tuple(steps), tuple(skipped), data.index)
