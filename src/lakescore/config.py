"""Typed, validated config/*.yml.

Every file is read and checked before any work starts, and every problem across all files is
collected into one :class:`~lakescore.errors.ConfigError` (pandera's lazy validation), each as
``config/inference.yml: spark_udf_prediction_batch_rows must be between 1 and 100000; got 0``.
Key names are a contract with users; unknown keys are errors with a "did you mean" hint.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from lakescore.errors import ConfigError

TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")


def _between(lo: float, hi: float) -> AfterValidator:
    def check(value: float) -> float:
        if not lo <= value <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return value

    return AfterValidator(check)


def _table_name(value: str) -> str:
    if not TABLE_NAME.match(value):
        raise ValueError("must be a three-part table name catalog.schema.table (letters, digits, _)")
    return value


TableName = Annotated[str, AfterValidator(_table_name)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --- training.yml ---------------------------------------------------------------------------

class TrainingDefaults(_Strict):
    engine: Literal["pandas", "polars"] = "pandas"
    random_state: int = 42
    allow_tested_custom_steps: bool = False


class TrainingData(_Strict):
    table: TableName
    filter: str | None = None
    label_column: str
    label_expression: str | None = None
    record_keys: list[str] = Field(min_length=1)
    feature_columns: list[str] = Field(min_length=1)


class SplitConfig(_Strict):
    holdout_fraction: Annotated[float, _between(0.01, 0.9)] = 0.2
    random_state: int = 42


class ModelConfig(_Strict):
    class_name: str = Field(alias="class")
    params: dict[str, Any] = Field(default_factory=dict)


class RegistryConfig(_Strict):
    model_name: TableName
    alias: str = "champion"


class TrainingConfig(_Strict):
    defaults: TrainingDefaults = TrainingDefaults()
    data: TrainingData
    split: SplitConfig = SplitConfig()
    preprocessing: list[dict[str, Any]] = Field(default_factory=list)
    model: ModelConfig
    registry: RegistryConfig


# --- inference.yml --------------------------------------------------------------------------

class InferenceConfig(_Strict):
    job_name: str = "score"
    batch_compute: Literal["spark", "single_node"] = "spark"
    spark_udf_env_manager: Literal["local", "virtualenv"] = "local"
    spark_udf_prediction_batch_rows: Annotated[int, _between(1, 100000)] = 10000
    score_source_table: TableName
    prediction_table: TableName
    score_model_selection: Literal["pinned_version", "champion"] = "champion"
    model_version: Annotated[int, _between(1, 10**9)] | None = None


# --- scoring.yml ----------------------------------------------------------------------------

class RuleConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    function: str
    columns: list[str] = Field(min_length=1)
    version: int = 1
    params: dict[str, Any] = Field(default_factory=dict)


class ScoringConfig(_Strict):
    module: str = "features.scoring"
    eligibility: list[RuleConfig] = Field(default_factory=list)


# --- monitoring.yml -------------------------------------------------------------------------

class MonitoringConfig(_Strict):
    quality_table: TableName
    label_table: TableName | None = None
    label_column: str | None = None
    label_expression: str | None = None
    max_exclusion_rate: Annotated[float, _between(0, 1)] = 0.2


@dataclass(frozen=True)
class ProjectConfig:
    """All of one project's config files, validated together."""

    config_dir: Path
    training: TrainingConfig
    inference: InferenceConfig
    scoring: ScoringConfig
    monitoring: MonitoringConfig


_FILES: dict[str, type[_Strict]] = {
    "training": TrainingConfig,
    "inference": InferenceConfig,
    "scoring": ScoringConfig,
    "monitoring": MonitoringConfig,
}


def _describe(err: dict[str, Any], model: type[BaseModel]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _fields_at(model, err["loc"][:-1])
        hint = difflib.get_close_matches(str(err["loc"][-1]), parent, n=1)
        fix = f"did you mean '{hint[0]}'?" if hint else f"allowed keys: {', '.join(sorted(parent))}"
        return f"unknown key '{loc}' ({fix})"
    if kind == "missing":
        return f"missing required key '{loc}'"
    msg = err["msg"]
    msg = msg.removeprefix("Value error, ")
    if kind == "literal_error":
        msg = "must be " + msg.removeprefix("Input should be ")
    return f"{loc} {msg}; got {err.get('input')!r}"


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    fields = getattr(current, "model_fields", {})
    return [f.alias or name for name, f in fields.items()]


def load_file(path: Path, model: type[_Strict], problems: list[str]) -> Any:
    """Read and validate one YAML file, appending every problem to ``problems``.

    Returns the validated model, or None when the file has problems.
    """
    shown = f"{path.parent.name}/{path.name}"
    if not path.exists():
        problems.append(f"{shown}: file not found; create it (see the template in config/)")
        return None
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        problems.append(f"{shown}: not valid YAML ({err}); fix the syntax")
        return None
    if not isinstance(raw, dict):
        problems.append(f"{shown}: must be a mapping of keys; got {type(raw).__name__}")
        return None
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        problems.extend(f"{shown}: {_describe(e, model)}" for e in err.errors())
        return None


def load_project(config_dir: str | Path = "config") -> ProjectConfig:
    """Load and validate every config file of a project.

    Parameters
    ----------
    config_dir : str or Path, default "config"
        Folder holding training.yml, inference.yml, scoring.yml and monitoring.yml.

    Returns
    -------
    ProjectConfig

    Raises
    ------
    ConfigError
        Listing every problem in every file (missing or misspelled keys, out-of-range values,
        cross-file mismatches), each naming the file, the key, the bad value and what is allowed.
    """
    root = Path(config_dir)
    problems: list[str] = []
    loaded = {name: load_file(root / f"{name}.yml", model, problems) for name, model in _FILES.items()}
    inference = loaded["inference"]
    if isinstance(inference, InferenceConfig):
        if inference.score_model_selection == "pinned_version" and inference.model_version is None:
            problems.append(
                f"{root.name}/inference.yml: model_version is required when score_model_selection "
                "is 'pinned_version'; got None (set model_version: N, or use 'champion')"
            )
    if problems:
        raise ConfigError(problems)
    return ProjectConfig(config_dir=root, **loaded)  # type: ignore[arg-type]
