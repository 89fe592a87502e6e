"""config/serving.yml: the warm endpoint (see lakescore.serving): replicas, scaling, canary, client."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from lakescore.config.base import ModelSelection, StrictModel, TableName, between, renamed

# profile: a preset of replicas, keep_warm and client settings (SERVING_PROFILES)
ServingProfile = Literal["experiment", "background", "low_latency"]
# scale_signal: what the autoscaler scales on (lakescore.serving.scaler)
ScaleSignal = Literal["request_rate", "pending_requests"]
# replica_start: how a replica process starts (lakescore.serving.replicas.backend)
ReplicaStart = Literal["preloaded_fork", "new_process"]


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


class ReplicasConfig(StrictModel):
    min: Annotated[int, between(0, 64)] = 1
    max: Annotated[int, between(1, 64)] = 1


class ShadowConfig(StrictModel):
    rtol: Annotated[float, between(0, 1)] = 1e-3  # values within 0.1% agree (lakescore.serving.policy.shadow)
    atol: Annotated[float, between(0, 1e12)] = 1e-9


class CanaryConfig(StrictModel):
    share_percent: Annotated[int, between(1, 100)] = 5
    max_failure_rate_gap: Annotated[float, between(0, 1)] = 0.05
    min_requests: Annotated[int, between(1, 10**6)] = 100
    window_s: Annotated[float, between(1, 7 * 86400)] = 600


class ServingClientConfig(StrictModel):
    hold_s: Annotated[float, between(0, 3600)] = 60
    timeout_s: Annotated[float, between(1, 3600)] = 60
    deadline_s: Annotated[float, between(1, 7 * 86400)] = 300
    retry_waits_s: list[Annotated[float, between(0, 3600)]] = Field(default_factory=lambda: [15, 30, 60, 120])  # type: ignore[arg-type]  # int defaults of a list[float] field
    retry_only_idempotent: bool = False
    durable_job_id: bool = False


class ServingConfig(StrictModel):
    """config/serving.yml: the warm endpoint (see lakescore.serving)."""

    renamed_keys: ClassVar[dict[str, str]] = {"max_warm_copies": "max_warm_replicas", "copy_start": "replica_start"}

    endpoint_name: str = Field(default="default", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")
    profile: ServingProfile | None = None
    model_selection: ModelSelection = "champion"
    model_version: Annotated[int, between(1, 10**9)] | None = None
    host: Literal["127.0.0.1"] = "127.0.0.1"
    port: Annotated[int, between(0, 65535)] = 8765
    inference_table: TableName
    replicas: ReplicasConfig = ReplicasConfig()
    scale_signal: ScaleSignal = "request_rate"
    target_rpm_per_replica: Annotated[float, between(0.01, 10**6)] = 120
    target_pending_per_replica: Annotated[float, between(0.1, 1000)] = 1.5
    scale_interval_s: Annotated[float, between(0.2, 3600)] = 60
    scale_down_cooldown_s: Annotated[float, between(0, 86400)] = 180
    idle_timeout_s: Annotated[float, between(1, 30 * 86400)] = 1800
    keep_warm: bool = False
    max_warm_replicas: Annotated[int, between(1, 256)] = 4
    memory_limit_mb: Annotated[int, between(64, 1 << 20)] = 2048
    replica_start: ReplicaStart = "preloaded_fork"
    request_timeout_s: Annotated[float, between(0.1, 3600)] = 30
    max_queue: Annotated[int, between(0, 100000)] = 64
    max_body_bytes: Annotated[int, between(1024, 1 << 30)] = 1 << 20
    max_rows_per_request: Annotated[int, between(1, 100000)] = 1000
    retry_after_s: Annotated[int, between(1, 3600)] = 30
    cold_max_concurrent: Annotated[int, between(1, 16)] = 2
    cold_timeout_s: Annotated[float, between(1, 3600)] = 180
    record_flush_rows: Annotated[int, between(1, 10**6)] = 1000
    record_flush_interval_s: Annotated[float, between(0.1, 3600)] = 30
    shadow: ShadowConfig = ShadowConfig()
    canary: CanaryConfig = CanaryConfig()
    client: ServingClientConfig = ServingClientConfig()

    @model_validator(mode="before")
    @classmethod
    def _apply_profile(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = renamed(data, cls.renamed_keys)
        if isinstance(data, dict) and data.get("profile") in SERVING_PROFILES:
            return _under(SERVING_PROFILES[data["profile"]], data)
        return data


def serving_problems(serving: ServingConfig, shown: str) -> list[str]:
    """The rules between serving.yml's keys (replica bounds, a pinned version). ``shown`` names the file."""
    problems = []
    if serving.replicas.min > serving.replicas.max:
        problems.append(f"{shown}: replicas.min must be at most replicas.max; got min {serving.replicas.min}, "
                        f"max {serving.replicas.max} (raise max or lower min)")
    if serving.replicas.max > serving.max_warm_replicas:
        problems.append(f"{shown}: replicas.max must be at most max_warm_replicas; got {serving.replicas.max} > "
                        f"{serving.max_warm_replicas} (raise max_warm_replicas or lower replicas.max)")
    if serving.model_selection == "pinned_version" and serving.model_version is None:
        problems.append(f"{shown}: model_version is required when model_selection is 'pinned_version'; "
                        "got None (set model_version: N, or use 'champion')")
    return problems
