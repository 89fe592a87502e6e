"""The certificate: what was admitted, sealed to the exact artifact and runtime.

A certificate binds

- ``artifact_sha256``: SHA-256 over every file of the saved chain folder (path and bytes);
- ``recipe_sha256``: SHA-256 of the recipe and rules as saved (pre-split and recipe steps, their
  states, eligibility and output rules with their sources, the eligibility mode);
- ``model_fingerprint``: the model's learned content (native trees for XGBoost/LightGBM);
- ``project_source_sha256``: SHA-256 of the project's ``lakescore_project`` package source files
  (relative paths and bytes, so a model sealed when the package was called ``features`` still matches
  the same files under the new name);
- ``lakescore``, ``python`` (major.minor) and exact ``libraries`` versions (scikit-learn always,
  xgboost/lightgbm only when the model uses them);
- ``evidence``: a summary of the admission evidence: ``evidence_version`` (2), the SHA-256 of
  ``partition_probe.json`` logged beside it, and per-part flags ``apply_probed_builtin``,
  ``apply_probed``, ``rules_probed``, ``model_probed``, ``chain_probed``, ``compiled_probed`` (the
  compiled plan agrees with the reference walk; a certificate without it is refused).

Every worker re-computes these in ``load_context`` and refuses to score on any difference, and
refuses a model whose evidence is missing, of another version, or not passed for every part.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lakescore
from lakescore.errors import CertificateError, UncertifiedModelError
from lakescore.usercode import PROJECT_PACKAGE

CERTIFICATE_FORMAT = 1


def folder_digest(folder: str | Path) -> str:
    """SHA-256 over the sorted relative paths and bytes of every file under ``folder``."""
    root = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def project_source_digest(package: str = PROJECT_PACKAGE) -> str:
    """SHA-256 of the ``.py`` files of the project's user-code package, or ``"none"`` without one."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "none"
    digest = hashlib.sha256()
    for location in spec.submodule_search_locations:
        root = Path(location)
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True)
class Certificate:
    """A sealed admission certificate (see the module docstring for each field)."""

    artifact_sha256: str
    recipe_sha256: str
    model_fingerprint: str
    project_source_sha256: str
    lakescore: str
    python: str
    libraries: dict[str, str]
    evidence: dict[str, Any] = field(default_factory=dict)
    format: int = CERTIFICATE_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Certificate:
        return cls(**json.loads(text))

    @property
    def digest(self) -> str:
        """SHA-256 of the certificate itself (recorded in receipts)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()


def _recipe(chain_dir: Path) -> dict[str, Any]:
    """The saved recipe and rules of a chain folder: its ``chain.json`` without the column lists."""
    meta = json.loads((chain_dir / "chain.json").read_text())
    return {k: v for k, v in meta.items() if k not in ("input_columns", "feature_columns")}


def _observed(chain_dir: Path, chain: Any) -> dict[str, Any]:
    """The sealed values of the chain (or model set: :mod:`lakescore.model_set`) saved in ``chain_dir``.

    A set's recipe is its ``set.json`` with every component's recipe, its model fingerprint the
    SHA-256 of the components' fingerprints in order, its libraries those of every component."""
    from lakescore.model_set import SET_FILE, is_set_folder
    from lakescore.models import fingerprint, runtime_versions

    if is_set_folder(chain_dir):
        recipe: dict[str, Any] = {"set": json.loads((chain_dir / SET_FILE).read_text()),
                                  "components": {name: _recipe(chain_dir / "components" / name)
                                                 for name, _ in chain.components}}
        prints = "\0".join(f"{name}:{fingerprint(c.model)}" for name, c in chain.components)
        model_print = hashlib.sha256(prints.encode()).hexdigest()
        libraries = {k: v for _, c in chain.components for k, v in runtime_versions(c.model).items()}
    else:
        recipe, model_print, libraries = _recipe(chain_dir), fingerprint(chain.model), runtime_versions(chain.model)
    return {
        "artifact_sha256": folder_digest(chain_dir),
        "recipe_sha256": hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest(),
        "model_fingerprint": model_print,
        "project_source_sha256": project_source_digest(),
        "lakescore": lakescore.__version__,
        "python": python_version(),
        "libraries": libraries,
    }


def evidence_digest(evidence: dict[str, Any]) -> str:
    """SHA-256 of the evidence as written to ``partition_probe.json`` (sorted keys)."""
    return hashlib.sha256(evidence_text(evidence).encode()).hexdigest()


def evidence_text(evidence: dict[str, Any]) -> str:
    return json.dumps(evidence, indent=1, sort_keys=True)


def seal(chain_dir: str | Path, chain: Any, *, evidence: dict[str, Any]) -> Certificate:
    """Seal a certificate for the chain saved in ``chain_dir`` with its admission ``evidence``.

    Raises
    ------
    UncertifiedModelError
        When the evidence is missing, of another version, or a part failed.
    """
    from lakescore.admission.evidence import EVIDENCE_VERSION, part_flags

    if not evidence or evidence.get("evidence_version") != EVIDENCE_VERSION:
        raise UncertifiedModelError(
            f"packaging refuses to log a model without admission evidence version {EVIDENCE_VERSION} "
            f"(got {evidence.get('evidence_version') if evidence else None}); run admission "
            "(lakescore.admission.evidence.admit) on the fitted chain first"
        )
    summary = {"evidence_version": EVIDENCE_VERSION, "evidence_sha256": evidence_digest(evidence),
               "parts": part_flags(evidence)}
    certificate = Certificate(**_observed(Path(chain_dir), chain), evidence=summary)
    require_admitted(certificate)
    return certificate


def require_admitted(certificate: Certificate, evidence_text_on_disk: str | None = None) -> None:
    """Refuse a certificate whose evidence is missing, not version 2, or not passed for every part.

    Parameters
    ----------
    evidence_text_on_disk : str, optional
        The ``partition_probe.json`` logged with the model; when given its SHA-256 must match.

    Raises
    ------
    UncertifiedModelError
        Code ``uncertified_model``, naming what is missing.
    """
    from lakescore.admission.evidence import EVIDENCE_VERSION

    summary = certificate.evidence or {}
    if summary.get("evidence_version") != EVIDENCE_VERSION:
        raise UncertifiedModelError(
            f"the model's certificate carries evidence version {summary.get('evidence_version')}; only version "
            f"{EVIDENCE_VERSION} is accepted. Retrain the model with this lakescore to re-run admission."
        )
    parts = summary.get("parts", {})
    if parts and "compiled_probed" not in parts:
        raise UncertifiedModelError("the model's certificate has no compiled_probed flag: it was admitted before "
                                    "the compiled plan existed. Retrain it so admission checks the compiled plan")
    failed = [part for part, ok in parts.items() if not ok]
    if failed or not parts:
        raise UncertifiedModelError(f"the model's certificate does not admit part(s) {failed or 'all'}; retrain it")
    if evidence_text_on_disk is not None and \
            hashlib.sha256(evidence_text_on_disk.encode()).hexdigest() != summary.get("evidence_sha256"):
        raise CertificateError("partition_probe.json differs from the evidence the certificate sealed; "
                               "retrain and re-register the model")


# what a difference in each sealed value means, and its one fix
_FIXES = {
    "project_source_sha256": "the project's own code (the `lakescore_project` package: preprocessing.py, scoring.py, ...) "
                             "changed since admission; restore it, or retrain so admission checks the new code",
    "lakescore": "this lakescore version is not the one that admitted the model; install the sealed version, or retrain",
    "python": "this Python is not the one that admitted the model; score with the sealed Python, or retrain",
    "libraries": "a model library version differs; install the sealed versions (requirements.lock), or retrain",
}
_RETRAIN = "the saved model differs from what admission sealed (edited or swapped); retrain and re-register it"


def _refuse(differences: dict[str, tuple[Any, Any]]) -> CertificateError:
    lines = [f"{key}: sealed {sealed!r}, here {here!r} ({_FIXES.get(key, _RETRAIN)})"
             for key, (sealed, here) in differences.items()]
    return CertificateError("the model does not match its certificate, so it will not score: " + "; ".join(lines) + ".",
                            differences=lines)


def check_environment(certificate: Certificate) -> None:
    """Refuse, before any worker starts, an environment that differs from the sealed one.

    Compares the values that depend on where scoring runs, not on the artifact: the project's
    ``lakescore_project`` source digest, the lakescore and Python versions, and each sealed library's
    version. The driver calls it in preflight; every worker still runs :func:`verify`.

    Raises
    ------
    CertificateError
        Naming each value that differs, what was sealed, what is here, and its fix.
    """
    here = {"project_source_sha256": project_source_digest(), "lakescore": lakescore.__version__,
            "python": python_version(),
            "libraries": {name: importlib.import_module(name.replace("scikit-learn", "sklearn")).__version__
                          for name in certificate.libraries}}
    sealed = asdict(certificate)
    differences = {key: (sealed[key], value) for key, value in here.items() if sealed[key] != value}
    if differences:
        raise _refuse(differences)


def verify(certificate: Certificate, chain_dir: str | Path, chain: Any) -> None:
    """Re-compute every sealed value and refuse on any difference.

    Raises
    ------
    CertificateError
        Naming each value that differs, what was sealed and what is here, and the fix.
    """
    observed = _observed(Path(chain_dir), chain)
    sealed = asdict(certificate)
    differences = {key: (sealed[key], value) for key, value in observed.items() if sealed[key] != value}
    if differences:
        raise _refuse(differences)
