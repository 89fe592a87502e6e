"""Scoring rules. An eligibility rule looks at the raw request row and says whether it may be
scored; a row it refuses is excluded with ``ineligible:<rule>`` and gets no prediction.

A rule function has the signature ``fn(frame: DataFrame, params: dict) -> boolean Series``
(True = eligible); it receives a copy of the rule's declared ``columns`` only, is row-local, and is
saved by name, version, source, columns and parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lakescore.errors import InputError
from lakescore.usercode import FunctionRef


@dataclass(frozen=True)
class EligibilityRule:
    """A saved eligibility rule."""

    name: str
    version: int
    function: FunctionRef
    columns: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)

    def eligible(self, frame: pd.DataFrame) -> np.ndarray:
        """Boolean array of shape (n_rows,): True where the row may be scored.

        Raises
        ------
        InputError
            When the rule does not return one boolean per row.
        """
        result = self.function.load()(frame[list(self.columns)].copy(), dict(self.params))
        values = np.asarray(pd.Series(result).fillna(False), dtype=bool) if result is not None else None
        if values is None or values.shape != (len(frame),):
            raise InputError(
                f"eligibility rule '{self.name}' returned {type(result).__name__} of shape "
                f"{getattr(values, 'shape', None)}; it must return one boolean per row "
                f"({len(frame)} rows). Return a boolean Series aligned with the frame."
            )
        return values

    @property
    def reason(self) -> str:
        return f"ineligible:{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "function": self.function.to_json(),
                "columns": list(self.columns), "params": self.params}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EligibilityRule:
        return cls(data["name"], data["version"], FunctionRef.from_json(data["function"]),
                   tuple(data["columns"]), data["params"])


def load_rules(scoring: Any) -> list[EligibilityRule]:
    """Build the eligibility rules named in config/scoring.yml (a :class:`ScoringConfig`)."""
    rules = []
    for rule in scoring.eligibility:
        dotted = rule.function if ":" in rule.function else f"{scoring.module}:{rule.function}"
        ref = FunctionRef.resolve_name(dotted, what=f"eligibility rule '{rule.name}'")
        rules.append(EligibilityRule(rule.name, rule.version, ref, tuple(rule.columns), dict(rule.params)))
    return rules
