"""The step contract and the registry of built-in steps.

A step kind is a class with

- ``Params``: a pydantic model of its config keys (``columns`` plus its own), unknown keys refused;
- ``learn(frame, y, params) -> state``: runs once on training rows, may use batch statistics;
  state is JSON-able (see :func:`lakescore.frames.encode_state`) and holds everything apply needs;
- ``apply(frame, state) -> frame``: row-local — reads only the row and the state;
- optionally ``flags(frame, state) -> bool array``: rows this step excludes, with
  ``exclusion = "outlier" | "invalid"`` naming the reason prefix.

Steps with ``training_only = True`` (row filters) run at training and are skipped when scoring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakescore.errors import StepError
from lakescore.frames import decode_state, encode_state, require_columns


class StepParams(BaseModel):
    """Config keys every step has; subclasses add their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    step: str
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    columns: list[str] = Field(min_length=1)


class StepKind:
    """Base of every step kind. Subclasses set ``kind`` and override learn/apply."""

    kind: ClassVar[str]
    Params: ClassVar[type[StepParams]] = StepParams
    exclusion: ClassVar[Literal["outlier", "invalid"] | None] = None
    training_only: ClassVar[bool] = False

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return frame

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        return np.zeros(len(frame), dtype=bool)


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

    def apply(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Row-local transform of ``frame`` (a copy is made first; the input is never changed)."""
        require_columns(frame, self.columns, what=f"step '{self.name}'")
        return self.impl.apply(frame.copy(), self.state)

    def flags(self, frame: pd.DataFrame) -> np.ndarray:
        """Boolean array of shape (n_rows,): True where this step excludes the row."""
        if self.impl.exclusion is None:
            return np.zeros(len(frame), dtype=bool)
        require_columns(frame, self.columns, what=f"step '{self.name}'")
        return np.asarray(self.impl.flags(frame, self.state), dtype=bool)

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
    missing = [c for c in params.columns if c not in frame.columns]
    if missing:
        raise StepError(
            f"step '{params.name}' ({params.step}) names column(s) {missing} that the training "
            f"frame does not have; available: {sorted(frame.columns)}",
            step=params.name,
        )
    kind = step_kind(params.step)
    state = kind.learn(frame, y, params)
    state["columns"] = list(params.columns)
    fitted = FittedStep(kind.kind, params.name, state, rows_in=len(frame), rows_out=len(frame))
    if kind.exclusion is not None:
        kept = int((~fitted.flags(frame)).sum())
        fitted = FittedStep(kind.kind, params.name, state, rows_in=len(frame), rows_out=kept)
    return fitted
