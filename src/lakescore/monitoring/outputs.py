"""Which columns of a prediction table monitoring summarises as predictions: a chain's
``prediction`` (and ``probability``), or each output of a model set.

A model set's rows hold no ``prediction`` column (:mod:`lakescore.model_set`). Its outputs are read
from the publish receipt's ``components`` and the table's columns: each component
(``<component>_prediction``, with ``<component>_probability`` when it is a classifier), then every
other column of the set's answer (composed columns, combined-rule columns), each on its own. A
numeric column is summarised by its value quantiles, a boolean or text one by its class shares.

What a set's quality row does not measure (:data:`SET_NOT_MONITORED`): performance and calibration
against the label table, since monitoring.yml names one label while each component predicts its
own (a component is measured on its holdout at training, in the run's metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

BOOKKEEPING = ("scoring_status", "exclusion_reason", "model_name", "model_version", "run_id")
"""Columns of every prediction table that are not a model's outputs (besides the record keys)."""

SET_NOT_MONITORED = (
    "performance (accuracy, roc_auc, log_loss, rmse, mae) and calibration: monitoring.yml names one "
    "label_column while each component of a model set predicts its own label; each component's holdout "
    "metrics are in its training run")

Kind = Literal["numeric", "label"]


@dataclass(frozen=True)
class Output:
    """One summarised output.

    ``name``: ``""`` for a chain, else the component's name or the output column's;
    ``prediction``: its column; ``probability``: a classifier's probability column (None: none);
    ``label``: summarised by class counts of ``prediction`` (a classifier's, or a boolean or text
    column); the values summarised by quantiles are ``probability``'s, else ``prediction``'s when
    it is not a label.
    """

    name: str
    prediction: str
    probability: str | None = None
    label: bool = False

    @property
    def value_column(self) -> str | None:
        """The column whose values get a sum, count and quantiles (None: a label column alone)."""
        return self.probability or (None if self.label else self.prediction)

    @property
    def value_role(self) -> str:
        """``probability`` or ``prediction``: what the values are, in the figures' names."""
        return "probability" if self.probability else "prediction"


CHAIN = Output("", "prediction", "probability", label=True)


def chain_output(columns: Any) -> Output:
    """A chain's one output: ``prediction``, with ``probability`` (and class counts) for a classifier."""
    return CHAIN if "probability" in columns else Output("", "prediction")


def set_outputs(kinds: dict[str, Kind], receipt: dict[str, Any], keys: list[str]) -> tuple[Output, ...]:
    """A model set's outputs (see the module docstring); empty for a chain's rows.

    Parameters
    ----------
    kinds : dict of str to {"numeric", "label"}
        Each column of the prediction table (the engine reads the kind from its type).
    receipt : dict
        The run's publish receipt; a set's lists ``components`` (each with ``name``).
    keys : list of str
        The record keys (not outputs).

    >>> set_outputs({"id": "numeric", "a_prediction": "numeric", "a_probability": "numeric", "b_prediction": "numeric",
    ...              "risk": "numeric", "flag": "label", "scoring_status": "label"},
    ...             {"components": [{"name": "a"}, {"name": "b"}]}, ["id"])  # doctest: +NORMALIZE_WHITESPACE
    (Output(name='a', prediction='a_prediction', probability='a_probability', label=True),
     Output(name='b', prediction='b_prediction', probability=None, label=False),
     Output(name='risk', prediction='risk', probability=None, label=False),
     Output(name='flag', prediction='flag', probability=None, label=True))
    """
    components = [c["name"] for c in receipt.get("components") or []]
    if not components or "prediction" in kinds:
        return ()
    taken = {*BOOKKEEPING, *keys}
    out = []
    for name in components:
        prediction, probability = f"{name}_prediction", f"{name}_probability"
        has = probability in kinds
        out.append(Output(name, prediction, probability if has else None, label=has))
        taken |= {prediction, probability}
    out += [Output(c, c, None, label=kind == "label") for c, kind in kinds.items() if c not in taken]
    return tuple(out)
