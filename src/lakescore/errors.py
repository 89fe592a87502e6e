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


class SplitTrainingError(LakescoreError):
    """A phase of split training could not finish (no worker started, every slice failed, the
    slice chains could not be pasted, or a phase was claimed by another runner). Training keeps
    the search's sampled fit and says why (:mod:`lakescore.workflows.split_train`)."""

    code = "split_training_failed"


class StepError(LakescoreError):
    """A preprocessing step refused its configuration or its training data."""

    code = "step_failed"


class FeatureLookupError(LakescoreError):
    """A feature table cannot be joined as a feature lookup says (duplicate keys, a clashing column)."""

    code = "feature_lookup_failed"
    http_status = 400


class TableNotFoundError(LakescoreError):
    """A Delta table named in the config does not exist."""

    code = "table_not_found"
    http_status = 404


class TableExistsError(LakescoreError):
    """A table that a write must create already exists (``mode="error"`` never overwrites)."""

    code = "table_exists"
    http_status = 409


class StoreBusyError(LakescoreError):
    """Another process holds a shared store's first-use lock for too long."""

    code = "store_busy"
    http_status = 503


class ModelNotFoundError(LakescoreError):
    """A registered model, version or alias does not exist."""

    code = "model_not_found"
    http_status = 404


class ModelArtifactsMissingError(ModelNotFoundError):
    """A registered version's artifact folder is gone (a home moved or copied without it): the
    version exists and may be intact elsewhere. Its ``path`` is where the registry expects it."""

    code = "model_artifacts_missing"

    @classmethod
    def at(cls, model_uri: str, path: str) -> ModelArtifactsMissingError:
        """The error for the version at ``model_uri`` whose artifacts the registry records at ``path``."""
        what = model_uri.removeprefix("models:/")
        if what.count("/") == 1:  # models:/<name>/<version>
            what = "{} v{}".format(*what.split("/"))
        return cls(f"artifacts of {what} are expected at {path}, which does not exist: was the home moved, or "
                   "copied without its mlartifacts folder? Restore that folder (a home is copied or moved as one "
                   "folder), or point --home at the home that holds it.", path=path)


class CertificateError(LakescoreError):
    """The artifact, its recipe or the runtime differ from what the certificate sealed (HTTP 422:
    an endpoint refuses to deploy or compare such a version)."""

    code = "certificate_mismatch"
    http_status = 422


class FingerprintError(CertificateError):
    """A fitted model holds a value whose content cannot be digested (see ``content_digest``)."""

    code = "fingerprint_unstable"


class UncertifiedModelError(LakescoreError):
    """A model without a certificate was asked to score in pieces (HTTP 409: an endpoint refuses to
    deploy or compare a version that was never admitted)."""

    code = "uncertified_model"
    http_status = 409


class RuntimeUnsupportedError(LakescoreError):
    """The requested runtime or route cannot run here."""

    code = "runtime_unsupported"


class PublishError(LakescoreError):
    """Publication refused to write: conflict, stale plan, schema or model change."""

    code = "publish_refused"


class PublishConflictError(PublishError):
    """Another publication got in the way: a run id reused for a different request, or a
    writer that kept losing the commit race."""

    code = "publish_conflict"
    http_status = 409


class StalePlanError(PublishError):
    """The prediction table moved on since the run was planned (its window or model is stale)."""

    code = "stale_plan"
    http_status = 409


class SourceChangedError(PublishError):
    """Rows of the score source were updated or deleted inside the incremental window."""

    code = "source_changed"


class ModelChangeError(PublishError):
    """``model_change_mode: reject`` and the run's model version differs from the table's."""

    code = "model_change_rejected"


class SchemaChangeError(PublishError):
    """The predictions' columns differ from the prediction table's (no silent schema evolution)."""

    code = "schema_change"


class CdfRecoveryRequiredError(PublishError):
    """The source's change data feed no longer covers the watermark (vacuumed or cleaned history),
    or the watermark is bound to another source or target table."""

    code = "cdf_recovery_required"


class PredictionsRewrittenError(PublishError):
    """A commit after the prediction table's newest receipt removed rows (RESTORE, DELETE, an
    overwrite, a MERGE or UPDATE by someone else): that receipt no longer describes the table, so
    it is no watermark."""

    code = "predictions_rewritten"


class NullPeriodError(PublishError):
    """A snapshot's ``publication.period_column`` holds nulls: those rows belong to no period, so
    no later snapshot could replace them."""

    code = "period_null"


class ChangeFeedDisabledError(PublishError):
    """Incremental publication needs ``delta.enableChangeDataFeed = true`` on the score source."""

    code = "cdf_not_enabled"


class RequestError(InputError):
    """An HTTP request to an endpoint is malformed, names an unknown column, has a value of the
    wrong type, or is over a size limit. ``http_status`` is 400, 413 or 415."""

    code = "invalid_request"

    def __init__(self, message: str, *, http_status: int = 400, **fields: object) -> None:
        super().__init__(message, **fields)
        self.http_status = http_status


class IdempotencyKeyReusedError(RequestError):
    """An ``Idempotency-Key`` came with a request other than the one it was first used for (other
    rows, other values or another ``model_version``). Always 422: the stored answer is not replayed
    for rows it never scored, and the new rows are not scored under a used key."""

    code = "idempotency_key_reused"

    def __init__(self, message: str, **fields: object) -> None:
        super().__init__(message, http_status=422, **fields)


class StateVersionError(LakescoreError):
    """A state database was written by a newer lakescore (its schema version is above the one this
    version reads)."""

    code = "state_version_unsupported"


class ServingError(LakescoreError):
    """The endpoint could not answer (a replica failed and so did the cold path)."""

    code = "serving_failed"
    http_status = 502


class EndpointUnavailableError(ServingError):
    """No replica can take the request now (scaled to zero, queue full); retry after ``retry_after_s``."""

    code = "endpoint_unavailable"
    http_status = 503


class ServingConflictError(ServingError):
    """A shadow, canary or replica cannot start: the model task cannot be compared, no candidate is
    chosen, or ``max_warm_replicas`` is reached."""

    code = "serving_conflict"
    http_status = 409


class EndpointRunningError(LakescoreError):
    """``lakescore serve`` of an endpoint that a live process already serves from the same home
    (its endpoint file names that process): the second start is refused, and nothing it would
    own (the endpoint file, its rows in the serving state, its replicas) is touched."""

    code = "endpoint_running"
    http_status = 409


class UnauthorizedError(LakescoreError):
    """A request to an endpoint without its token (HTTP 401)."""

    code = "unauthorized"
    http_status = 401


class ModelServingError(LakescoreError):
    """The Databricks workspace refused to create a Model Serving endpoint (``serve --create``)."""

    code = "model_serving_refused"
    http_status = 502


class ModelServingLookupsError(LakescoreError):
    """A model with feature lookups exported as a Databricks Model Serving endpoint
    (``serve --export-model-serving``/``--create``): Model Serving joins features only for a
    Feature Engineering model, from an online store, at the latest value rather than the
    point-in-time one the model was trained and scored with."""

    code = "model_serving_lookups"
    http_status = 400


class EndpointActionError(LakescoreError):
    """An operator's request to the endpoint (deploy, shadow, canary, flush, status) failed on
    something other than a lakescore error, e.g. a registry read timing out; the endpoint keeps
    serving what it served before."""

    code = "endpoint_action_failed"
    http_status = 500


class SparkPolarsUnsupportedError(LakescoreError):
    """A Polars-trained chain was asked to score on Spark (whose batches are pandas)."""

    code = "spark_polars_unsupported"


class DeltaJarsMissingError(RuntimeUnsupportedError):
    """The local SparkSession needs Delta Lake's Spark jars, which set-up fetches once."""

    code = "delta_jars_missing"


class SparkConnectUnavailableError(RuntimeUnsupportedError):
    """The local runtime cannot give a Spark Connect session in this process."""

    code = "spark_connect_unavailable"


class SparkVersionUnsupportedError(RuntimeUnsupportedError):
    """The installed pyspark is missing, or is a Spark version no pinned Delta Lake release is built for."""

    code = "spark_version_unsupported"


class TableFeatureUnsupportedError(RuntimeUnsupportedError):
    """A Delta table needs a reader feature that the route's engine cannot read."""

    code = "table_feature_unsupported"


class TransportCodeError(LakescoreError):
    """A scored value (``scoring_status``, ``exclusion_reason``, a text class) that the Spark
    route's code table for its chain does not list (:mod:`lakescore.transport_codes`): it would
    otherwise be decoded as another value."""

    code = "transport_code_unknown"


class ReceiptUnreadableError(PublishError):
    """A publication's write returned, but the table shows no receipt for its app transaction
    version (the engine dropped ``userMetadata`` or the app transaction): it is never written again."""

    code = "receipt_unreadable"


class ChangeFeedReadError(LakescoreError):
    """A table's change data feed no longer covers the versions asked for (vacuumed change or data
    files, cleaned log, the feed not recorded for that range): a lost window. The score workflow
    turns it into ``cdf_recovery_required``. Any other failure to read a feed is a
    :class:`ChangeFeedQueryError` (:func:`lakescore.change_feed_errors.change_feed_error` tells them apart)."""

    code = "change_feed_unreadable"

    @classmethod
    def reading(cls, table: str, first: int, last: int, reason: str) -> ChangeFeedReadError:
        """The error for a reader's failure on versions ``first``..``last`` of ``table``; ``reason``
        is the line of the reader's error that says why (delta-rs, pyarrow or Delta Spark:
        :func:`lakescore.change_feed_errors.reason_of`)."""
        return cls(f"the change data feed of {table} cannot be read for versions {first}..{last} ({reason})",
                   table=table, reason=reason)


class ChangeFeedQueryError(LakescoreError):
    """Reading a table's change data feed failed for a reason other than a lost window (a column the
    read names that the table lacks, a bad version range, ...): the feed is there, so no recovery
    is needed; the message names the reader's own cause."""

    code = "change_feed_read_failed"

    @classmethod
    def reading(cls, table: str, first: int, last: int, reason: str, *,
                columns: list[str] | None = None) -> ChangeFeedQueryError:
        """The error for a reader's failure on versions ``first``..``last`` of ``table``; ``reason``
        as :meth:`ChangeFeedReadError.reading`."""
        read = f" (columns read: {', '.join(columns)})" if columns else ""
        return cls(f"reading the change data feed of {table} for versions {first}..{last} failed{read}: {reason}. "
                   "The feed still covers these versions (this is not a lost window, no recovery is needed): "
                   "fix that cause and run again", table=table, reason=reason)


class ProbeError(LakescoreError):
    """The admission probe failed: each problem names the part, the check and one fix."""

    code = "probe_failed"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("admission refused the model:\n" + "\n".join(f"  - {p}" for p in problems),
                         problems=problems)


class StepCheckError(ProbeError):
    """:func:`lakescore.admission.check_step` found a step that fails a check: each problem names the
    step, the check, the column to blame and one fix; ``check`` and ``column`` are the first's."""

    code = "step_check_failed"

    def __init__(self, step: str, problems: list[str], *, check: str, column: str = "") -> None:
        self.problems = problems
        LakescoreError.__init__(self, f"step '{step}' failed check_step:\n" + "\n".join(f"  - {p}" for p in problems),
                                problems=problems, step=step, check=check, column=column)


def spark_errors() -> tuple[type[BaseException], ...]:
    """The exception classes a Spark read or action raises: pyspark's own (classic and Spark
    Connect) and py4j's ``Py4JJavaError`` for JVM errors pyspark does not convert (Delta's
    ``DeltaFileNotFoundException``). Imported here, when called, so errors import without pyspark."""
    from pyspark.errors import PySparkException

    try:
        from py4j.protocol import Py4JJavaError
    except ImportError:  # a Spark Connect client without py4j
        return (PySparkException,)
    return (PySparkException, Py4JJavaError)
