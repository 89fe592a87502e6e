"""The certificate refuses a tampered artifact, a changed library version and a changed recipe."""

import dataclasses
import json

import pytest

from lakescore.admission.certificate import (
    Certificate,
    check_environment,
    folder_digest,
    require_admitted,
    seal,
    verify,
)
from lakescore.admission.evidence import admit
from lakescore.chain import FittedChain
from lakescore.errors import CertificateError, UncertifiedModelError


@pytest.fixture
def evidence(small_evidence):
    """small_chain's evidence on the sample's rows 1000-1999 (admitted once per session: conftest)."""
    return small_evidence


@pytest.fixture
def sealed(tmp_path, small_chain, evidence):
    folder = small_chain.save(tmp_path / "chain")
    return folder, seal(folder, small_chain, evidence=evidence)


def test_an_untouched_artifact_verifies_after_a_reload(sealed):
    folder, certificate = sealed
    reloaded = Certificate.from_json(certificate.to_json())
    verify(reloaded, folder, FittedChain.load(folder))


def test_the_certificate_records_what_it_is_bound_to(sealed, small_chain):
    import sklearn

    _, certificate = sealed
    assert certificate.libraries == {"scikit-learn": sklearn.__version__}  # no xgboost/lightgbm: not used
    assert certificate.python.count(".") == 1
    assert len(certificate.artifact_sha256) == 64


def test_a_tampered_artifact_is_refused(sealed):
    folder, certificate = sealed
    meta = json.loads((folder / "chain.json").read_text())
    meta["rules"] = []  # someone drops the eligibility rule after sealing
    (folder / "chain.json").write_text(json.dumps(meta))
    with pytest.raises(CertificateError, match="artifact_sha256: sealed"):
        verify(certificate, folder, FittedChain.load(folder))


def test_a_changed_scikit_learn_version_is_refused(sealed):
    folder, certificate = sealed
    old = dataclasses.replace(certificate, libraries={"scikit-learn": "1.0.0"})
    with pytest.raises(CertificateError, match=r"libraries: sealed \{'scikit-learn': '1.0.0'\}"):
        verify(old, folder, FittedChain.load(folder))


def test_a_retrained_model_in_the_same_folder_is_refused(sealed, small_chain):
    folder, certificate = sealed
    model = FittedChain.load(folder).model
    model.coef_[0, 0] += 1e-6
    import joblib

    joblib.dump(model, folder / "model.joblib")
    with pytest.raises(CertificateError) as err:
        verify(certificate, folder, FittedChain.load(folder))
    assert "model_fingerprint" in str(err.value) and "artifact_sha256" in str(err.value)


def test_the_environment_check_passes_here_and_names_changed_project_code(sealed, tmp_path, monkeypatch):
    """The driver's early check (preflight) refuses changed ``lakescore_project`` code with the reason, not a
    hint about environments."""
    import shutil
    import sys
    from pathlib import Path

    import lakescore_project

    _, certificate = sealed
    check_environment(certificate)  # the environment that sealed it
    edited = tmp_path / "project"
    shutil.copytree(Path(lakescore_project.__file__).parent, edited / "lakescore_project")
    with (edited / "lakescore_project" / "scoring.py").open("a") as handle:
        handle.write("\n\ndef added_after_training(frame, params):\n    return frame\n")
    monkeypatch.syspath_prepend(str(edited))
    monkeypatch.delitem(sys.modules, "lakescore_project")
    with pytest.raises(CertificateError) as err:
        check_environment(certificate)
    assert str(err.value).startswith("the model does not match its certificate, so it will not score: "
                                     f"project_source_sha256: sealed '{certificate.project_source_sha256}', here '")
    assert "(the project's own code (the `lakescore_project` package: preprocessing.py, scoring.py, ...) changed since " \
           "admission; restore it, or retrain so admission checks the new code)." in str(err.value)
    with pytest.raises(CertificateError, match=r"python: sealed '2.7', here '3\.\d+' \(this Python is not the one"):
        check_environment(dataclasses.replace(certificate, python="2.7", project_source_sha256="x"))


def test_a_certificate_sealed_over_the_former_package_name_passes_on_the_same_files_renamed(
        sealed, tmp_path, monkeypatch):
    """A model admitted when the project package was ``features`` sealed the digest of its files;
    the same files under ``lakescore_project`` (and no ``features`` package at all) still match."""
    import shutil
    import sys
    from pathlib import Path

    import lakescore_project
    from lakescore.admission.certificate import project_source_digest

    _, certificate = sealed
    before = tmp_path / "before"
    shutil.copytree(Path(lakescore_project.__file__).parent, before / "features",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(before))
    monkeypatch.delitem(sys.modules, "features", raising=False)
    old = dataclasses.replace(certificate, project_source_sha256=project_source_digest("features"))
    shutil.rmtree(before / "features")  # renamed: only lakescore_project is installed now
    check_environment(old)


def test_folder_digest_depends_on_names_and_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"1")
    first = folder_digest(tmp_path / "a")
    (tmp_path / "a" / "x").rename(tmp_path / "a" / "y")
    assert folder_digest(tmp_path / "a") != first


def test_the_certificate_carries_the_evidence_summary(sealed):
    _, certificate = sealed
    assert certificate.evidence["evidence_version"] == 2
    assert certificate.evidence["parts"] == {"apply_probed_builtin": True, "apply_probed": True, "rules_probed": True,
                                             "model_probed": True, "chain_probed": True,
                                             "compiled_probed": True}


def test_a_certificate_with_a_failed_part_or_old_evidence_is_refused(sealed):
    _, certificate = sealed
    failed = dataclasses.replace(certificate, evidence={**certificate.evidence,
                                                         "parts": {**certificate.evidence["parts"], "model_probed": False}})
    with pytest.raises(UncertifiedModelError, match=r"does not admit part\(s\) \['model_probed'\]"):
        require_admitted(failed)
    old = dataclasses.replace(certificate, evidence={"evidence_version": 1})
    with pytest.raises(UncertifiedModelError, match="only version 2 is accepted"):
        require_admitted(old)
    parts = {k: v for k, v in certificate.evidence["parts"].items() if k != "compiled_probed"}
    before = dataclasses.replace(certificate, evidence={**certificate.evidence, "parts": parts})
    with pytest.raises(UncertifiedModelError, match="no compiled_probed flag"):
        require_admitted(before)


def test_edited_evidence_on_disk_is_refused(sealed, evidence):
    from lakescore.admission.certificate import evidence_text

    _, certificate = sealed
    require_admitted(certificate, evidence_text(evidence))
    with pytest.raises(CertificateError, match="partition_probe.json differs"):
        require_admitted(certificate, evidence_text({**evidence, "sample_rows": 1}))


@pytest.fixture(scope="module")
def thresholded(small_chain, flights_sample):
    """The small chain with a fixed threshold of 0.3, admitted (the model part is probed with it)."""
    from lakescore.thresholds import Threshold

    chain = dataclasses.replace(small_chain, threshold=Threshold(value=0.3))
    return chain, admit(chain, flights_sample.iloc[1000:])


def test_admission_probes_the_model_part_with_its_threshold(thresholded, flights_sample):
    from lakescore.admission.parts import chain_parts

    chain, evidence = thresholded
    assert evidence["model"]["decision_rule"] == "threshold 0.3 (fixed in training.yml; positive when p >= 0.3)"
    assert all(check["status"] == "passed" for check in evidence["model"]["checks"])
    model = next(p for p in chain_parts(chain, flights_sample.iloc[1000:1256]) if p.kind == "model")
    out = model.run(model.sample)
    assert (out["prediction"].to_numpy(dtype="int64") == (out["p1"] >= 0.3).to_numpy()).all()
    assert (out["prediction"] == 1).sum() > (chain.model.predict(model.sample.to_numpy()) == 1).sum()  # it mattered


def test_a_threshold_changed_after_sealing_is_refused(thresholded, tmp_path, flights_sample):
    chain, evidence = thresholded
    folder = chain.save(tmp_path / "chain")
    certificate = seal(folder, chain, evidence=evidence)
    verify(certificate, folder, FittedChain.load(folder))  # as sealed: accepted
    meta = json.loads((folder / "chain.json").read_text())
    assert meta["threshold"] == {"value": 0.3, "classes": [], "method": "fixed", "holdout_rows": None}
    meta["threshold"]["value"] = 0.6  # someone lowers the positive rate on a worker
    (folder / "chain.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    tampered = FittedChain.load(folder)
    assert tampered.threshold.value == 0.6
    with pytest.raises(CertificateError) as err:
        verify(certificate, folder, tampered)
    assert "artifact_sha256: sealed" in str(err.value) and "recipe_sha256: sealed" in str(err.value)
    assert "model_fingerprint" not in str(err.value)  # the model itself is untouched: the threshold is what changed
