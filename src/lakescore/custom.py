"""User steps: ``column_step``, ``fitted_step`` and ``filter_step``.

Declare a step at module level in the project's ``src/lakescore_project/preprocessing.py``::

    def dep_clock(frame):                      # frame: a copy of the step's columns
        return frame["hour"] + frame["minute"] / 60

    dep_clock_step = column_step("dep_clock", dep_clock, output=["dep_clock"])

and name it in config/training.yml by ``module:attribute`` with the ``custom`` step::

    preprocessing:
      - {step: custom, name: dep_clock, ref: "lakescore_project.preprocessing:dep_clock_step",
         columns: [hour, minute]}

``columns`` are the columns the functions receive (a copy, so user code cannot change the
pipeline's frame); ``name`` is the step's name in evidence and exclusion reasons (required, like
every step's; usually the declared name). The three flavours:

- ``column_step(name, fn, output=[...])``: stateless; ``fn(frame) -> Series | DataFrame`` with the
  ``output`` columns, one row per input row. Outputs are added to (or replace) the frame's columns.
- ``fitted_step(name, learn, apply, output=[...])``: ``learn(frame, y) -> state`` runs once at
  training (state must be JSON-able: numbers, strings, lists, dicts); ``apply(frame, state)``
  returns the outputs and must read only the row and the state.
- ``filter_step(name, fn)``: training-only; ``fn(frame) -> booleans`` (True keeps the row). Skipped
  at scoring, or re-applied as eligibility when it is in the ``pre_split:`` recipe and scoring.yml
  says ``mode: pre_split | combined``.

``inference_context`` declares what a function reads at scoring: ``"row"`` (the default: the row
alone), ``"group"``, ``"window"`` or ``"global"`` (other rows). It is saved with the step for the
admission checks; only ``"row"`` filters are re-used as eligibility.

Functions are saved as :class:`lakescore.usercode.FunctionRef` JSON (``module:qualname``, source
text and its SHA-256) in the fitted step's state under ``apply`` (and ``learn`` for a fitted step),
where the admission lint reads them; a worker imports them by name. User step kinds carry
``user_code = True``.
Lambdas and nested functions are refused: define a named function at module level.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import AfterValidator, Field

from lakescore.errors import StepError
from lakescore.frames import decode_state, encode_state
from lakescore.steps.base import StepKind, StepParams, register
from lakescore.usercode import FunctionRef, UserCodeError, import_object, refuse_former_package

Context = Literal["row", "group", "window", "global"]
Flavour = Literal["column", "fitted", "filter"]
CONTEXTS = ("row", "group", "window", "global")


@dataclass(frozen=True)
class UserStep:
    """A declared user step (what ``column_step``/``fitted_step``/``filter_step`` return)."""

    name: str
    flavour: Flavour
    functions: dict[str, FunctionRef]
    output: tuple[str, ...] = ()
    inference_context: Context = "row"
    callables: dict[str, Callable[..., Any]] = field(default_factory=dict, repr=False, compare=False)


def _declare(name: str, flavour: Flavour, fns: dict[str, Callable[..., Any]], output: list[str] | tuple[str, ...],
             inference_context: str) -> UserStep:
    if inference_context not in CONTEXTS:
        raise StepError(f"user step '{name}': inference_context must be one of {', '.join(CONTEXTS)}; "
                        f"got {inference_context!r}", step=name)
    if flavour != "filter" and (not output or isinstance(output, str)):
        raise StepError(f"user step '{name}': output must be a non-empty list of column names; got "
                        f"{output!r} (e.g. output=['{name}'])", step=name)
    refs = {role: FunctionRef.of(fn, what=f"user step '{name}' ({role})") for role, fn in fns.items()}
    return UserStep(name, flavour, refs, tuple(output), inference_context, dict(fns))  # type: ignore[arg-type]


def column_step(name: str, fn: Callable[[pd.DataFrame], Any], *, output: list[str],
                inference_context: Context = "row") -> UserStep:
    """A stateless user step: ``fn(frame) -> Series | DataFrame`` with the ``output`` columns.

    Parameters
    ----------
    name : str
        Default step name (the recipe's ``name`` is the one saved).
    fn : function defined at module level
        Receives a copy of the step's ``columns`` (DataFrame of shape (n_rows, n_columns)).
    output : list of str
        The columns ``fn`` returns, in order; a Series is taken as the single output.
    inference_context : {"row", "group", "window", "global"}, default "row"

    Raises
    ------
    UserCodeError
        For a lambda or nested function ("define a named function at module level").
    """
    return _declare(name, "column", {"apply": fn}, output, inference_context)


def fitted_step(name: str, learn: Callable[[pd.DataFrame, pd.Series | None], Any],
                apply: Callable[[pd.DataFrame, Any], Any], *, output: list[str],
                inference_context: Context = "row") -> UserStep:
    """A user step with state: ``learn(frame, y) -> state`` once at training, then
    ``apply(frame, state) -> Series | DataFrame`` with the ``output`` columns.

    The state must be JSON-able (see :func:`lakescore.frames.encode_state`); ``apply`` gets a copy
    of it and of the frame. Raises :class:`UserCodeError` for a lambda or nested function.
    """
    return _declare(name, "fitted", {"learn": learn, "apply": apply}, output, inference_context)


def filter_step(name: str, fn: Callable[[pd.DataFrame], Any], *, inference_context: Context = "row") -> UserStep:
    """A training-only row filter: ``fn(frame) -> booleans`` (True keeps the row; missing drops it).

    Raises :class:`UserCodeError` for a lambda or nested function.
    """
    return _declare(name, "filter", {"apply": fn}, (), inference_context)


def resolve_user_step(ref: str, *, step: str) -> UserStep:
    """Import the :class:`UserStep` named ``module:attribute``.

    Raises
    ------
    UserCodeError
        When the module or attribute is missing, or the attribute is not a declared user step.
    """
    obj = import_object(ref, what=f"step '{step}': ref")
    if not isinstance(obj, UserStep):
        raise UserCodeError(f"step '{step}': ref '{ref}' is a {type(obj).__name__}, not a user step. "
                            f"Declare it: my_step = column_step('{step}', my_function, output=[...])")
    return obj


@functools.lru_cache(maxsize=256)
def _function(module: str, qualname: str, sha256: str) -> Callable[..., Any]:
    """Import a saved function once per process (cached by name and source digest)."""
    return FunctionRef(module, qualname, "", sha256).load()


def _call(state: dict[str, Any], role: str) -> Callable[..., Any]:
    ref = state[role]
    return _function(ref["module"], ref["qualname"], ref["source_sha256"])


class CustomParams(StepParams):
    ref: Annotated[str, AfterValidator(refuse_former_package)] = Field(pattern=r"^[A-Za-z_][\w.]*[:.][A-Za-z_][\w.]*$")


def _outputs(step: str, result: Any, output: list[str], frame: pd.DataFrame) -> pd.DataFrame:
    """Check a user function's result and return it as a DataFrame of the declared outputs."""
    if isinstance(result, pd.Series) and len(output) == 1:
        result = result.to_frame(output[0])
    elif isinstance(result, np.ndarray) and result.ndim == 1 and len(output) == 1:
        result = pd.DataFrame({output[0]: result}, index=frame.index)
    if not isinstance(result, pd.DataFrame) or len(result) != len(frame):
        raise StepError(f"user step '{step}' returned {type(result).__name__} of length "
                        f"{len(result) if hasattr(result, '__len__') else '?'} for {len(frame)} rows; "
                        f"return a DataFrame (or Series) with columns {output}, one row per input row",
                        step=step)
    if list(result.columns) != list(output):
        raise StepError(f"user step '{step}' returned columns {list(result.columns)}; declared output is "
                        f"{output}. Return exactly the declared columns or fix output=[...]", step=step)
    if not result.index.equals(frame.index):
        raise StepError(f"user step '{step}' returned a frame with a different index; keep the input's "
                        "index (don't reset_index, sort or filter rows)", step=step)
    return result


def _declared_outputs(cls: type[StepKind], params: Any) -> list[str]:
    """The declared ``output=[...]`` of the user step ``params.ref`` (a filter step adds none)."""
    return list(resolve_user_step(params.ref, step=params.name).output)


class _UserKind(StepKind):
    """Shared learn/apply of the column and fitted flavours."""

    user_code: ClassVar[bool] = True
    outputs = classmethod(_declared_outputs)

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        declared = resolve_user_step(params.ref, step=params.name)
        state: dict[str, Any] = {"ref": params.ref, "name": params.name, "declared_name": declared.name,
                                 "flavour": declared.flavour, "output": list(declared.output),
                                 "inference_context": declared.inference_context,
                                 **{role: ref.to_json() for role, ref in declared.functions.items()},
                                 "user_state": None, "dtypes": {}}
        if declared.flavour == "fitted":
            user_state = declared.callables["learn"](frame[params.columns].copy(), None if y is None else y.copy())
            try:
                state["user_state"] = decode_state(encode_state(user_state))
            except TypeError as err:
                raise StepError(f"user step '{params.name}': learn() returned state that is not JSON-able "
                                f"({err}); return numbers, strings, lists and dicts", step=params.name) from err
        if declared.flavour != "filter":
            sample = _run(frame[params.columns], state, params.name)
            state["dtypes"] = {c: str(t) for c, t in sample.dtypes.items()}
        return state

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        outputs = _run(frame[state["columns"]], state, state["name"])
        for column in outputs.columns:
            frame[column] = outputs[column]
        return frame


def _run(data: pd.DataFrame, state: dict[str, Any], step: str) -> pd.DataFrame:
    output = state["output"]
    if len(data) == 0 and state.get("dtypes"):
        return pd.DataFrame({c: pd.Series(dtype=state["dtypes"][c]) for c in output}, index=data.index)
    fn = _call(state, "apply")
    if state["flavour"] == "fitted":
        result = fn(data.copy(), copy.deepcopy(state["user_state"]))
    else:
        result = fn(data.copy())
    out = _outputs(step, result, output, data)
    dtypes = state.get("dtypes") or {}
    for column, dtype in dtypes.items():
        if str(out[column].dtype) != dtype:
            try:
                out[column] = out[column].astype(dtype)
            except (TypeError, ValueError) as err:
                raise StepError(f"user step '{step}': output '{column}' is {out[column].dtype} here but was "
                                f"{dtype} at training; return the same dtype for every batch", step=step) from err
    return out


@register
class CustomStep(StepKind):
    """``step: custom``: resolves ``ref`` to a declared user step and learns as its flavour."""

    kind = "custom"
    Params = CustomParams
    user_code = True

    outputs = classmethod(_declared_outputs)

    @classmethod
    def resolve(cls, params: Any) -> type[StepKind]:
        flavour = resolve_user_step(params.ref, step=params.name).flavour
        return {"column": CustomColumn, "fitted": CustomFitted, "filter": CustomFilter}[flavour]


@register
class CustomColumn(_UserKind):
    """A ``column_step``: stateless user function adding its output columns."""

    kind = "custom_column"
    Params = CustomParams
    fixed = True


@register
class CustomFitted(_UserKind):
    """A ``fitted_step``: user learn/apply pair; the user's state is saved under ``user_state``."""

    kind = "custom_fitted"
    Params = CustomParams


@register
class CustomFilter(StepKind):
    """A ``filter_step``: drops the rows its function refuses at training; skipped at scoring
    unless re-applied as pre-split eligibility."""

    kind = "custom_filter"
    Params = CustomParams
    user_code = True
    training_only = True
    fixed = True
    row_filter = True

    learn = staticmethod(_UserKind.learn)

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        if len(frame) == 0:
            return np.zeros(0, dtype=bool)
        keep = _call(state, "apply")(frame[state["columns"]].copy())
        raw = np.asarray(keep, dtype=object).ravel() if keep is not None else None
        values = None if raw is None else np.array([False if v is None or pd.isna(v) else bool(v) for v in raw],
                                                   dtype=bool)
        if values is None or values.shape != (len(frame),):
            raise StepError(f"filter step '{state['name']}' returned {type(keep).__name__} of shape "
                            f"{getattr(values, 'shape', None)} for {len(frame)} rows; return one boolean "
                            "per row (True keeps the row)", step=state["name"])
        return ~values
