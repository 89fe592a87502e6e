"""A probe check's result, and the one fix each family of checks points to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FIXES = {
    "repeat": "Fix random_state (or any randomness) so a second call gives the same answer.",
    "chunks": "Use a stable dtype or another setting, so a row's answer does not depend on its batch.",
    "reverse": "Read column values only, never the row order.",
    "index_shift": "Read column values only, never the index.",
    "empty": "Report it: a part must return no rows, with the same columns and dtypes, for no rows.",
    "perturb": "Use a setting that handles unseen values row by row (e.g. handle_unknown: ignore).",
    "blank": "Fill a missing value from a value learned in learn() and kept in state, never from other rows "
             "(ffill, bfill, interpolate, batch statistics).",
    "agree": "The compiled plan gives another answer than the step-by-step walk: a step's kernel differs from "
             "its reference apply (a lakescore defect: report it with this message; kernels are named in "
             "partition_probe.json), or a rule or user step reads something the plan hands it differently.",
    "json_round_trip": "Keep the state to numbers, strings, lists, dicts and numeric arrays (learn()'s return "
                       "value), so it reloads exactly and gives the same answers.",
    "dtypes": "Fix each output column's dtype from the state or the config (e.g. cast to Float64 or Int64), never "
              "from the values a batch holds.",
    "fresh_module": "Keep everything apply() reads in the saved state (learn()'s return value), never in module "
                    "variables that training or scoring changes.",
}


@dataclass(frozen=True)
class CheckResult:
    """One check of one part; ``column`` names the output column to blame, when one is."""

    part: str
    check: str
    status: Literal["passed", "failed", "skipped"]
    reason: str = ""
    column: str = ""

    @property
    def message(self) -> str:
        """The part, the check, the reason and the fix of the check's family."""
        return self._message(self.reason)

    @property
    def located_message(self) -> str:
        """:attr:`message` naming the output column to blame, when there is one."""
        return self._message(f"{self.reason} in column '{self.column}'" if self.column else self.reason)

    def _message(self, reason: str) -> str:
        family = "blank" if self.reason.startswith("blank") else self.check.split(":")[0]
        return f"{self.part} partition probe failed {self.check}: {reason}. {FIXES.get(family, '')}".strip()

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "reason": self.reason}
