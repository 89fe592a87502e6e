"""What a publish did (:class:`PublishResult`), and the counts its receipt carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class PublishResult:
    """What a publish did: the decision's message, the table version after, and the receipt."""

    table: str
    action: str
    message: str
    table_version: int | None
    receipt: dict[str, Any] | None

    def summary(self) -> dict[str, Any]:
        return {"table": self.table, "action": self.action, "message": self.message,
                "table_version": self.table_version, "receipt": self.receipt}


def counts(data: pa.Table) -> dict[str, int]:
    """rows_in, predicted and excluded of the predictions (as ``ScoredRun.counts``, from Arrow)."""
    predicted = int(pc.sum(pc.equal(data["scoring_status"], "predicted")).as_py() or 0)
    excluded = int(pc.sum(pc.equal(data["scoring_status"], "excluded")).as_py() or 0)
    return {"rows_in": data.num_rows, "predicted": predicted, "excluded": excluded}
