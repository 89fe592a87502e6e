"""The lakescore exception hierarchy.

Every error carries a stable ``code`` (for logs, HTTP replies and tests) and a message that names
the object, the bad value and one fix. Structured fields ride along for callers that need them.
"""

from __future__ import annotations

from typing import Any


class LakescoreError(Exception):
    """Base class of every lakescore error.

    Parameters
    ----------
    message : str
        Human message: the object, the bad value, and one fix.
    **fields : Any
        Structured context (step, check, rows, table, ...), kept in ``self.fields``.
    """

    code: str = "lakescore_error"
    http_status: int = 500

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def __str__(self) -> str:
        return self.message


class ConfigError(LakescoreError):
    """One or more problems in config/*.yml, all listed in one message."""

    code = "invalid_config"
    http_status = 400

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        noun = "problem" if len(self.problems) == 1 else "problems"
        super().__init__(f"{len(self.problems)} config {noun}:\n{lines}", problems=self.problems)


class InputError(LakescoreError):
    """A frame handed to the chain lacks a column or has the wrong type."""

    code = "invalid_input"
    http_status = 400


class StepError(LakescoreError):
    """A preprocessing step refused its configuration or its training data."""

    code = "step_failed"


class TableNotFoundError(LakescoreError):
    """A Delta table named in the config does not exist."""

    code = "table_not_found"
    http_status = 404


class ModelNotFoundError(LakescoreError):
    """A registered model, version or alias does not exist."""

    code = "model_not_found"
    http_status = 404


class CertificateError(LakescoreError):
    """The artifact, its recipe or the runtime differ from what the certificate sealed."""

    code = "certificate_mismatch"


class UncertifiedModelError(LakescoreError):
    """A model without a certificate was asked to score in pieces."""

    code = "uncertified_model"


class RuntimeUnsupportedError(LakescoreError):
    """The requested runtime or route cannot run here."""

    code = "runtime_unsupported"


class PublishError(LakescoreError):
    """Publication refused to write: conflict, stale plan, schema or model change."""

    code = "publish_refused"
