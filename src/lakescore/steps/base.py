"""The step contract and the registry of built-in steps.

A step kind is a class with

- ``Params``: a pydantic model of its config keys (``columns`` plus its own), unknown keys refused;
- ``learn(frame, y, params) -> state``: runs once on training rows, may use batch statistics;
  state is JSON-able (see :func:`lakescore.frames.encode_state`) and holds everything apply needs;
- ``apply(frame, state) -> frame``: row-local — reads only the row and the state;
- optionally ``apply_training(frame, y, state) -> frame``: the step's output on the very rows it
  learned on, which the model is fitted on (default: ``apply``). TargetEncoder cross-fits here:
  each training row gets an encoding learned without its own fold, as sklearn's
  ``fit_transform`` gives; scoring rows always get ``apply``;
- optionally ``flags(frame, state) -> bool array``: rows this step excludes, with
  ``exclusion = "outlier" | "invalid"`` naming the reason prefix.

Traits (class attributes, read by the chain and the admission checks, never by class name):

- ``training_only``: a row step (Deduplicate, DropMissingRows, ``filter_step``); ``flags`` names the
  rows it drops at training, and the prediction chain skips it, so 10 rows in give 10 rows out;
- ``fixed``: learns nothing from the training rows (fixed edits, fixed bounds, row filters), so it
  may run in the ``pre_split:`` recipe on the whole table before the train/holdout split;
- ``row_filter``: its ``flags`` read only the row itself, so a pre-split use of it can be
  re-applied at scoring as an eligibility check (``ineligible:<step name>``).

``outputs(params)`` names the columns a step adds, from its config alone (no rows), so training's
preflight and the smoke probe know which columns a later step may read. Kinds whose new column
names come from the training values (OneHotEncoder) declare none.

A kind may stand for several: ``resolve(params)`` returns the kind that really learns (the
``custom`` step resolves to the user step's flavour).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakescore.columns import Kernel, float_values, text_values  # noqa: F401  (the steps' value helpers)
from lakescore.errors import StepError
from lakescore.frames import decode_state, encode_state, require_columns


class StepParams(BaseModel):
    """Config keys every step has; subclasses add their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    step: str
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    columns: list[str] = Field(min_length=1)

    def input_columns(self) -> list[str]:
        """Every column the step reads (``columns`` plus, e.g., GroupImputer's ``by``)."""
        return list(self.columns)


class StepKind:
    """Base of every step kind. Subclasses set ``kind`` and override learn/apply."""

    kind: ClassVar[str]
    Params: ClassVar[type[StepParams]] = StepParams
    exclusion: ClassVar[Literal["outlier", "invalid"] | None] = None
    training_only: ClassVar[bool] = False
    fixed: ClassVar[bool] = False
    row_filter: ClassVar[bool] = False

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """Columns this step adds to the frame, from its config alone (none by default: it edits
        its ``columns`` in place)."""
        return []

    @classmethod
    def resolve(cls, params: Any) -> type[StepKind]:
        """The kind that learns ``params`` (itself, except for dispatching kinds like ``custom``)."""
        return cls

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return frame

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        return np.zeros(len(frame), dtype=bool)

    @classmethod
    def apply_training(cls, frame: pd.DataFrame, y: pd.Series | None, state: dict[str, Any]) -> pd.DataFrame:
        """The output on the training rows the step learned on (``y`` their label): ``apply`` unless
        the kind cross-fits (a training row's value must not come from its own label)."""
        return cls.apply(frame, state)

    @classmethod
    def kernel(cls, state: dict[str, Any]) -> Kernel | None:
        """This step compiled to arrays for ``state`` (a :class:`lakescore.columns.Kernel`), or None
        when the kind has no kernel: the compiled chain then runs the reference ``apply``/``flags``
        on a frame of the step's own input columns, and the admission evidence says so."""
        return None


STEPS: dict[str, type[StepKind]] = {}


def register(cls: type[StepKind]) -> type[StepKind]:
    """Class decorator: make a step kind available under its config name ``cls.kind``."""
    STEPS[cls.kind] = cls
    return cls


def step_kind(name: str) -> type[StepKind]:
    """Look up a step kind by its config name.

    Raises
    ------
    StepError
        When no step of that name exists; the message lists the known names.
    """
    try:
        return STEPS[name]
    except KeyError:
        raise StepError(
            f"unknown preprocessing step '{name}'; known steps: {', '.join(sorted(STEPS))}"
        ) from None


def parse_params(raw: dict[str, Any]) -> StepParams:
    """Validate one ``preprocessing:`` entry against its step's ``Params``.

    Raises
    ------
    StepError
        Naming the step and each bad key.
    """
    kind = step_kind(str(raw.get("step")))
    try:
        return kind.Params.model_validate(raw)
    except ValidationError as err:
        label = raw.get("name", raw.get("step"))
        bad = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})" for e in err.errors()
        )
        raise StepError(f"step '{label}' ({kind.kind}): {bad}") from err


@dataclass(frozen=True)
class FittedStep:
    """A learned step: its kind, its name and its JSON-able state."""

    kind: str
    name: str
    state: dict[str, Any]
    rows_in: int = 0
    rows_out: int = 0

    @property
    def impl(self) -> type[StepKind]:
        return step_kind(self.kind)

    @property
    def columns(self) -> list[str]:
        return list(self.state["columns"])

    @property
    def inputs(self) -> list[str]:
        """Every column the step reads: ``columns`` plus ``state["extra_inputs"]`` (group keys)."""
        return self.columns + [c for c in self.state.get("extra_inputs", []) if c not in self.columns]

    def apply(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Row-local transform of ``frame`` (a copy is made first; the input is never changed)."""
        require_columns(frame, self.inputs, what=f"step '{self.name}'")
        return self.impl.apply(frame.copy(), self.state)

    def apply_training(self, frame: pd.DataFrame, y: pd.Series | None) -> pd.DataFrame:
        """The step's output on the rows it learned on, for fitting what comes after it.

        Parameters
        ----------
        frame : DataFrame of shape (n_rows, n_columns)
            The rows the step learned on (a copy is made first; the input is never changed).
        y : Series of shape (n_rows,) or None
            Their label, aligned by position.

        Returns
        -------
        DataFrame
            ``apply(frame)`` for every kind but those that cross-fit (TargetEncoder: out-of-fold
            encodings, see :meth:`StepKind.apply_training`).
        """
        require_columns(frame, self.inputs, what=f"step '{self.name}'")
        return self.impl.apply_training(frame.copy(), y, self.state)

    @property
    def training_only(self) -> bool:
        return self.impl.training_only

    def kernel(self) -> Kernel | None:
        """The step compiled to arrays, or None when its kind has none (see :meth:`StepKind.kernel`)."""
        return self.impl.kernel(self.state)

    @property
    def reusable_as_eligibility(self) -> bool:
        """True when a pre-split use of this step can be re-applied at scoring as eligibility:
        a row filter whose declared inference context (user steps) is the row itself."""
        return self.impl.row_filter and self.state.get("inference_context", "row") == "row"

    def flags(self, frame: pd.DataFrame) -> np.ndarray:
        """Boolean array of shape (n_rows,): True where this step excludes the row (or, for a
        training-only step, drops it at training)."""
        if self.impl.exclusion is None and not self.impl.training_only:
            return np.zeros(len(frame), dtype=bool)
        require_columns(frame, self.inputs, what=f"step '{self.name}'")
        flagged = np.asarray(self.impl.flags(frame, self.state), dtype=bool)
        if flagged.shape != (len(frame),):
            raise StepError(f"step '{self.name}' ({self.kind}) flagged {flagged.shape} rows of a "
                            f"{len(frame)}-row frame; flags must give one boolean per row",
                            step=self.name)
        return flagged

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "state": encode_state(self.state),
                "rows_in": self.rows_in, "rows_out": self.rows_out}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FittedStep:
        return cls(data["kind"], data["name"], decode_state(data["state"]),
                   data.get("rows_in", 0), data.get("rows_out", 0))


def learn_step(raw: dict[str, Any], frame: pd.DataFrame, y: pd.Series | None) -> FittedStep:
    """Validate one recipe entry and learn it on ``frame`` (n_rows, n_columns).

    Rows the step flags are counted out (``rows_out``); the caller drops them before the next step.

    Raises
    ------
    StepError
        Bad config, or a column of the recipe that the frame lacks.
    """
    params = parse_params(raw)
    missing = [c for c in params.input_columns() if c not in frame.columns]
    if missing:
        raise StepError(
            f"step '{params.name}' ({params.step}) names column(s) {missing} that the training "
            f"frame does not have; available: {sorted(frame.columns)}",
            step=params.name,
        )
    kind = step_kind(params.step).resolve(params)
    state = kind.learn(frame, y, params)
    state["columns"] = list(params.columns)
    extra = [c for c in params.input_columns() if c not in params.columns]
    if extra:
        state["extra_inputs"] = extra
    try:
        state = decode_state(encode_state(state))
    except TypeError as err:
        raise StepError(f"step '{params.name}' ({kind.kind}) learned state that is not JSON-able: "
                        f"{err}", step=params.name) from err
    fitted = FittedStep(kind.kind, params.name, state, rows_in=len(frame), rows_out=len(frame))
    if kind.exclusion is not None or kind.training_only:
        kept = int((~fitted.flags(frame)).sum())
        fitted = FittedStep(kind.kind, params.name, state, rows_in=len(frame), rows_out=kept)
    return fitted


# --- helpers shared by the step families ----------------------------------------------------

def float_matrix(frame: pd.DataFrame, columns: list[str], *, step: str) -> np.ndarray:
    """``float_values`` of each column, stacked: array of shape (n_rows, n_columns)."""
    if not columns:
        return np.empty((len(frame), 0))
    return np.column_stack([float_values(frame, c, step=step) for c in columns]).reshape(len(frame), len(columns))


def is_numeric(series: pd.Series) -> bool:
    """True for numeric, non-boolean columns (int, Int64, float, Float64)."""
    return pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)
