"""Deliberately broken step kinds, one per probe check, registered on import.

Imported lazily by the admission tests (and by the probe's fresh process, which imports the module
of every step it reloads), never at collection time, so other tests never see these kinds.
"""

import numpy as np
import pandas as pd

from lakescore.steps.base import StepKind, register

SCALE = 1.0  # BrokenModuleState reads this module global; a test edits it in-process


class _Base(StepKind):
    @staticmethod
    def learn(frame, y, params):
        return {}


@register
class BrokenBatchMean(_Base):
    """Fills missing values with the batch mean (chunks and perturb must catch it)."""

    kind = "BrokenBatchMean"

    @staticmethod
    def apply(frame, state):
        for c in state["columns"]:
            frame[c] = frame[c].astype("float64").fillna(frame[c].astype("float64").mean())
            frame[c] = frame[c] / frame[c].abs().max()
        return frame


@register
class BrokenCumulative(_Base):
    """A running total: depends on row order (reverse must catch it)."""

    kind = "BrokenCumulative"

    @staticmethod
    def apply(frame, state):
        for c in state["columns"]:
            frame[c] = frame[c].astype("float64").fillna(0).cumsum()
        return frame


@register
class BrokenReadsIndex(_Base):
    """Uses the index as a feature (index_shift must catch it)."""

    kind = "BrokenReadsIndex"

    @staticmethod
    def apply(frame, state):
        frame["position"] = np.asarray(frame.index, dtype="float64")
        return frame


@register
class BrokenFailsOnEmpty(_Base):
    """Reads the first row unconditionally (empty must catch it)."""

    kind = "BrokenFailsOnEmpty"

    @staticmethod
    def apply(frame, state):
        first = frame[state["columns"][0]].iloc[0]
        frame["first_seen"] = frame[state["columns"][0]] == first
        return frame


@register
class BrokenDtypeFollowsData(_Base):
    """Int64 when the batch holds only digits, float64 when it holds text (chunks must catch it)."""

    kind = "BrokenDtypeFollowsData"

    @staticmethod
    def apply(frame, state):
        for c in state["columns"]:
            values = pd.to_numeric(frame[c], errors="coerce")
            frame[c] = values.astype("Int64") if values.notna().all() else values
        return frame


@register
class BrokenSorts(_Base):
    """Returns its rows sorted by a column (chunks/reverse must catch it)."""

    kind = "BrokenSorts"

    @staticmethod
    def apply(frame, state):
        return frame.sort_values(state["columns"][0], kind="stable")


@register
class BrokenModuleState(_Base):
    """Multiplies by a module global that this process changed (fresh_module must catch it)."""

    kind = "BrokenModuleState"

    @staticmethod
    def apply(frame, state):
        for c in state["columns"]:
            frame[c] = frame[c].astype("float64") * SCALE
        return frame


@register
class BrokenForwardFill(_Base):
    """Fills a gap from the row before it (perturb's blanking must catch it)."""

    kind = "BrokenForwardFill"

    @staticmethod
    def apply(frame, state):
        for c in state["columns"]:
            frame[c] = frame[c].astype("float64").ffill()
        return frame


@register
class BrokenCountsMissing(_Base):
    """Counts the batch's missing values into every row (perturb's blanking must catch it)."""

    kind = "BrokenCountsMissing"

    @staticmethod
    def apply(frame, state):
        frame["gaps"] = float(frame[state["columns"]].isna().to_numpy().sum())
        return frame


CACHE = {}


@register
class BrokenModuleCache(_Base):
    """Divides by half the first batch's largest value, kept in a module dict (fresh_module must catch it)."""

    kind = "BrokenModuleCache"

    @staticmethod
    def apply(frame, state):
        for c in state["columns"]:
            scale = CACHE.setdefault(c, float(frame[c].abs().max()) / 2.5)
            frame[c] = frame[c].astype("float64") / scale
        return frame


@register
class BrokenKernel(_Base):
    """A row-local reference apply (x * 2) whose compiled kernel reads other rows (x - batch mean):
    only the compiled part's agreement checks can catch it."""

    kind = "BrokenKernel"

    @staticmethod
    def apply(frame, state):
        for c in state["columns"]:
            frame[c] = frame[c].astype("float64") * 2.0
        return frame

    @staticmethod
    def kernel(state):
        from lakescore.columns import Kernel

        def apply(batch):
            for c in state["columns"]:
                values = batch.floats(c, step="BrokenKernel")
                batch.set(c, values - np.nanmean(values) if np.isfinite(values).any() else values)

        return Kernel(apply)


@register
class BrokenInPlaceKernel(BrokenKernel):
    """BrokenKernel's reference apply (x * 2), with a kernel that doubles the column in the array it
    read (the batch hands numpy columns over read-only, so the kernel fails instead)."""

    kind = "BrokenInPlaceKernel"

    @staticmethod
    def kernel(state):
        from lakescore.columns import Kernel

        def apply(batch):
            for c in state["columns"]:
                values = batch.floats(c, step="BrokenInPlaceKernel")
                values *= 2.0
                batch.set(c, values)

        return Kernel(apply)
