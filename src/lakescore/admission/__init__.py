"""Admission: identity, lint of user code, the partition probe, evidence and the certificate."""
