"""config/training.yml: the training rows, the recipe, the model or model set, the registry entry."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from lakescore.config.base import FIXED_OUTPUTS, StrictModel, TableName, between
from lakescore.usercode import former_package_problem

if TYPE_CHECKING:  # annotations only: a worker that reads a config needs no lookup machinery
    from lakescore.lookup import FeatureLookup

# defaults.engine: the frame library the rows are read into and the chain is fitted on
FrameEngine = Literal["pandas", "polars"]
# model.threshold.optimize: the holdout measure a binary threshold maximises (lakescore.thresholds)
ThresholdOptimize = Literal["f1", "youden"]
# model.input: the model's input container (lakescore.model_input.choose turns auto into dense or sparse)
ModelInputSetting = Literal["auto", "dense", "sparse"]
# model_set.composed[i]: how a composed column combines component outputs (lakescore.model_set)
ComposedKind = Literal["weighted_sum", "weighted_mean"]


def _step_ref(step: dict[str, Any]) -> dict[str, Any]:
    """A recipe entry whose ``ref`` (a custom step's) names the former project package is refused."""
    problem = former_package_problem(step["ref"]) if isinstance(step.get("ref"), str) else None
    if problem:
        raise ValueError(f"ref {problem}")
    return step


# a recipe (pre_split, preprocessing): step entries, checked in full when training parses each one
Recipe = list[Annotated[dict[str, Any], AfterValidator(_step_ref)]]


class TrainingDefaults(StrictModel):
    engine: FrameEngine = "pandas"
    random_state: int = 42


class TrainingData(StrictModel):
    table: TableName
    filter: str | None = None
    label_column: str
    label_expression: str | None = None
    record_keys: list[str] = Field(min_length=1)
    feature_columns: list[str] = Field(min_length=1)


class SplitConfig(StrictModel):
    holdout_fraction: Annotated[float, between(0.01, 0.9)] = 0.2
    random_state: int = 42


class ThresholdSetting(StrictModel):
    """training.yml ``model.threshold`` once read: exactly one of a binary ``value``, ``optimize``
    on the holdout, or a multiclass ``classes`` map (see :mod:`lakescore.thresholds` for the rules)."""

    value: float | None = None
    optimize: ThresholdOptimize | None = None
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


class ModelConfig(StrictModel):
    class_name: str = Field(alias="class")
    params: dict[str, Any] = Field(default_factory=dict)
    # a classifier's decision threshold (lakescore.thresholds); None: the model's own predict
    threshold: Annotated[ThresholdSetting | None, BeforeValidator(_threshold)] = None
    # the model's input container, sealed in the chain (lakescore.model_input): auto = sparse after a
    # text vectorizer when the model takes sparse input, else dense
    input: ModelInputSetting = "auto"


class RegistryConfig(StrictModel):
    model_name: TableName
    alias: str = "champion"


def _one_or_more(value: Any) -> Any:
    """``lookup_key: tailnum`` is ``[tailnum]``."""
    return [value] if isinstance(value, str) else value


def _not_empty(value: list[str]) -> list[str]:
    if not value:
        raise ValueError("must name at least one column")
    return value


class FeatureLookupConfig(StrictModel):
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

    def spec(self) -> FeatureLookup:
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


class ComponentConfig(StrictModel):
    """training.yml ``model_set.components.<name>``: a full recipe and model, trained on the set's rows.
    ``label_column`` / ``label_expression`` / ``feature_columns`` default to ``data``'s (a set may hold a
    classifier and a regressor of different labels)."""

    preprocessing: Recipe = Field(default_factory=list)
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


class ComposedConfig(StrictModel):
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
    def kind(self) -> ComposedKind:
        return "weighted_sum" if self.weighted_sum is not None else "weighted_mean"

    @property
    def weights(self) -> dict[str, float]:
        return dict(self.weighted_sum if self.weighted_sum is not None else self.weighted_mean or {})


class ModelSetConfig(StrictModel):
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


class SplitTrainingConfig(StrictModel):
    """training.yml ``split_training``: above ``max_rows``, refit the searched configuration on disjoint
    slices of every training row on Spark workers and paste the slice chains into one ensemble
    (see :mod:`lakescore.workflows.split_train`). Below ``min_rows_per_worker`` rows per slice it
    refuses and the sampled fit is registered, saying why."""

    enabled: bool = False
    min_rows_per_worker: Annotated[int, between(1, 10**9)] = 25000
    max_workers: Annotated[int, between(2, 10000)] | None = None  # None: as many slices as max_rows asks for


class TrainingConfig(StrictModel):
    """config/training.yml: the rows, the recipe, the model (or model set) and where it is registered."""

    removed_keys: ClassVar[dict[tuple[str, ...], str]] = {
        ("defaults", "allow_tested_custom_steps"):
            "every project already runs every check (lint, probe, certificate) on every custom step; delete the key",
    }
    defaults: TrainingDefaults = TrainingDefaults()
    data: TrainingData
    split: SplitConfig = SplitConfig()
    # the single-process ceiling: above it one process fits a sample of max_rows training rows
    # (or, with split_training, the search on that sample and a refit over every row on the workers)
    max_rows: Annotated[int, between(1000, 10**10)] | None = None
    split_training: SplitTrainingConfig = SplitTrainingConfig()
    # fixed steps (edits, row filters) run on the whole table before the train/holdout split
    pre_split: Recipe = Field(default_factory=list)
    # feature tables joined onto the rows by key before the split (lakescore.lookup)
    feature_lookups: Annotated[list[FeatureLookupConfig], AfterValidator(_lookup_outputs)] = Field(default_factory=list)
    preprocessing: Recipe = Field(default_factory=list)
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
