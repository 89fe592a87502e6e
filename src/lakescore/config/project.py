"""One project's config/*.yml, read and validated together.

Every file is read and checked before any work starts, and every problem across all files is
collected into one :class:`~lakescore.errors.ConfigError` (pandera's lazy validation).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lakescore.config.base import DEFAULT_CATALOG, DEFAULT_SCHEMA, StrictModel, load_file, namespace_of
from lakescore.config.inference import InferenceConfig, inference_problems
from lakescore.config.monitoring import MonitoringConfig
from lakescore.config.scoring import ScoringConfig
from lakescore.config.serving import ServingConfig, serving_problems
from lakescore.config.training import TrainingConfig
from lakescore.errors import ConfigError


@dataclass(frozen=True)
class ProjectConfig:
    """All of one project's config files, validated together."""

    config_dir: Path
    training: TrainingConfig
    inference: InferenceConfig
    scoring: ScoringConfig
    monitoring: MonitoringConfig
    serving: ServingConfig | None = None
    catalog: str = DEFAULT_CATALOG  # what ${catalog} and ${schema} stood for in the table names
    schema: str = DEFAULT_SCHEMA
    source_catalog: str = DEFAULT_CATALOG  # what ${source_catalog} and ${source_schema} stood for
    source_schema: str = DEFAULT_SCHEMA

    def shown(self, name: str) -> str:
        """How messages name one of this project's files, e.g. ``config/training.yml``."""
        return f"{self.config_dir.resolve().name}/{name}.yml"


_FILES: dict[str, type[StrictModel]] = {
    "training": TrainingConfig,
    "inference": InferenceConfig,
    "scoring": ScoringConfig,
    "monitoring": MonitoringConfig,
    "serving": ServingConfig,
}


def load_project(config_dir: str | Path = "config", *, catalog: str | None = None,
                 schema: str | None = None, source_catalog: str | None = None,
                 source_schema: str | None = None) -> ProjectConfig:
    """Load and validate every config file of a project.

    Table names may write their catalog and schema as ``${catalog}`` and ``${schema}``, e.g.
    ``prediction_table: ${catalog}.${schema}.late_arrival_predictions``; this is how the bundle's
    ``catalog`` / ``schema`` variables (passed by its jobs as ``--catalog`` / ``--schema``) choose
    the tables each target writes. Tables a run only reads (the score source, the training, feature
    and label tables) may write ``${source_catalog}.${source_schema}`` instead, so that a target
    reads shared source tables and writes its own (the bundle's ``source_catalog`` /
    ``source_schema`` variables, passed as ``--source-catalog`` / ``--source-schema``). A name
    written out in full is used as it is.

    Parameters
    ----------
    config_dir : str or Path, default "config"
        Folder holding training.yml, inference.yml, scoring.yml, monitoring.yml and serving.yml.
    catalog : str, optional
        Value of ``${catalog}``; default ``DEFAULT_CATALOG`` ("main").
    schema : str, optional
        Value of ``${schema}``; default ``DEFAULT_SCHEMA`` ("flights").
    source_catalog, source_schema : str, optional
        Values of ``${source_catalog}`` / ``${source_schema}``; default the resolved ``catalog`` /
        ``schema`` (so without them a run reads and writes one schema).

    Returns
    -------
    ProjectConfig

    Raises
    ------
    ConfigError
        Listing every problem in every file (missing or misspelled keys, out-of-range values, unknown
        placeholders, cross-file mismatches), each naming the file, the key, the bad value and what
        is allowed; a catalog or schema that is not a plain identifier is listed with them.
    """
    root = Path(config_dir)
    problems: list[str] = []
    namespace = namespace_of({"catalog": catalog, "schema": schema, "source_catalog": source_catalog,
                              "source_schema": source_schema}, problems)
    loaded = {name: load_file(root / f"{name}.yml", model, problems, namespace=namespace)
              for name, model in _FILES.items()}
    inference = loaded["inference"]
    if isinstance(inference, InferenceConfig):
        problems += inference_problems(inference, f"{root.name}/inference.yml")
    serving = loaded["serving"]
    if isinstance(serving, ServingConfig):
        problems += serving_problems(serving, f"{root.name}/serving.yml")
    if problems:
        raise ConfigError(problems)
    return ProjectConfig(config_dir=root, **loaded, **namespace)  # type: ignore[arg-type]
