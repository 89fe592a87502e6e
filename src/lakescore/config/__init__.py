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
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo,
                      WrapValidator, model_validator)

from lakescore.errors import ConfigError

TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A table name may write the catalog and schema as ${catalog} / ${schema}; the values come from
# --catalog / --schema (the bundle passes its ${var.catalog} / ${var.schema}), else these defaults,
# which are also the bundle variables' defaults and what the local demo loads into.
# ${source_catalog} / ${source_schema} name where the tables a run only reads live (the score
# source, the training, feature and label tables): --source-catalog / --source-schema, else the
# run's own catalog / schema, so a local run reads and writes one schema.
DEFAULT_CATALOG = "main"
DEFAULT_SCHEMA = "flights"
PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
PLACEHOLDERS = ("catalog", "schema", "source_catalog", "source_schema")
DEFAULT_NAMESPACE = {"catalog": DEFAULT_CATALOG, "schema": DEFAULT_SCHEMA,
                     "source_catalog": DEFAULT_CATALOG, "source_schema": DEFAULT_SCHEMA}


def _between(lo: float, hi: float) -> WrapValidator:
    """A number in [lo, hi]. Booleans and text are refused (YAML ``yes`` or ``"5000"`` are not
    numbers), and a wrong type gets the same message as a wrong value: what is allowed."""

    def check(value: Any, handler: Any) -> Any:
        if isinstance(value, (bool, str)):
            raise ValueError(f"must be a number between {lo} and {hi}")
        try:
            number = handler(value)
        except ValidationError:
            raise ValueError(f"must be a whole number between {lo} and {hi}") from None
        if not lo <= number <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return number

    return WrapValidator(check)


def _table_name(value: str, info: ValidationInfo) -> str:
    """A three-part name, after ``${catalog}`` / ``${schema}`` / ``${source_catalog}`` /
    ``${source_schema}`` are replaced with the run's values."""
    namespace = info.context or DEFAULT_NAMESPACE
    unknown = [m.group(0) for m in PLACEHOLDER.finditer(value) if m.group(1) not in namespace]
    if unknown:
        raise ValueError(f"uses the unknown placeholder {unknown[0]} (write ${{catalog}}, ${{schema}}, "
                         "${source_catalog} or ${source_schema}, or the name itself)")
    resolved = PLACEHOLDER.sub(lambda m: namespace[m.group(1)], value)
    if not TABLE_NAME.match(resolved):
        shown = f" (resolved to {resolved!r})" if resolved != value else ""
        raise ValueError(f"must be a three-part table name catalog.schema.table (letters, digits, _){shown}")
    return resolved


TableName = Annotated[str, AfterValidator(_table_name)]


FIXED_OUTPUTS = ("prediction", "probability", "scoring_status", "exclusion_reason")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --- training.yml ---------------------------------------------------------------------------

class TrainingDefaults(_Strict):
    engine: Literal["pandas", "polars"] = "pandas"
    random_state: int = 42


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


class ThresholdSetting(_Strict):
    """training.yml ``model.threshold`` once read: exactly one of a binary ``value``, ``optimize``
    on the holdout, or a multiclass ``classes`` map (see :mod:`lakescore.thresholds` for the rules)."""

    value: float | None = None
    optimize: Literal["f1", "youden"] | None = None
    classes: dict[Any, float] | None = None


_THRESHOLD_SHAPES = ("must be a number between 0 and 1 (exclusive), {optimize: f1}, {optimize: youden}, "
                     "or {classes: {<label>: <number>, ...}} with one number per class")


def _in_open_unit(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1


def _threshold(value: Any) -> Any:
    """``threshold: 0.35`` | ``{optimize: f1 | youden}`` | ``{classes: {A: 0.5, B: 0.3, ...}}``."""
    if value is None or isinstance(value, ThresholdSetting):
        return value
    if isinstance(value, dict) and set(value) == {"optimize"}:
        if value["optimize"] not in ("f1", "youden"):
            raise ValueError("optimize must be 'f1' (F1 of the positive class) or 'youden' (TPR - FPR)")
        return ThresholdSetting(optimize=value["optimize"])
    if isinstance(value, dict) and set(value) == {"classes"}:
        classes = value["classes"]
        if not isinstance(classes, dict) or len(classes) < 2:
            raise ValueError("classes must map every class label to its threshold (at least two classes)")
        bad = [f"{label}: {t!r}" for label, t in classes.items() if not _in_open_unit(t)]
        if bad:
            raise ValueError(f"classes has {', '.join(bad)}; each class threshold must be a number between 0 and 1 "
                             "(exclusive)")
        return ThresholdSetting(classes={label: float(t) for label, t in classes.items()})
    if not _in_open_unit(value):
        raise ValueError(_THRESHOLD_SHAPES)
    return ThresholdSetting(value=float(value))


class ModelConfig(_Strict):
    class_name: str = Field(alias="class")
    params: dict[str, Any] = Field(default_factory=dict)
    # a classifier's decision threshold (lakescore.thresholds); None: the model's own predict
    threshold: Annotated[ThresholdSetting | None, BeforeValidator(_threshold)] = None
    # the model's input container, sealed in the chain (lakescore.model_input): auto = sparse after a
    # text vectorizer when the model takes sparse input, else dense
    input: Literal["auto", "dense", "sparse"] = "auto"


class RegistryConfig(_Strict):
    model_name: TableName
    alias: str = "champion"


def _one_or_more(value: Any) -> Any:
    """``lookup_key: tailnum`` is ``[tailnum]``."""
    return [value] if isinstance(value, str) else value


def _not_empty(value: list[str]) -> list[str]:
    if not value:
        raise ValueError("must name at least one column")
    return value


class FeatureLookupConfig(_Strict):
    """training.yml ``feature_lookups[i]``, shaped like Databricks Feature Engineering's
    ``FeatureLookup`` (see :class:`lakescore.lookup.FeatureLookup`). ``feature_timestamp_key`` is the
    feature table's timestamp column (FE's timeseries key); it defaults to ``timestamp_lookup_key``."""

    table_name: TableName
    lookup_key: Annotated[list[str], BeforeValidator(_one_or_more), AfterValidator(_not_empty)]
    feature_names: list[str] = Field(min_length=1)
    rename_outputs: dict[str, str] = Field(default_factory=dict)
    timestamp_lookup_key: str | None = None
    feature_timestamp_key: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> FeatureLookupConfig:
        unknown = [name for name in self.rename_outputs if name not in self.feature_names]
        if unknown:
            raise ValueError(f"rename_outputs names {unknown[0]!r}, which is not in feature_names "
                             f"{self.feature_names}; rename only listed features")
        if self.feature_timestamp_key and not self.timestamp_lookup_key:
            raise ValueError(f"feature_timestamp_key {self.feature_timestamp_key!r} needs timestamp_lookup_key "
                             "(the rows' timestamp column) for a point-in-time lookup; add it or delete "
                             "feature_timestamp_key")
        return self

    def spec(self) -> Any:
        """The :class:`lakescore.lookup.FeatureLookup` this entry describes."""
        from lakescore.lookup import FeatureLookup

        return FeatureLookup.from_json(self.model_dump())


def _lookup_outputs(lookups: list[FeatureLookupConfig]) -> list[FeatureLookupConfig]:
    seen: dict[str, str] = {}
    for lookup in lookups:
        for name in (lookup.rename_outputs.get(n, n) for n in lookup.feature_names):
            if name in seen:
                raise ValueError(f"output column {name!r} comes from both {seen[name]} and {lookup.table_name}; "
                                 "rename one with rename_outputs")
            seen[name] = lookup.table_name
    return lookups


COMPONENT_NAME = r"^[a-z][a-z0-9_]*$"


class ComponentConfig(_Strict):
    """training.yml ``model_set.components.<name>``: a full recipe and model, trained on the set's rows.
    ``label_column`` / ``label_expression`` / ``feature_columns`` default to ``data``'s (a set may hold a
    classifier and a regressor of different labels)."""

    preprocessing: list[dict[str, Any]] = Field(default_factory=list)
    model: ModelConfig
    label_column: str | None = None
    label_expression: str | None = None
    feature_columns: list[str] | None = Field(default=None, min_length=1)


def _weights(value: Any) -> Any:
    """``{<component>.<column>: <number>, ...}``: at least one term, each weight a fixed number."""
    if not isinstance(value, dict) or not value:
        raise ValueError("must map <component>.<column> to a fixed number, e.g. {delay_model.probability: 0.7}")
    bad = [f"{k}: {w!r}" for k, w in value.items() if isinstance(w, bool) or not isinstance(w, (int, float))]
    if bad:
        raise ValueError(f"has {', '.join(bad)}; each weight must be a fixed number")
    shapes = [k for k in value if not re.match(r"^[a-z][a-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$", str(k))]
    if shapes:
        raise ValueError(f"names {shapes[0]!r}; each term is <component>.<output column>, e.g. delay_model.probability")
    return {str(k): float(w) for k, w in value.items()}


Weights = Annotated[dict[str, float], BeforeValidator(_weights)]


class ComposedConfig(_Strict):
    """training.yml ``model_set.composed[i]``: a column that is a ``weighted_sum`` (sum of w * x) or a
    ``weighted_mean`` (sum of w * x / sum of w) of component outputs, with fixed weights."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    weighted_sum: Weights | None = None
    weighted_mean: Weights | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ComposedConfig:
        if (self.weighted_sum is None) == (self.weighted_mean is None):
            raise ValueError(f"composed column {self.name!r} needs exactly one of weighted_sum or weighted_mean")
        if self.weighted_mean is not None and sum(self.weighted_mean.values()) == 0:
            raise ValueError(f"composed column {self.name!r}: weighted_mean weights sum to 0; give weights whose "
                             "sum is not 0, or use weighted_sum")
        return self

    @property
    def kind(self) -> str:
        return "weighted_sum" if self.weighted_sum is not None else "weighted_mean"

    @property
    def weights(self) -> dict[str, float]:
        return dict(self.weighted_sum if self.weighted_sum is not None else self.weighted_mean or {})


class ModelSetConfig(_Strict):
    """training.yml ``model_set``: named components trained on the same rows, registered as one version
    (see :mod:`lakescore.model_set`)."""

    components: dict[Annotated[str, Field(pattern=COMPONENT_NAME)], ComponentConfig] = Field(min_length=1)
    composed: list[ComposedConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _terms_name_components(self) -> ModelSetConfig:
        for entry in self.composed:
            unknown = [t for t in entry.weights if t.split(".")[0] not in self.components]
            if unknown:
                raise ValueError(f"composed column {entry.name!r} names {unknown[0]!r}, but the set's components are "
                                 f"{', '.join(self.components)}; name a component")
        names = [entry.name for entry in self.composed]
        clash = [n for n in names if names.count(n) > 1 or n in FIXED_OUTPUTS]
        if clash:
            raise ValueError(f"composed column {clash[0]!r} must be a new name, not repeated and not one of "
                             f"{', '.join(FIXED_OUTPUTS)}")
        return self


class SplitTrainingConfig(_Strict):
    """training.yml ``split_training``: above ``max_rows``, refit the searched configuration on disjoint
    slices of every training row on Spark workers and paste the slice chains into one ensemble
    (see :mod:`lakescore.workflows.split_train`). Below ``min_rows_per_worker`` rows per slice it
    refuses and the sampled fit is registered, saying why."""

    enabled: bool = False
    min_rows_per_worker: Annotated[int, _between(1, 10**9)] = 25000
    max_workers: Annotated[int, _between(2, 10000)] | None = None  # None: as many slices as max_rows asks for


class TrainingConfig(_Strict):
    defaults: TrainingDefaults = TrainingDefaults()
    data: TrainingData
    split: SplitConfig = SplitConfig()
    # the single-process ceiling: above it one process fits a sample of max_rows training rows
    # (or, with split_training, the search on that sample and a refit over every row on the workers)
    max_rows: Annotated[int, _between(1000, 10**10)] | None = None
    split_training: SplitTrainingConfig = SplitTrainingConfig()
    # fixed steps (edits, row filters) run on the whole table before the train/holdout split
    pre_split: list[dict[str, Any]] = Field(default_factory=list)
    # feature tables joined onto the rows by key before the split (lakescore.lookup)
    feature_lookups: Annotated[list[FeatureLookupConfig], AfterValidator(_lookup_outputs)] = Field(default_factory=list)
    preprocessing: list[dict[str, Any]] = Field(default_factory=list)
    model: ModelConfig | None = None  # exactly one of model and model_set
    model_set: ModelSetConfig | None = None
    registry: RegistryConfig

    @model_validator(mode="after")
    def _model_or_set(self) -> TrainingConfig:
        if self.model_set is None and self.model is None:
            raise ValueError("missing required key 'model' (or 'model_set' for several models trained on the same "
                             "rows); add one of them")
        clash = [k for k, v in (("model", self.model), ("preprocessing", self.preprocessing)) if v]
        if self.model_set is not None and clash:
            raise ValueError(f"model_set holds each component's own preprocessing and model, so top-level "
                             f"{' and '.join(clash)} must not be given beside it; move them into "
                             "model_set.components.<name> or delete model_set")
        if self.split_training.enabled:
            self._split_problems()
        return self

    def _split_problems(self) -> None:
        """``split_training.enabled`` needs ``max_rows``, and refits one model without feature lookups."""
        if self.max_rows is None:
            raise ValueError("split_training.enabled needs max_rows (the single-process ceiling: the search's "
                             "sample and each slice's size); set max_rows, e.g. max_rows: 200000, or set "
                             "split_training.enabled: false")
        unsupported = [k for k, v in (("model_set", self.model_set), ("feature_lookups", self.feature_lookups)) if v]
        if unsupported:
            raise ValueError(f"split_training refits one model on rows read by Spark; it does not take "
                             f"{' or '.join(unsupported)} yet; delete {unsupported[0]} or set "
                             "split_training.enabled: false")

    @property
    def is_set(self) -> bool:
        """True when training.yml declares a ``model_set``."""
        return self.model_set is not None


# --- inference.yml --------------------------------------------------------------------------

class PublicationConfig(_Strict):
    """How predictions reach the prediction table (see lakescore.publish)."""

    mode: Literal["incremental", "snapshot"] = "incremental"
    period_column: str | None = None
    source_change_policy: Literal["reject", "rebuild_on_change"] = "reject"
    model_change_mode: Literal["incremental_append", "full_rebuild", "reject"] = "incremental_append"
    allow_empty: bool = False


class InferenceConfig(_Strict):
    job_name: str = "score"
    batch_compute: Literal["spark", "single_node"] = "spark"
    spark_udf_env_manager: Literal["local", "virtualenv"] = "local"
    spark_udf_prediction_batch_rows: Annotated[int, _between(1, 100000)] = 10000
    score_source_table: TableName
    prediction_table: TableName
    score_model_selection: Literal["pinned_version", "champion"] = "champion"
    model_version: Annotated[int, _between(1, 10**9)] | None = None
    publication: PublicationConfig = PublicationConfig()


# --- scoring.yml ----------------------------------------------------------------------------

class RuleConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    function: str
    columns: list[str] = Field(min_length=1)
    version: int = 1
    params: dict[str, Any] = Field(default_factory=dict)


OutputType = Literal["string", "double", "long", "boolean"]


class OutputRuleConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    function: str
    columns: list[str] = Field(default_factory=list)
    outputs: dict[str, OutputType] = Field(min_length=1)
    version: int = 1
    params: dict[str, Any] = Field(default_factory=dict)


def _output_names(rules: list[OutputRuleConfig]) -> list[OutputRuleConfig]:
    seen: set[str] = set()
    for rule in rules:
        for name in rule.outputs:
            if name in FIXED_OUTPUTS or name in seen or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"output column {name!r} of rule {rule.name!r} must be a new name (letters, "
                                 f"digits, _), not repeated and not one of {', '.join(FIXED_OUTPUTS)}")
            seen.add(name)
    return rules


def _mode_allows(mode: str, info: Any) -> str:
    if mode == "pre_split" and info.data.get("eligibility"):
        raise ValueError("with mode 'pre_split' eligibility comes from the pre-split recipe only, but "
                         "eligibility rules are listed; use mode 'combined' to keep both")
    return mode


class ScoringConfig(_Strict):
    module: str = "features.scoring"
    eligibility: list[RuleConfig] = Field(default_factory=list)
    # rules: only the eligibility rules; pre_split: the pre-split recipe's row filters re-applied as
    # eligibility; combined: both (the default: with no pre_split recipe it is the same as rules)
    mode: Annotated[Literal["rules", "pre_split", "combined"], AfterValidator(_mode_allows)] = "combined"
    skip_target_pre_split_steps: bool = True
    output: Annotated[list[OutputRuleConfig], AfterValidator(_output_names)] = Field(default_factory=list)
    # a model set's rules over one row's component outputs (<component>_<column>) and inputs
    combined_rules: Annotated[list[OutputRuleConfig], AfterValidator(_output_names)] = Field(default_factory=list)


# --- monitoring.yml -------------------------------------------------------------------------

class MonitoringConfig(_Strict):
    quality_table: TableName
    label_table: TableName | None = None
    label_column: str | None = None
    label_expression: str | None = None
    max_exclusion_rate: Annotated[float, _between(0, 1)] = 0.2
    max_invalid_exclusion_rate: Annotated[float, _between(0, 1)] = 0.05
    max_psi: Annotated[float, _between(0, 100)] = 0.25


# --- serving.yml ----------------------------------------------------------------------------

# Presets a serving.yml may name with ``profile:``; keys written in the file override them.
SERVING_PROFILES: dict[str, dict[str, Any]] = {
    "experiment": {"replicas": {"min": 0, "max": 1}, "keep_warm": False,
                   "client": {"hold_s": 600, "timeout_s": 660, "deadline_s": 660}},
    "background": {"replicas": {"min": 0, "max": 2}, "keep_warm": False,
                   "client": {"hold_s": 45, "timeout_s": 60, "deadline_s": 600,
                              "retry_waits_s": [15, 30, 60, 120], "durable_job_id": True}},
    "low_latency": {"replicas": {"min": 1, "max": 3}, "keep_warm": True,
                    "client": {"hold_s": 0, "timeout_s": 30, "deadline_s": 30, "retry_waits_s": [1],
                               "retry_only_idempotent": True}},
}


def _under(preset: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    merged = dict(preset)
    for key, value in data.items():
        both = isinstance(value, dict) and isinstance(preset.get(key), dict)
        merged[key] = _under(preset[key], value) if both else value
    return merged


class ReplicasConfig(_Strict):
    min: Annotated[int, _between(0, 64)] = 1
    max: Annotated[int, _between(1, 64)] = 1


class ShadowConfig(_Strict):
    rtol: Annotated[float, _between(0, 1)] = 1e-3  # values within 0.1% agree (lakescore.serving.shadow)
    atol: Annotated[float, _between(0, 1e12)] = 1e-9


class CanaryConfig(_Strict):
    share_percent: Annotated[int, _between(1, 100)] = 5
    max_failure_rate_gap: Annotated[float, _between(0, 1)] = 0.05
    min_requests: Annotated[int, _between(1, 10**6)] = 100
    window_s: Annotated[float, _between(1, 7 * 86400)] = 600


class ServingClientConfig(_Strict):
    hold_s: Annotated[float, _between(0, 3600)] = 60
    timeout_s: Annotated[float, _between(1, 3600)] = 60
    deadline_s: Annotated[float, _between(1, 7 * 86400)] = 300
    retry_waits_s: list[Annotated[float, _between(0, 3600)]] = Field(default_factory=lambda: [15, 30, 60, 120])
    retry_only_idempotent: bool = False
    durable_job_id: bool = False


class ServingConfig(_Strict):
    """config/serving.yml: the warm endpoint (see lakescore.serving)."""

    endpoint_name: str = Field(default="default", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")
    profile: Literal["experiment", "background", "low_latency"] | None = None
    model_selection: Literal["pinned_version", "champion"] = "champion"
    model_version: Annotated[int, _between(1, 10**9)] | None = None
    host: Literal["127.0.0.1"] = "127.0.0.1"
    port: Annotated[int, _between(0, 65535)] = 8765
    inference_table: TableName
    replicas: ReplicasConfig = ReplicasConfig()
    scale_signal: Literal["request_rate", "pending_requests"] = "request_rate"
    target_rpm_per_replica: Annotated[float, _between(0.01, 10**6)] = 120
    target_pending_per_replica: Annotated[float, _between(0.1, 1000)] = 1.5
    scale_interval_s: Annotated[float, _between(0.2, 3600)] = 60
    scale_down_cooldown_s: Annotated[float, _between(0, 86400)] = 180
    idle_timeout_s: Annotated[float, _between(1, 30 * 86400)] = 1800
    keep_warm: bool = False
    max_warm_copies: Annotated[int, _between(1, 256)] = 4
    memory_limit_mb: Annotated[int, _between(64, 1 << 20)] = 2048
    copy_start: Literal["preloaded_fork", "new_process"] = "preloaded_fork"
    request_timeout_s: Annotated[float, _between(0.1, 3600)] = 30
    max_queue: Annotated[int, _between(0, 100000)] = 64
    max_body_bytes: Annotated[int, _between(1024, 1 << 30)] = 1 << 20
    max_rows_per_request: Annotated[int, _between(1, 100000)] = 1000
    retry_after_s: Annotated[int, _between(1, 3600)] = 30
    cold_max_concurrent: Annotated[int, _between(1, 16)] = 2
    cold_timeout_s: Annotated[float, _between(1, 3600)] = 180
    record_flush_rows: Annotated[int, _between(1, 10**6)] = 1000
    record_flush_interval_s: Annotated[float, _between(0.1, 3600)] = 30
    shadow: ShadowConfig = ShadowConfig()
    canary: CanaryConfig = CanaryConfig()
    client: ServingClientConfig = ServingClientConfig()

    @model_validator(mode="before")
    @classmethod
    def _apply_profile(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("profile") in SERVING_PROFILES:
            return _under(SERVING_PROFILES[data["profile"]], data)
        return data


def _serving_problems(serving: ServingConfig, shown: str) -> list[str]:
    problems = []
    if serving.replicas.min > serving.replicas.max:
        problems.append(f"{shown}: replicas.min must be at most replicas.max; got min {serving.replicas.min}, "
                        f"max {serving.replicas.max} (raise max or lower min)")
    if serving.replicas.max > serving.max_warm_copies:
        problems.append(f"{shown}: replicas.max must be at most max_warm_copies; got {serving.replicas.max} > "
                        f"{serving.max_warm_copies} (raise max_warm_copies or lower replicas.max)")
    if serving.model_selection == "pinned_version" and serving.model_version is None:
        problems.append(f"{shown}: model_version is required when model_selection is 'pinned_version'; "
                        "got None (set model_version: N, or use 'champion')")
    return problems


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


_FILES: dict[str, type[_Strict]] = {
    "training": TrainingConfig,
    "inference": InferenceConfig,
    "scoring": ScoringConfig,
    "monitoring": MonitoringConfig,
    "serving": ServingConfig,
}


# keys that were removed: (file model, key path) -> why, and the fix
REMOVED_KEYS: dict[tuple[type[BaseModel], tuple[str, ...]], str] = {
    (TrainingConfig, ("defaults", "allow_tested_custom_steps")):
        "every project already runs every check (lint, probe, certificate) on every custom step; delete the key",
}


def _describe(err: dict[str, Any], model: type[BaseModel]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    if not loc and kind == "value_error":  # a whole-file rule (e.g. model or model_set): its message says it all
        return str(err["msg"]).removeprefix("Value error, ")
    removed = REMOVED_KEYS.get((model, tuple(str(p) for p in err["loc"])))
    if kind == "extra_forbidden" and removed:
        return f"key '{loc}' was removed: {removed}; got {err.get('input')!r}"
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
        if isinstance(part, int):  # an item of a list: its element type
            args = [a for a in get_args(current) if hasattr(a, "model_fields")]
            current = args[0] if args else None
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    fields = getattr(current, "model_fields", {})
    return [f.alias or name for name, f in fields.items()]


def load_file(path: Path, model: type[_Strict], problems: list[str], *,
              namespace: dict[str, str] | None = None) -> Any:
    """Read and validate one YAML file, appending every problem to ``problems``.

    ``namespace`` holds the values of the placeholders in table names (``PLACEHOLDERS``; default
    ``DEFAULT_NAMESPACE``: ``DEFAULT_CATALOG`` / ``DEFAULT_SCHEMA`` for both pairs).
    Returns the validated model, or None when the file has problems.
    """
    shown = f"{path.parent.resolve().name}/{path.name}"
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
        return model.model_validate(raw, context=namespace)
    except ValidationError as err:
        problems.extend(f"{shown}: {_describe(e, model)}" for e in err.errors())
        return None


def _namespace(given: dict[str, str | None], problems: list[str]) -> dict[str, str]:
    """The placeholder values; a value that is not an identifier is a problem (and the default stands in).

    ``source_catalog`` / ``source_schema`` not given take the run's ``catalog`` / ``schema``."""
    namespace = dict(DEFAULT_NAMESPACE)
    for key in PLACEHOLDERS:
        value = given.get(key)
        if value is None:
            if key.startswith("source_"):
                namespace[key] = namespace[key.removeprefix("source_")]
            continue
        if IDENTIFIER.match(value):
            namespace[key] = value
        else:
            flag = "--" + key.replace("_", "-")
            problems.append(f"{flag} must be a Unity Catalog name of letters, digits and _ (not starting with "
                            f"a digit); got {value!r} (set the bundle variable {key} to such a name)")
    return namespace


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
    namespace = _namespace({"catalog": catalog, "schema": schema, "source_catalog": source_catalog,
                            "source_schema": source_schema}, problems)
    loaded = {name: load_file(root / f"{name}.yml", model, problems, namespace=namespace)
              for name, model in _FILES.items()}
    inference = loaded["inference"]
    if isinstance(inference, InferenceConfig):
        if inference.score_model_selection == "pinned_version" and inference.model_version is None:
            problems.append(
                f"{root.name}/inference.yml: model_version is required when score_model_selection "
                "is 'pinned_version'; got None (set model_version: N, or use 'champion')"
            )
        if inference.publication.mode == "snapshot" and not inference.publication.period_column:
            problems.append(
                f"{root.name}/inference.yml: publication.period_column is required when publication.mode "
                "is 'snapshot'; got None (name the source's timestamp or date column, or use 'incremental')"
            )
    if isinstance(loaded["serving"], ServingConfig):
        problems += _serving_problems(loaded["serving"], f"{root.name}/serving.yml")
    if problems:
        raise ConfigError(problems)
    return ProjectConfig(config_dir=root, **loaded, **namespace)  # type: ignore[arg-type]
