"""``ModelSet``: several named fitted chains, trained on the same rows, scored as one model.

Each component is a whole :class:`~lakescore.chain.FittedChain` (its own recipe, model and decision
threshold; the set's eligibility rules and pre-split recipe). :meth:`ModelSet.predict` is the set's one
scoring function, with the same surface as ``FittedChain.predict`` (``input_columns``,
``output_dtypes``, ``predict``, ``lookups``, ``save``/``load``, ...), so every route that loads a
lakescore model scores a set the same way. One output row per input row, same index and order:

- ``<component>_prediction`` (and ``<component>_probability`` for a classifier), each component's
  own columns prefixed by its name, in declared order (independent outputs);
- each composed column (training.yml ``model_set.composed``): ``weighted_sum`` is
  ``sum(w_i * x_i)``, ``weighted_mean`` is ``sum(w_i * x_i) / sum(w_i)``, Float64, over the
  components' numeric outputs with fixed weights;
- one ``scoring_status`` and ``exclusion_reason`` for the row: a row any component excludes is
  excluded; the reason is the first excluding component's (declared order), its step prefixed by
  the component's name, ``outlier:delay_model/distance_outlier`` or ``invalid:minutes_model/hour``.
  An eligibility reason (``ineligible:<rule>``, the set's rules and re-used pre-split filters, the
  same in every component) keeps its own text;
- each combined rule's typed columns (scoring.yml ``combined_rules``): an output rule whose
  ``columns`` name the set's prefixed component columns, composed columns and input columns.

On an excluded row every other output is null, every component's prediction included (as a
single chain leaves its prediction null): a row is scored by the whole set or not at all, so a
published row never mixes one component's answer with another's exclusion.

Saved as a folder: ``set.json`` (component order, composed columns, combined rules) and
``components/<name>/``, each a saved chain; the certificate seals the whole folder.
:func:`lakescore.saved_models.load_saved` reads a saved folder back (a chain, a set or a pasting ensemble).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from lakescore.chain import PASS_ROWS, STATUS_EXCLUDED, STATUS_PREDICTED, FittedChain
from lakescore.frames import require_columns, to_pandas
from lakescore.members import FirstMemberDelegation
from lakescore.rules import OUTPUT_TYPES, OutputRule, add_outputs

if TYPE_CHECKING:  # annotations only: a worker that loads a set imports no pydantic
    from lakescore.config import ComposedKind

SET_FORMAT = 1
SET_FILE = "set.json"
SCORED_COLUMNS = ("prediction", "probability")
"""A component's own columns that the set outputs, prefixed by the component's name."""


def component_reason(component: str, reason: str) -> str:
    """The set's ``exclusion_reason`` for a row that ``component`` excluded with ``reason``:
    ``outlier:distance_outlier`` -> ``outlier:delay_model/distance_outlier``; an eligibility reason
    (``ineligible:...``, the same in every component) is kept as it is."""
    prefix, _, rest = reason.partition(":")
    return reason if prefix == "ineligible" else f"{prefix}:{component}/{rest}"


@dataclass(frozen=True)
class Composed:
    """A composed output column: ``kind`` over ``terms`` of ``(component, column, weight)``.

    ``weighted_sum``: ``sum(w * x)``; ``weighted_mean``: ``sum(w * x) / sum(w)``."""

    name: str
    kind: ComposedKind
    terms: tuple[tuple[str, str, float], ...]

    @property
    def columns(self) -> list[str]:
        """The set's output columns it reads, e.g. ``delay_model_probability``."""
        return [f"{component}_{column}" for component, column, _ in self.terms]

    def compute(self, values: pd.DataFrame) -> np.ndarray:
        """float64 of shape (n_rows,) from ``values`` (the set's component columns); NaN where a term is null."""
        total = np.zeros(len(values))
        for column, (_, _, weight) in zip(self.columns, self.terms, strict=True):
            total = total + weight * values[column].to_numpy(dtype="float64", na_value=np.nan)
        return total / sum(w for _, _, w in self.terms) if self.kind == "weighted_mean" else total

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "terms": [list(t) for t in self.terms]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Composed:
        return cls(data["name"], data["kind"], tuple((c, col, float(w)) for c, col, w in data["terms"]))


@dataclass(frozen=True)
class ModelSet(FirstMemberDelegation):
    """Named fitted chains scored as one model (see the module docstring for the outputs).

    Attributes
    ----------
    components : tuple of (str, FittedChain)
        In declared order; the order decides which component's reason an excluded row gets.
    composed : tuple of Composed
    combined_rules : tuple of OutputRule
        Rules over one row's component columns and inputs (scoring.yml ``combined_rules``).
    """

    components: tuple[tuple[str, FittedChain], ...]
    composed: tuple[Composed, ...] = ()
    combined_rules: tuple[OutputRule, ...] = ()

    def component(self, name: str) -> FittedChain:
        """The fitted chain of component ``name``."""
        return dict(self.components)[name]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.components]

    # --- the surface every route uses (as FittedChain's; engine, rules, lookups from the first) ---

    @property
    def task(self) -> str:
        """``model_set``: the components each have their own task."""
        return "model_set"

    @property
    def excludes_rows(self) -> bool:
        return any(chain.excludes_rows for _, chain in self.components)

    @property
    def decision_rule(self) -> str:
        """Each component's decision rule, e.g. ``delay_model: threshold 0.4 (...); minutes_model: ...``."""
        return "; ".join(f"{name}: {chain.decision_rule}" for name, chain in self.components)

    @property
    def input_columns(self) -> tuple[str, ...]:
        """Raw columns a request must carry: every component's inputs, then the inputs that combined
        rules read (their columns that are not the set's outputs)."""
        columns = [c for _, chain in self.components for c in chain.input_columns]
        outputs = set(self.output_dtypes)
        columns += [c for rule in self.combined_rules for c in rule.columns if c not in outputs]
        return tuple(dict.fromkeys(columns))

    @property
    def component_dtypes(self) -> dict[str, str]:
        """``<component>_<column>`` -> pandas dtype of each component's prediction (and probability)."""
        return {f"{name}_{column}": dtype for name, chain in self.components
                for column, dtype in chain.output_dtypes.items() if column in SCORED_COLUMNS}

    @property
    def output_dtypes(self) -> dict[str, str]:
        """Column -> pandas dtype of :meth:`predict`'s frame: component columns, composed columns
        (Float64), ``scoring_status`` and ``exclusion_reason`` (string), combined-rule columns."""
        dtypes = dict(self.component_dtypes)
        dtypes.update({c.name: "Float64" for c in self.composed})
        dtypes.update({"scoring_status": "string", "exclusion_reason": "string"})
        for rule in self.combined_rules:
            dtypes.update({name: OUTPUT_TYPES[kind] for name, kind in rule.outputs})
        return dtypes

    @property
    def output_columns(self) -> list[str]:
        return list(self.output_dtypes)

    def predict(self, frame: Any, *, pass_rows: int = PASS_ROWS) -> pd.DataFrame:
        """Score ``frame`` with every component and combine: one output row per input row, same
        index and order.

        Parameters
        ----------
        frame : pandas or Polars DataFrame of shape (n_rows, >= len(input_columns))
            Raw rows carrying every component's inputs and the combined rules' input columns;
            extra columns are ignored.
        pass_rows : int, default :data:`lakescore.chain.PASS_ROWS`
            Each component's most rows per model call (:meth:`FittedChain.predict`).

        Returns
        -------
        DataFrame of shape (n_rows, len(output_dtypes))
            In :attr:`output_dtypes` order: each component's ``<component>_prediction`` (and
            ``<component>_probability`` for a classifier), as that component's chain outputs
            them; each composed column (Float64, its weighted sum or mean of those); then
            ``scoring_status`` and ``exclusion_reason`` (string), and the combined rules' columns.
            A row any component excludes is excluded by the whole set: its component, composed and
            combined-rule values are null, and its reason is the first excluding component's in
            declared order (:func:`component_reason`, e.g.
            ``outlier:delay_model/distance_outlier``).

        Raises
        ------
        InputError
            A component's or a combined rule's input column is missing, or a combined rule returns
            something other than it declares.
        ValueError
            ``pass_rows`` below 1.
        """
        frame = to_pandas(frame)
        require_columns(frame, self.input_columns, what="the model set")
        excluded = np.zeros(len(frame), dtype=bool)
        reasons = np.full(len(frame), None, dtype=object)
        scored = {}
        for name, chain in self.components:
            out = scored[name] = chain.predict(frame, pass_rows=pass_rows)
            mine = (out["scoring_status"] == STATUS_EXCLUDED).to_numpy(dtype=bool)
            first = mine & ~excluded
            reasons[first] = [component_reason(name, r) for r in out["exclusion_reason"].to_numpy()[first]]
            excluded |= mine
        columns: dict[str, Any] = {}
        for name, out in scored.items():
            for column in (c for c in SCORED_COLUMNS if c in out.columns):
                values = out[column].array.copy()
                values[excluded] = pd.NA  # scored by the whole set or not at all
                columns[f"{name}_{column}"] = values
        component = pd.DataFrame(columns, index=frame.index, copy=False)
        for entry in self.composed:
            total = entry.compute(component)
            columns[entry.name] = pd.arrays.FloatingArray(np.where(excluded, 0.0, total), excluded | np.isnan(total))
        status = np.where(excluded, STATUS_EXCLUDED, STATUS_PREDICTED).astype(object)
        columns["scoring_status"] = pd.array(status, dtype="string")
        columns["exclusion_reason"] = pd.array(reasons, dtype="string")
        out = pd.DataFrame(columns, index=frame.index, copy=False)
        if not self.combined_rules:
            return out
        return add_outputs(self.combined_rules, self.rule_frame(frame, out), out, np.flatnonzero(~excluded))

    def rule_frame(self, frame: pd.DataFrame, scored: pd.DataFrame) -> pd.DataFrame:
        """What the combined rules read, one row per row of ``frame``: each column that any rule
        declares, from the set's outputs ``scored`` when it is one, else from the raw ``frame``."""
        wanted = dict.fromkeys(c for rule in self.combined_rules for c in rule.columns)
        return pd.DataFrame({c: scored[c] if c in scored.columns else frame[c] for c in wanted},
                            index=frame.index, copy=False)

    # --- save / load ------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the set to the folder ``path``: ``set.json`` and ``components/<name>/`` (each a
        saved chain). Returns the folder."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        for name, chain in self.components:
            chain.save(folder / "components" / name)
        meta = {
            "format": SET_FORMAT, "engine": self.engine, "decision_rule": self.decision_rule,
            "components": [{"name": name, "model_class": chain.model_class, "task": chain.task}
                           for name, chain in self.components],
            "composed": [c.to_json() for c in self.composed],
            "combined_rules": [r.to_json() for r in self.combined_rules],
            "feature_lookups": [{"spec": spec.to_json(), "trained_version": version}
                                for spec, version in zip(self.lookups, self.lookup_versions, strict=True)],
        }
        (folder / SET_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
        return folder

    @classmethod
    def load(cls, path: str | Path) -> ModelSet:
        """Read a set written by :meth:`save`."""
        folder = Path(path)
        meta = json.loads((folder / SET_FILE).read_text())
        return cls(
            components=tuple((c["name"], FittedChain.load(folder / "components" / c["name"]))
                             for c in meta["components"]),
            composed=tuple(Composed.from_json(c) for c in meta["composed"]),
            combined_rules=tuple(OutputRule.from_json(r) for r in meta["combined_rules"]),
        )


def is_set_folder(path: str | Path) -> bool:
    """True when the saved model folder ``path`` holds a model set (its ``set.json``)."""
    return (Path(path) / SET_FILE).exists()

