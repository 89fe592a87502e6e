"""Everything a score run needs, checked before any work: one error lists every problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lakescore.admission.certificate import check_environment, require_admitted
from lakescore.config import ProjectConfig
from lakescore.errors import (
    CertificateError,
    ConfigError,
    LakescoreError,
    ModelArtifactsMissingError,
    SparkPolarsUnsupportedError,
    TableFeatureUnsupportedError,
    UncertifiedModelError,
)
from lakescore.runtime.base import Tables
from lakescore.saved_models import chain_meta
from lakescore.thresholds import saved_decision_rule


@dataclass(frozen=True)
class ScorePlan:
    """What a score run will read and with which model."""

    source_table: str
    source_version: int
    model_name: str
    model_version: int
    model_uri: str
    input_columns: tuple[str, ...]
    record_keys: tuple[str, ...]
    certificate_sha256: str
    artifact_sha256: str
    warnings: tuple[str, ...] = ()  # what preflight foresees but does not refuse (see null_warnings)
    decision_threshold: str = ""  # which threshold the model's sealed chain applies (FittedChain.decision_rule)
    feature_lookups: tuple[dict[str, Any], ...] = ()  # the sealed chain's lookup specs (FeatureLookup.to_json)
    feature_tables: dict[str, int] = field(default_factory=dict)  # feature table -> version pinned for this run
    components: tuple[dict[str, str], ...] = ()  # a model set's components (lakescore.packaging.component_record)

    @property
    def lookups(self) -> tuple[Any, ...]:
        """The chain's :class:`lakescore.lookup.FeatureLookup` specs."""
        from lakescore.lookup import FeatureLookup

        return tuple(FeatureLookup.from_json(spec) for spec in self.feature_lookups)

    @property
    def lookup_record(self) -> list[dict[str, Any]]:
        """``[{"table": name, "version": n}, ...]``: the feature tables this run joins (summary, receipt)."""
        return [{"table": name, "version": int(version)} for name, version in self.feature_tables.items()]

    @property
    def source_columns(self) -> list[str]:
        """The columns read from the source: the inputs that no lookup adds, and the lookups' keys
        and timestamps (:func:`lakescore.lookup.lookup_inputs`)."""
        from lakescore.lookup import lookup_inputs

        return lookup_inputs(self.lookups, self.input_columns)


def preflight(project: ProjectConfig, tables: Tables) -> ScorePlan:
    """Resolve the model version and pin the source version, checking every precondition.

    Parameters
    ----------
    project : ProjectConfig
    tables : Tables
        Where the score source lives. MLflow must already point at the registry
        (``runtime.mlflow()``).

    Raises
    ------
    ConfigError
        Listing every problem: a source table that does not exist, a model/version/alias that does
        not exist, missing input or key columns, a model without an admitting certificate
        (``uncertified_model``), a Polars-trained chain on Spark (``spark_polars_unsupported``),
        a source column whose kind (number, boolean, string, datetime) differs from the signature's,
        or a source table with a Delta reader feature that the route's engine cannot read
        (``table_feature_unsupported``: delta-rs on the single-node route).

    Notes
    -----
    Nullability is not refused here: a null reaches the chain as a null (its recipe imputes it),
    and a single value of the wrong kind excludes only its row as ``invalid:<column>``
    (:mod:`lakescore.conform`, applied by the pyfunc on every route). Where a null cannot be
    scored — the recipe does not impute the column and the model cannot take NaN, so the chain
    excludes the row as ``invalid:<feature>`` — and the pinned source holds such nulls, the plan
    carries a warning naming the column, its null rows, the training rows' nulls and the fix
    (:func:`null_warnings`); the run goes on and the score summary lists it under ``warnings``.
    """
    from lakescore.packaging import read_certificate, resolve_version

    inf = project.inference
    keys = tuple(project.training.data.record_keys)
    problems: list[str] = []
    source_version = -1
    columns: set[str] = set()
    try:
        source_version = tables.table_version(inf.score_source_table)
        columns = set(tables.table_columns(inf.score_source_table))
        _check_readable(project, tables, source_version)
    except TableFeatureUnsupportedError as err:
        problems.append(f"{err.code}: {err}")
    except LakescoreError as err:
        problems.append(f"{project.shown('inference')}: score_source_table {inf.score_source_table!r}: {err}")
    name = project.training.registry.model_name
    version, uri, cert, rule, lookups = -1, "", None, "", ()
    try:
        version = resolve_version(name, selection=inf.score_model_selection, version=inf.model_version,
                              alias=project.training.registry.alias)
        uri = f"models:/{name}/{version}"
        cert = read_certificate(uri)
        require_admitted(cert)
        check_environment(cert)  # the driver refuses at once what every worker would refuse later
        meta = chain_meta(uri)
        rule = meta.get("decision_rule") or saved_decision_rule(meta)  # a model set's set.json says it
        lookups = tuple(x["spec"] for x in meta.get("feature_lookups", []))
        if inf.batch_compute == "spark" and meta.get("engine", "pandas") == "polars":
            raise SparkPolarsUnsupportedError(
                f"model {name} v{version} was trained on Polars frames; Spark workers hand the model pandas "
                "batches. Use batch_compute: single_node, or retrain with defaults.engine: pandas.")
    except (UncertifiedModelError, ModelArtifactsMissingError, SparkPolarsUnsupportedError, CertificateError) as err:
        problems.append(f"{err.code}: {err}")
    except ConfigError as err:
        problems += err.problems
    except LakescoreError as err:
        problems.append(f"{project.shown('inference')}: score_model_selection {inf.score_model_selection!r}: {err}")
    inputs: tuple[str, ...] = ()
    config: dict[str, Any] = {}
    if uri and cert is not None:
        kinds, config = _signature_kinds(uri)
        inputs = tuple(kinds)
        if columns:
            from lakescore.lookup import FeatureLookup, lookup_inputs

            needed = lookup_inputs([FeatureLookup.from_json(x) for x in lookups], inputs)  # type: ignore[var-annotated]  # lookups starts as an empty tuple
            missing = [c for c in dict.fromkeys((*keys, *needed)) if c not in columns]
            if missing:
                problems.append(f"{project.shown('inference')}: score_source_table {inf.score_source_table!r} lacks "
                                f"column(s) {missing} that model {name} v{version} needs; available: "
                                f"{', '.join(sorted(columns))}")
            source_kinds = {c: _kind_of_dtype(t) for c, t in tables.empty_frame(inf.score_source_table).dtypes.items()}
            problems += [
                f"{project.shown('inference')}: score_source_table {inf.score_source_table!r} column {c!r} holds "
                f"{source_kinds[c]} values; model {name} v{version} reads {kind}. Cast it in the source table, "
                "or retrain on the source's types."
                for c, kind in kinds.items() if c in source_kinds and source_kinds[c] != kind]
    feature_tables: dict[str, int] = {}
    for spec in lookups:  # type: ignore[var-annotated]  # as above
        try:  # pinned now, like the source: the run joins each feature table at its current version
            feature_tables[spec["table_name"]] = tables.table_version(spec["table_name"])
        except LakescoreError as err:
            problems.append(f"model {name} v{version} feature lookup table {spec['table_name']!r}: {err}")
    if problems:
        raise ConfigError(problems)
    assert cert is not None  # problems is empty only when the certificate was read
    warnings = null_warnings(tables, inf.score_source_table, source_version, config,
                             where=f"{project.shown('inference')}: score_source_table {inf.score_source_table!r}",
                             model=f"model {name} v{version}")
    return ScorePlan(inf.score_source_table, source_version, name, version, uri, inputs, keys,
                     cert.digest, cert.artifact_sha256, tuple(warnings), decision_threshold=rule,
                     feature_lookups=lookups, feature_tables=feature_tables,
                     components=tuple(config.get("components", ())))


def null_warnings(tables: Tables, source: str, version: int, config: dict[str, Any], *, where: str,
                  model: str) -> list[str]:
    """One line per source column whose nulls the model will exclude instead of scoring.

    Parameters
    ----------
    tables : Tables
        Where the score source lives.
    source : str
        The score source table.
    version : int
        Its pinned version.
    config : dict
        The logged model's config: ``null_outcomes`` (input column -> the reason a row with that
        column null gets, or None when it is still scored; see
        :func:`lakescore.packaging.null_outcomes`) and ``training_nulls`` (null rows per input
        column in training; absent for models logged before it was recorded).
    where, model : str
        How the messages name the source table and the model.

    Returns
    -------
    list of str
        For each column that the source schema declares nullable, that holds null rows at the pinned
        version, and whose null makes the chain exclude the row as ``invalid:<...>``: what will
        happen and how to score those rows instead. Eligibility rules that exclude a null on purpose
        (``ineligible:<rule>``) are not warned about.
    """
    outcomes = config.get("null_outcomes") or {}
    trained = config.get("training_nulls")
    nullable = {f.name for f in tables.table_schema(source, version=version) if f.nullable}
    lines = []
    for column, reason in outcomes.items():
        if not (reason and reason.startswith("invalid:") and column in nullable):
            continue
        nulls = tables.null_rows(source, column, version=version)  # reads statistics and the one column only
        if nulls:
            seen = ("training saw no nulls in it" if trained and not trained.get(column)
                    else "training nulls were not recorded" if trained is None
                    else f"training had {trained.get(column)} null rows in it")
            lines.append(f"{where} column {column!r} has {nulls} null row(s) at v{version}; {model} "
                         f"cannot score a null there ({seen}, the recipe does not impute it and the model "
                         f"takes no NaN), so those rows will be excluded as {reason}. To score them, impute "
                         f"{column!r} in the recipe (e.g. SimpleImputer) and retrain.")
    return lines


def _check_readable(project: ProjectConfig, tables: Tables, version: int) -> None:
    """Refuse a source whose Delta reader features the route's engine cannot read (so it never
    reads the Parquet files behind them, nor fails half-way)."""
    inf = project.inference
    engine = "spark" if inf.batch_compute == "spark" else "delta-rs"
    unreadable = tables.unreadable_features(inf.score_source_table, version=version, engine=engine)  # type: ignore[arg-type]  # 'spark' or 'delta-rs'
    if unreadable:
        import deltalake  # only to name the reader's version

        raise TableFeatureUnsupportedError(
            f"score source {inf.score_source_table} v{version} needs Delta reader feature(s) {sorted(unreadable)} "
            f"that the single-node route's reader (delta-rs {deltalake.__version__}) cannot read. Set batch_compute: "
            f"spark in {project.shown('inference')} (Spark reads it through Delta Lake).",
            table=inf.score_source_table, features=sorted(unreadable))


def _signature_kinds(model_uri: str) -> tuple[dict[str, str], dict[str, Any]]:
    """Input column -> ``number | boolean | string | datetime | other`` of the model's inputs, and
    the pyfunc's model config (:func:`lakescore.packaging.logged_model_config`)."""
    from lakescore.packaging import logged_model_config

    kinds = {"long": "number", "integer": "number", "double": "number", "float": "number",
             "boolean": "boolean", "string": "string", "datetime": "datetime"}
    inputs, config = logged_model_config(model_uri)
    return {name: kinds.get(kind, "other") for name, kind in inputs.items()}, config


def _kind_of_dtype(dtype: Any) -> str:
    """The same kinds for a pandas dtype of the source table."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(dtype):
        return "boolean"
    if pd.api.types.is_numeric_dtype(dtype):
        return "number"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "datetime"
    return "string" if pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype) else "other"
