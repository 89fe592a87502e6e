"""Shadow: a candidate version answers a mirror of every request, and is compared, never served.

Classification compares labels exactly; regression compares predictions within
``|a - b| <= atol + rtol * |b|`` (``shadow.rtol``, ``shadow.atol``; b is the served answer). A row
both versions exclude agrees; a row one excludes and the other predicts does not. Tasks without a
comparable answer (clustering, anomaly detection, recommendation) refuse to start. Below 100
compared rows the status gives no figure and says how many more rows it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lakescore.errors import ServingConflictError

MIN_COMPARED_ROWS = 100
COMPARABLE_TASKS = ("classification", "regression")


def check_comparable(task: str, version: int) -> None:
    """Refuse a shadow for a task whose answers cannot be compared row by row.

    Raises
    ------
    ServingConflictError
        For any task other than classification or regression.
    """
    if task not in COMPARABLE_TASKS:
        raise ServingConflictError(
            f"candidate v{version} is a {task} model; shadow compares classification labels or regression "
            "values only, so it will not start. Evaluate this candidate offline, then redeploy.")


def rows_agree(served: dict[str, Any], candidate: dict[str, Any], *, task: str, rtol: float, atol: float) -> bool:
    """Whether the candidate's row agrees with the served row (see the module docstring)."""
    a, b = candidate.get("prediction"), served.get("prediction")
    if a is None or b is None:
        return a is None and b is None
    if task == "regression":
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=atol + rtol * abs(float(b)))
    return a == b


@dataclass
class ShadowTally:
    """Running totals of one candidate against the served version."""

    candidate_version: int
    served_version: int
    task: str
    rtol: float
    atol: float
    compared: int = 0
    agreed: int = 0
    mirror_failures: int = 0
    skipped: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def add(self, served_rows: list[dict[str, Any]], candidate_rows: list[dict[str, Any]], *,
            request_id: str) -> None:
        """Compare one mirrored request row by row (keeps the first 20 disagreements as examples).

        Each example names the request (``request_id``, as in the reply's ``X-Request-Id`` and the
        inference table) and the row's position in it (``row``, 0-based, the table's ``row_index``),
        so a disagreement can be traced to the recorded inputs.
        """
        for i, (served, cand) in enumerate(zip(served_rows, candidate_rows)):
            self.compared += 1
            if rows_agree(served, cand, task=self.task, rtol=self.rtol, atol=self.atol):
                self.agreed += 1
            elif len(self.disagreements) < 20:
                self.disagreements.append({"request_id": request_id, "row": i, "served": served.get("prediction"),
                                           "candidate": cand.get("prediction")})

    def sentence(self) -> str:
        """The status line, e.g. ``candidate v3 agreed with v2 on 97.4% of 1,208 compared rows``."""
        c, s = self.candidate_version, self.served_version
        if self.compared < MIN_COMPARED_ROWS:
            more = MIN_COMPARED_ROWS - self.compared
            return (f"candidate v{c} has {self.compared:,} compared rows against v{s}; no agreement figure below "
                    f"{MIN_COMPARED_ROWS} rows: {more:,} more needed")
        share = 100.0 * self.agreed / self.compared
        return f"candidate v{c} agreed with v{s} on {share:.1f}% of {self.compared:,} compared rows"

    def summary(self) -> dict[str, Any]:
        figure = None if self.compared < MIN_COMPARED_ROWS else round(100.0 * self.agreed / self.compared, 3)
        return {"sentence": self.sentence(), "candidate_version": self.candidate_version,
                "served_version": self.served_version, "compared_rows": self.compared,
                "agreed_rows": self.agreed, "agreement_percent": figure, "mirror_failures": self.mirror_failures,
                "skipped_requests": self.skipped, "disagreement_examples": self.disagreements[:5]}
