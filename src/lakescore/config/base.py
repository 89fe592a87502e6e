"""What the five config files share: table names and their ``${var}`` placeholders, the number
ranges, the strict model every file is, and reading one file with every problem collected.

Every problem is collected as one line (pandera's lazy validation), each as
``config/inference.yml: spark_udf_prediction_batch_rows must be between 1 and 100000; got 0``;
:func:`lakescore.config.load_project` raises them together as one
:class:`~lakescore.errors.ConfigError`.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, ValidationInfo, WrapValidator

TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A table name may write the catalog and schema as ${catalog} / ${schema}; the values come from
# --catalog / --schema (the bundle passes its ${var.catalog} / ${var.schema}), else these defaults,
# which are also the bundle variables' defaults and what the local demo loads into.
# ${source_catalog} / ${source_schema} name where the tables a run only reads live (the score
# source, the training, feature and label tables): --source-catalog / --source-schema, else the
# run's own catalog / schema, so a local run reads and writes one schema.
DEFAULT_CATALOG = "main"
DEFAULT_SCHEMA = "flights"
PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
PLACEHOLDERS = ("catalog", "schema", "source_catalog", "source_schema")
DEFAULT_NAMESPACE = {"catalog": DEFAULT_CATALOG, "schema": DEFAULT_SCHEMA,
                     "source_catalog": DEFAULT_CATALOG, "source_schema": DEFAULT_SCHEMA}

# PyYAML's safe loader in C (libyaml) where the wheel carries it: the same documents, about ten
# times faster than the pure-Python one (every command reads five files before it starts)
SAFE_LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader

# the columns every scored frame has; a rule or composed column must not take their names
FIXED_OUTPUTS = ("prediction", "probability", "scoring_status", "exclusion_reason")

# inference.yml score_model_selection and serving.yml model_selection: which registered version runs
ModelSelection = Literal["pinned_version", "champion"]


def between(lo: float, hi: float) -> WrapValidator:
    """A number in [lo, hi]. Booleans and text are refused (YAML ``yes`` or ``"5000"`` are not
    numbers), and a wrong type gets the same message as a wrong value: what is allowed."""

    def check(value: Any, handler: Any) -> Any:
        if isinstance(value, (bool, str)):
            raise ValueError(f"must be a number between {lo} and {hi}")
        try:
            number = handler(value)
        except ValidationError:
            raise ValueError(f"must be a whole number between {lo} and {hi}") from None
        if not lo <= number <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return number

    return WrapValidator(check)


def _table_name(value: str, info: ValidationInfo) -> str:
    """A three-part name, after ``${catalog}`` / ``${schema}`` / ``${source_catalog}`` /
    ``${source_schema}`` are replaced with the run's values."""
    namespace = info.context or DEFAULT_NAMESPACE
    unknown = [m.group(0) for m in PLACEHOLDER.finditer(value) if m.group(1) not in namespace]
    if unknown:
        raise ValueError(f"uses the unknown placeholder {unknown[0]} (write ${{catalog}}, ${{schema}}, "
                         "${source_catalog} or ${source_schema}, or the name itself)")
    resolved = PLACEHOLDER.sub(lambda m: namespace[m.group(1)], value)
    if not TABLE_NAME.match(resolved):
        shown = f" (resolved to {resolved!r})" if resolved != value else ""
        raise ValueError(f"must be a three-part table name catalog.schema.table (letters, digits, _){shown}")
    return resolved


TableName = Annotated[str, AfterValidator(_table_name)]


class StrictModel(BaseModel):
    """A config file or one of its blocks: unknown keys are errors, values are frozen.

    ``removed_keys`` (on a file's model) maps a key path that was removed to why, and the fix;
    ``renamed_keys`` maps an older top-level key name, still read, to its current name."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    removed_keys: ClassVar[dict[tuple[str, ...], str]] = {}
    renamed_keys: ClassVar[dict[str, str]] = {}


Model = TypeVar("Model", bound=StrictModel)


def namespace_of(given: dict[str, str | None], problems: list[str]) -> dict[str, str]:
    """The placeholder values; a value that is not an identifier is a problem (and the default stands in).

    ``source_catalog`` / ``source_schema`` not given take the run's ``catalog`` / ``schema``."""
    namespace = dict(DEFAULT_NAMESPACE)
    for key in PLACEHOLDERS:
        value = given.get(key)
        if value is None:
            if key.startswith("source_"):
                namespace[key] = namespace[key.removeprefix("source_")]
            continue
        if IDENTIFIER.match(value):
            namespace[key] = value
        else:
            flag = "--" + key.replace("_", "-")
            problems.append(f"{flag} must be a Unity Catalog name of letters, digits and _ (not starting with "
                            f"a digit); got {value!r} (set the bundle variable {key} to such a name)")
    return namespace


def _describe(err: Any, model: type[StrictModel]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    if not loc and kind == "value_error":  # a whole-file rule (e.g. model or model_set): its message says it all
        return str(err["msg"]).removeprefix("Value error, ")
    removed = model.removed_keys.get(tuple(str(p) for p in err["loc"]))
    if kind == "extra_forbidden" and removed:
        return f"key '{loc}' was removed: {removed}; got {err.get('input')!r}"
    if kind == "extra_forbidden" and loc in model.renamed_keys:  # left in place by renamed(): both were given
        new = model.renamed_keys[loc]
        return (f"{loc} and {new} are one key ({loc} is its older name) and both are given; got {loc}: "
                f"{err.get('input')!r} (keep {new} and remove {loc})")
    if kind == "extra_forbidden":
        parent = _fields_at(model, err["loc"][:-1])
        hint = difflib.get_close_matches(str(err["loc"][-1]), parent, n=1)
        fix = f"did you mean '{hint[0]}'?" if hint else f"allowed keys: {', '.join(sorted(parent))}"
        return f"unknown key '{loc}' ({fix})"
    if kind == "missing":
        return f"missing required key '{loc}'"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if kind == "literal_error":
        msg = "must be " + msg.removeprefix("Input should be ")
    return f"{loc} {msg}; got {err.get('input')!r}"


def renamed(data: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """``data`` with each older key name in ``names`` (old -> current) read as its current name.

    When a file gives both names of one key, the older one is left in place, so that it is refused
    as a key that is not allowed, and the message says that both were given.
    """
    return {key if names.get(key) in data else names.get(key, key): value for key, value in data.items()}


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):  # an item of a list: its element type
            args = [a for a in get_args(current) if hasattr(a, "model_fields")]
            current = args[0] if args else None
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    fields = getattr(current, "model_fields", {})
    return [f.alias or name for name, f in fields.items()]


def load_file(path: Path, model: type[Model], problems: list[str], *,
              namespace: dict[str, str] | None = None) -> Model | None:
    """Read and validate one YAML file, appending every problem to ``problems``.

    Parameters
    ----------
    path : Path
        The file, e.g. ``config/inference.yml``; messages name it as ``<folder>/<file>``.
    model : type of StrictModel
        The file's schema, e.g. :class:`lakescore.config.InferenceConfig`.
    problems : list of str
        Where every problem found is appended, one line each.
    namespace : dict of str to str, optional
        The values of the placeholders in table names (``PLACEHOLDERS``; default
        ``DEFAULT_NAMESPACE``: ``DEFAULT_CATALOG`` / ``DEFAULT_SCHEMA`` for both pairs).

    Returns
    -------
    StrictModel or None
        The validated model, or None when the file has problems.
    """
    shown = f"{path.parent.resolve().name}/{path.name}"
    if not path.exists():
        problems.append(f"{shown}: file not found; create it (see the template in config/)")
        return None
    try:
        raw = yaml.load(path.read_text(), Loader=SAFE_LOADER) or {}
    except yaml.YAMLError as err:
        problems.append(f"{shown}: not valid YAML ({err}); fix the syntax")
        return None
    if not isinstance(raw, dict):
        problems.append(f"{shown}: must be a mapping of keys; got {type(raw).__name__}")
        return None
    try:
        return model.model_validate(raw, context=namespace)
    except ValidationError as err:
        problems.extend(f"{shown}: {_describe(e, model)}" for e in err.errors())
        return None
