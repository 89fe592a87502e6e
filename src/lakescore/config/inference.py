"""config/inference.yml: what the score job reads, how it scores, which version, how it publishes."""

from __future__ import annotations

from typing import Annotated, Literal

from lakescore.config.base import ModelSelection, StrictModel, TableName, between

# batch_compute: the scoring route (Spark workers, or one whole frame in this process)
BatchCompute = Literal["spark", "single_node"]
# spark_udf_env_manager: mlflow spark_udf's env_manager on the workers
EnvManager = Literal["local", "virtualenv"]
# publication.mode: append what is new, or replace a snapshot's UTC days (lakescore.publish.plan)
PublicationMode = Literal["incremental", "snapshot"]
# publication.source_change_policy: an update or delete in the source window
SourceChangePolicy = Literal["reject", "rebuild_on_change"]
# publication.model_change_mode: a new model version against an existing prediction table
ModelChangeMode = Literal["incremental_append", "full_rebuild", "reject"]


class PublicationConfig(StrictModel):
    """How predictions reach the prediction table (see lakescore.publish)."""

    mode: PublicationMode = "incremental"
    period_column: str | None = None
    source_change_policy: SourceChangePolicy = "reject"
    model_change_mode: ModelChangeMode = "incremental_append"
    allow_empty: bool = False


class InferenceConfig(StrictModel):
    """config/inference.yml: the score job (source, prediction table, route, model version, publication)."""

    job_name: str = "score"
    batch_compute: BatchCompute = "spark"
    spark_udf_env_manager: EnvManager = "local"
    spark_udf_prediction_batch_rows: Annotated[int, between(1, 100000)] = 10000
    score_source_table: TableName
    prediction_table: TableName
    score_model_selection: ModelSelection = "champion"
    model_version: Annotated[int, between(1, 10**9)] | None = None
    publication: PublicationConfig = PublicationConfig()


def inference_problems(inference: InferenceConfig, shown: str) -> list[str]:
    """The rules between inference.yml's keys: a pinned version needs ``model_version``, a snapshot
    needs ``publication.period_column``. ``shown`` names the file in messages."""
    problems = []
    if inference.score_model_selection == "pinned_version" and inference.model_version is None:
        problems.append(
            f"{shown}: model_version is required when score_model_selection "
            "is 'pinned_version'; got None (set model_version: N, or use 'champion')"
        )
    if inference.publication.mode == "snapshot" and not inference.publication.period_column:
        problems.append(
            f"{shown}: publication.period_column is required when publication.mode "
            "is 'snapshot'; got None (name the source's timestamp or date column, or use 'incremental')"
        )
    return problems
