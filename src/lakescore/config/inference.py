"""config/inference.yml: what the score job reads, how it scores, which version, how it publishes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator

from lakescore.config.base import ModelSelection, StrictModel, TableName, between

# batch_compute: the scoring route (Spark workers, or one whole frame in this process)
BatchCompute = Literal["spark", "single_node"]
# spark_udf_env_manager: mlflow spark_udf's env_manager on the workers (virtualenv is refused: below)
EnvManager = Literal["local", "virtualenv"]


def _restorable(env_manager: EnvManager) -> EnvManager:
    """``virtualenv`` cannot restore a lakescore model's environment (docs/deploy.md, "virtualenv on
    a policy cluster"): MLflow pip-installs the model's logged requirements.txt on every worker, and
    it names the project's own wheel (``lakescore==<version>``), which no package index has."""
    if env_manager == "virtualenv":
        raise ValueError(
            "'virtualenv' cannot restore a lakescore model's environment: MLflow would pip-install the "
            "model's requirements.txt on every worker, and it names the project's own wheel "
            "(lakescore==<version>), which is on no package index (besides pyenv, virtualenv and PyPI on "
            "every worker). Use local: the bundle installs the wheel on every worker (cluster library or job "
            "environment) and each worker re-checks the certificate's library versions")
    return env_manager
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
    spark_udf_env_manager: Annotated[EnvManager, AfterValidator(_restorable)] = "local"
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
