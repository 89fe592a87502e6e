"""Shadow: a candidate version answers a mirror of every request, and is compared, never served.

Each compared answer column is a ``label`` (compared exactly) or a ``value`` (compared within
``|a - b| <= atol + rtol * |b|``, ``shadow.rtol`` and ``shadow.atol``; b is the served answer).
The defaults, ``rtol 1e-3`` and ``atol 1e-9``, read two versions whose values differ by less than
0.1% as agreeing: refits on the same rows differ in the last digits (two Ridge fits differed by
4e-6 relative), and an exact comparison would read such indistinguishable models as disagreeing.
A chain compares ``prediction``: a label for classification, a value for regression. A model set
compares every numeric and label column of its answer (:func:`compared_columns`): each component's
``<component>_prediction`` (label or value by its task) and ``<component>_probability`` (value),
its composed columns (values) and its combined-rule columns (``double`` a value, the others
labels). A row agrees when every compared column agrees; each column is also counted on its own.
A null agrees only with a null, so a row both versions exclude agrees and a row one excludes and
the other predicts does not. Tasks without a comparable answer (clustering, anomaly detection,
recommendation) refuse to start. Below 100 compared rows the status gives no figure and says how
many more rows it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from lakescore.errors import ServingConflictError

MIN_COMPARED_ROWS = 100
COMPARABLE_TASKS = ("classification", "regression", "model_set")
MAX_EXAMPLES = 20
Kind = Literal["label", "value"]


def check_comparable(task: str, version: int) -> None:
    """Refuse a shadow for a task whose answers cannot be compared row by row.

    Raises
    ------
    ServingConflictError
        For any task other than classification, regression or a model set.
    """
    if task not in COMPARABLE_TASKS:
        raise ServingConflictError(
            f"candidate v{version} is a {task} model; shadow compares classification labels or regression "
            "values only, so it will not start. Evaluate this candidate offline, then redeploy.")


def _prediction_kind(task: str) -> dict[str, Kind]:
    """A chain's compared column of ``task``: ``prediction``, a label or a value (none for other tasks)."""
    kinds: dict[str, dict[str, Kind]] = {"classification": {"prediction": "label"},
                                         "regression": {"prediction": "value"}}
    return dict(kinds.get(task, {}))


def compared_columns(saved: dict[str, Any]) -> dict[str, Kind]:
    """Answer column -> ``label`` | ``value`` that a shadow compares, from a version's saved
    description (``chain.json``, or a model set's ``set.json`` with ``task`` ``model_set``).

    >>> compared_columns({"task": "regression"})
    {'prediction': 'value'}
    >>> compared_columns({"task": "model_set", "components": [{"name": "a", "task": "classification"}],
    ...                   "composed": [{"name": "risk"}],
    ...                   "combined_rules": [{"outputs": [["flag", "boolean"], ["score", "double"]]}]})
    {'a_prediction': 'label', 'a_probability': 'value', 'risk': 'value', 'flag': 'label', 'score': 'value'}
    """
    if saved["task"] != "model_set":
        return _prediction_kind(saved["task"])
    columns: dict[str, Kind] = {}
    for component in saved["components"]:
        for column, kind in _prediction_kind(component["task"]).items():
            columns[f"{component['name']}_{column}"] = kind
        if component["task"] == "classification":
            columns[f"{component['name']}_probability"] = "value"
    columns.update({c["name"]: "value" for c in saved.get("composed", [])})
    for rule in saved.get("combined_rules", []):
        columns.update({name: "value" if kind == "double" else "label" for name, kind in rule["outputs"]})
    return columns


def values_agree(candidate: Any, served: Any, *, kind: Kind, rtol: float, atol: float) -> bool:
    """Whether one column's candidate value agrees with the served one (see the module docstring)."""
    if candidate is None or served is None:
        return candidate is None and served is None
    if kind == "value":
        return math.isclose(float(candidate), float(served), rel_tol=0, abs_tol=atol + rtol * abs(float(served)))
    return bool(candidate == served)


def rows_agree(served: dict[str, Any], candidate: dict[str, Any], *, task: str, rtol: float, atol: float) -> bool:
    """Whether a chain's candidate row agrees with the served row on ``prediction``."""
    kind: Kind = "value" if task == "regression" else "label"
    return values_agree(candidate.get("prediction"), served.get("prediction"), kind=kind, rtol=rtol, atol=atol)


@dataclass
class ShadowTally:
    """Running totals of one candidate against the served version.

    ``columns`` (answer column -> ``label`` | ``value``, :func:`compared_columns`) defaults to the
    chain's ``prediction`` of ``task``.
    """

    candidate_version: int
    served_version: int
    task: str
    rtol: float
    atol: float
    columns: dict[str, Kind] = field(default_factory=dict)
    compared: int = 0
    agreed: int = 0
    mirror_failures: int = 0
    skipped: int = 0
    column_agreed: dict[str, int] = field(default_factory=dict)
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.columns = dict(self.columns) or _prediction_kind(self.task) or {"prediction": "label"}
        self.column_agreed = {c: self.column_agreed.get(c, 0) for c in self.columns}

    def add(self, served_rows: list[dict[str, Any]], candidate_rows: list[dict[str, Any]], *,
            request_id: str) -> None:
        """Compare one mirrored request row by row (keeps the first 20 disagreeing values as examples).

        Each example names the request (``request_id``, as in the reply's ``X-Request-Id`` and the
        inference table), the row's position in it (``row``, 0-based, the table's ``row_index``)
        and the ``column`` whose values differ, so a disagreement can be traced to the recorded inputs.
        """
        for i, (served, cand) in enumerate(zip(served_rows, candidate_rows)):
            self.compared += 1
            whole = True
            for column, kind in self.columns.items():
                a, b = cand.get(column), served.get(column)
                if values_agree(a, b, kind=kind, rtol=self.rtol, atol=self.atol):
                    self.column_agreed[column] += 1
                    continue
                whole = False
                if len(self.disagreements) < MAX_EXAMPLES:
                    self.disagreements.append({"request_id": request_id, "row": i, "column": column,
                                               "served": b, "candidate": a})
            self.agreed += whole

    def _percent(self, agreed: int) -> float | None:
        return None if self.compared < MIN_COMPARED_ROWS else round(100.0 * agreed / self.compared, 3)

    def sentence(self) -> str:
        """The status line, e.g. ``candidate v3 agreed with v2 on 97.4% of 1,208 compared rows``; with
        several compared columns, the least agreeing one is named when it is under 100%
        (``...; lowest column: late_risk 81.0%``); with value columns, the tolerance they are
        compared within (``...; values agree within 1e-09 + 0.001 x |served|``)."""
        c, s = self.candidate_version, self.served_version
        if self.compared < MIN_COMPARED_ROWS:
            more = MIN_COMPARED_ROWS - self.compared
            return (f"candidate v{c} has {self.compared:,} compared rows against v{s}; no agreement figure below "
                    f"{MIN_COMPARED_ROWS} rows: {more:,} more needed")
        share = 100.0 * self.agreed / self.compared
        line = f"candidate v{c} agreed with v{s} on {share:.1f}% of {self.compared:,} compared rows"
        lowest = min(self.column_agreed, key=lambda k: self.column_agreed[k])
        if len(self.columns) > 1 and self.column_agreed[lowest] < self.compared:
            line += f"; lowest column: {lowest} {100.0 * self.column_agreed[lowest] / self.compared:.1f}%"
        if "value" in self.columns.values():
            line += f"; values agree within {self.atol:g} + {self.rtol:g} x |served|"
        return line

    def summary(self) -> dict[str, Any]:
        return {"sentence": self.sentence(), "candidate_version": self.candidate_version,
                "served_version": self.served_version, "compared_rows": self.compared,
                "agreed_rows": self.agreed, "agreement_percent": self._percent(self.agreed),
                "columns": {c: {"kind": kind, "agreed_rows": self.column_agreed[c],
                                "agreement_percent": self._percent(self.column_agreed[c])}
                            for c, kind in self.columns.items()},
                "mirror_failures": self.mirror_failures, "skipped_requests": self.skipped,
                "disagreement_examples": self.disagreements[:5]}
