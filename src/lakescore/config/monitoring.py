"""config/monitoring.yml: where prediction quality is recorded and when it alerts."""

from __future__ import annotations

from typing import Annotated

from lakescore.config.base import StrictModel, TableName, between


class MonitoringConfig(StrictModel):
    """config/monitoring.yml: the quality table, the labels, and the alert limits."""

    quality_table: TableName
    label_table: TableName | None = None
    label_column: str | None = None
    label_expression: str | None = None
    max_exclusion_rate: Annotated[float, between(0, 1)] = 0.2
    max_invalid_exclusion_rate: Annotated[float, between(0, 1)] = 0.05
    max_psi: Annotated[float, between(0, 100)] = 0.25
