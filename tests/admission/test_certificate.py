"""The certificate refuses a tampered artifact, a changed library version and a changed recipe."""

import dataclasses
import json

import pytest

from lakescore.admission.certificate import Certificate, folder_digest, seal, verify
from lakescore.chain import FittedChain
from lakescore.errors import CertificateError


@pytest.fixture
def sealed(tmp_path, small_chain):
    folder = small_chain.save(tmp_path / "chain")
    return folder, seal(folder, small_chain)


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


def test_folder_digest_depends_on_names_and_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"1")
    first = folder_digest(tmp_path / "a")
    (tmp_path / "a" / "x").rename(tmp_path / "a" / "y")
    assert folder_digest(tmp_path / "a") != first
