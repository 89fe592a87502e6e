"""Admission: identity, lint of user code, the partition probe, evidence and the certificate.

:func:`check_step` runs the probe's checks on one step (scikit-learn's ``check_estimator`` pattern).
"""

from lakescore.admission.check_step import StepChecks, check_step

__all__ = ["StepChecks", "check_step"]
