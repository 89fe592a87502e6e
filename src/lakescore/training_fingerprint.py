"""What a registered model version was trained from, so an unchanged project is not trained again.

The fingerprint has five parts: the training table and its Delta version, a digest of the
validated training and scoring config (recipe, model, rules), a digest of the project's own code
(the packages named by ``scoring.yml`` ``module`` and by custom steps' ``ref``), the lakescore
version with a digest of its source, and the versions of the model libraries. Training records it
on the registered version's tags; before training again it is compared with the tags of the version
the registry alias points at. Equal fingerprints mean the same rows, recipe, code and settings:
with every ``random_state`` fixed, training would fit the same model again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import lakescore
from lakescore.config import ProjectConfig

DIGEST_TAG = "lakescore.training_fingerprint"
INPUTS_TAG = "lakescore.training_inputs"
LIBRARIES = ("scikit-learn", "numpy", "pandas", "scipy", "xgboost-cpu", "xgboost", "lightgbm", "polars")


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _files_digest(root: Path) -> str:
    """SHA-256 over every ``*.py`` file under ``root`` (relative path and bytes, in path order)."""
    digest = hashlib.sha256()
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    for path in files:
        digest.update(str(path.relative_to(root) if root.is_dir() else path.name).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _package_digest(name: str) -> str:
    """Digest of the top-level package (or module) ``name``, or ``missing`` when it is not importable."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return "missing"
    if spec.submodule_search_locations:
        return _files_digest(Path(list(spec.submodule_search_locations)[0]))
    return _files_digest(Path(spec.origin)) if spec.origin else "missing"


def user_packages(project: ProjectConfig) -> list[str]:
    """Top-level packages of the project's own code: the scoring rules' module and every custom
    step's ``ref`` (``lakescore_project.preprocessing:dep_clock_step`` -> ``lakescore_project``)."""
    names = {project.scoring.module}
    components = project.training.model_set.components.values() if project.training.model_set else []
    for raw in (*project.training.pre_split, *project.training.preprocessing,
                *[raw for component in components for raw in component.preprocessing]):
        if isinstance(raw.get("ref"), str):
            names.add(raw["ref"].split(":")[0])
    return sorted({n.split(".")[0] for n in names if n})


@dataclass(frozen=True)
class TrainingFingerprint:
    """The inputs of one training (see the module docstring). ``digest`` is what is compared."""

    source: str
    source_version: int
    config_sha256: str
    code_sha256: dict[str, str]
    lakescore: str
    libraries: dict[str, str] = field(default_factory=dict)
    feature_tables: dict[str, int] = field(default_factory=dict)  # feature lookup table -> Delta version read

    @property
    def digest(self) -> str:
        """SHA-256 of all parts (the ``lakescore.training_fingerprint`` tag); a project without
        feature lookups digests as it did before ``feature_tables`` existed."""
        parts = asdict(self)
        if not parts["feature_tables"]:
            del parts["feature_tables"]
        return _sha256(parts)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainingFingerprint:
        return cls(**json.loads(text))

    def changes(self, before: TrainingFingerprint) -> list[str]:
        """What differs from ``before``, one phrase per part, e.g.
        ``"source main.flights.flights version 0 -> 1"``; empty when nothing does."""
        out = []
        if before.source != self.source:
            out.append(f"source {before.source} version {before.source_version} -> "
                       f"{self.source} version {self.source_version}")
        elif before.source_version != self.source_version:
            out.append(f"source {self.source} version {before.source_version} -> {self.source_version}")
        if before.feature_tables != self.feature_tables:
            out += [f"feature table {name} version {before.feature_tables.get(name)} -> {self.feature_tables.get(name)}"
                    for name in sorted(set(before.feature_tables) | set(self.feature_tables))
                    if before.feature_tables.get(name) != self.feature_tables.get(name)]
        if before.config_sha256 != self.config_sha256:
            out.append("training or scoring config")
        if before.code_sha256 != self.code_sha256:
            out.append(f"project code ({', '.join(sorted(set(before.code_sha256) | set(self.code_sha256)))})")
        if before.lakescore != self.lakescore:
            out.append(f"lakescore {before.lakescore[:24]} -> {self.lakescore[:24]}")
        if before.libraries != self.libraries:
            changed = sorted(k for k in set(before.libraries) | set(self.libraries)
                             if before.libraries.get(k) != self.libraries.get(k))
            out.append(f"libraries ({', '.join(changed)})")
        return out


def training_fingerprint(project: ProjectConfig, source_version: int, *,
                         feature_tables: dict[str, int] | None = None) -> TrainingFingerprint:
    """The fingerprint of training ``project`` on its table at ``source_version``.

    Parameters
    ----------
    project : ProjectConfig
        The validated project; its training and scoring config are digested as validated
        (comments and key order in the YAML do not count, values and defaults do).
    source_version : int
        Delta version of ``training.data.table`` that training reads.
    feature_tables : dict of str to int, optional
        Delta version of each feature lookup table that training reads (default: none). The lookup
        specs themselves are part of the training config digest.
    """
    config = {"training": project.training.model_dump(mode="json", by_alias=True),
              "scoring": project.scoring.model_dump(mode="json", by_alias=True)}
    if config["training"].get("model_set") is None:  # a single-model project digests as before model sets
        config["training"].pop("model_set", None)
    if not config["scoring"].get("combined_rules"):
        config["scoring"].pop("combined_rules", None)
    libraries = {}
    for name in LIBRARIES:
        try:
            libraries[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return TrainingFingerprint(
        source=project.training.data.table, source_version=int(source_version),
        config_sha256=_sha256(config),
        code_sha256={name: _package_digest(name) for name in user_packages(project)},
        lakescore=f"{lakescore.__version__}+{_files_digest(Path(lakescore.__file__).parent)[:16]}",
        libraries=libraries, feature_tables=dict(feature_tables or {}),
    )


def recorded_fingerprint(client: Any, name: str, alias: str) -> tuple[int, TrainingFingerprint | None] | None:
    """The version ``alias`` points at and the fingerprint on its tags (``None`` for a version
    trained before fingerprints were recorded); ``None`` when the model or alias does not exist.

    Parameters
    ----------
    client : mlflow.MlflowClient
        Pointed at the runtime's registry.
    """
    from mlflow.exceptions import MlflowException  # only where the registry is read

    try:
        version = client.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None
    text = version.tags.get(INPUTS_TAG)
    return int(version.version), (TrainingFingerprint.from_json(text) if text else None)


def record_fingerprint(client: Any, name: str, version: int, fingerprint: TrainingFingerprint) -> None:
    """Tag registered ``name`` version ``version`` with ``fingerprint`` (digest and parts)."""
    client.set_model_version_tag(name, str(version), DIGEST_TAG, fingerprint.digest)
    client.set_model_version_tag(name, str(version), INPUTS_TAG, fingerprint.to_json())
