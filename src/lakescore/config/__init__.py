"""Typed, validated config/*.yml: one module per file a user edits.

Every file is read and checked before any work starts, and every problem across all files is
collected into one :class:`~lakescore.errors.ConfigError` (pandera's lazy validation), each as
``config/inference.yml: spark_udf_prediction_batch_rows must be between 1 and 100000; got 0``.
Key names are a contract with users; unknown keys are errors with a "did you mean" hint.

=====================  =========================================================
module                 what it holds
=====================  =========================================================
``config.training``    training.yml: rows, recipe, model or model set, registry
``config.inference``   inference.yml: the score job, its route and publication
``config.scoring``     scoring.yml: eligibility and output rules, eligibility mode
``config.serving``     serving.yml: the warm endpoint
``config.monitoring``  monitoring.yml: the quality table and its alert limits
``config.base``        what they share: table names, ``${var}`` placeholders,
                       number ranges, reading one file with its problems collected
``config.project``     all files together: :func:`load_project`
=====================  =========================================================

Each mode a file allows is a ``Literal`` alias defined once, in the module of the file that owns
it (``BatchCompute``, ``ModelChangeMode``, ...); the library's fields and parameters that carry a
mode use the same alias.
"""

from lakescore.config.base import (
    DEFAULT_CATALOG,
    DEFAULT_NAMESPACE,
    DEFAULT_SCHEMA,
    FIXED_OUTPUTS,
    IDENTIFIER,
    PLACEHOLDER,
    PLACEHOLDERS,
    TABLE_NAME,
    ModelSelection,
    StrictModel,
    TableName,
    load_file,
)
from lakescore.config.inference import (
    BatchCompute,
    EnvManager,
    InferenceConfig,
    ModelChangeMode,
    PublicationConfig,
    PublicationMode,
    SourceChangePolicy,
)
from lakescore.config.monitoring import MonitoringConfig
from lakescore.config.project import ProjectConfig, load_project
from lakescore.config.scoring import EligibilityMode, OutputRuleConfig, OutputType, RuleConfig, ScoringConfig
from lakescore.config.serving import (
    SERVING_PROFILES,
    CanaryConfig,
    ReplicasConfig,
    ReplicaStart,
    ScaleSignal,
    ServingClientConfig,
    ServingConfig,
    ServingProfile,
    ShadowConfig,
)
from lakescore.config.training import (
    COMPONENT_NAME,
    ComponentConfig,
    ComposedConfig,
    ComposedKind,
    FeatureLookupConfig,
    FrameEngine,
    ModelConfig,
    ModelInputSetting,
    ModelSetConfig,
    RegistryConfig,
    SplitConfig,
    SplitTrainingConfig,
    ThresholdOptimize,
    ThresholdSetting,
    TrainingConfig,
    TrainingData,
    TrainingDefaults,
)

__all__ = [
    "COMPONENT_NAME", "DEFAULT_CATALOG", "DEFAULT_NAMESPACE", "DEFAULT_SCHEMA", "FIXED_OUTPUTS", "IDENTIFIER",
    "PLACEHOLDER", "PLACEHOLDERS", "SERVING_PROFILES", "TABLE_NAME",
    "BatchCompute", "CanaryConfig", "ComponentConfig", "ComposedConfig", "ComposedKind", "ReplicaStart",
    "EligibilityMode", "EnvManager", "FeatureLookupConfig", "FrameEngine", "InferenceConfig", "ModelChangeMode",
    "ModelConfig", "ModelInputSetting", "ModelSelection", "ModelSetConfig", "MonitoringConfig",
    "OutputRuleConfig", "OutputType", "ProjectConfig", "PublicationConfig", "PublicationMode", "RegistryConfig",
    "ReplicasConfig", "RuleConfig", "ScaleSignal", "ScoringConfig", "ServingClientConfig", "ServingConfig",
    "ServingProfile", "ShadowConfig", "SourceChangePolicy", "SplitConfig", "SplitTrainingConfig", "StrictModel",
    "TableName", "ThresholdOptimize", "ThresholdSetting", "TrainingConfig", "TrainingData", "TrainingDefaults",
    "load_file", "load_project",
]
