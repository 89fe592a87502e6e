"""Values and schemas written into Spark SQL text.

Where lakescore builds Spark SQL text around a value (a code table's literal array, a phase
record), the value is written by :func:`sql_literal`: a parsed literal that is the value again,
whatever characters it holds. A column name is written by :func:`quoted_name`, and the columns
of a new table by :func:`schema_ddl`.
"""

from __future__ import annotations

from typing import Any


def sql_literal(value: str) -> str:
    """``value`` as a Spark SQL string literal: quoted, its backslashes and single quotes escaped,
    and each ``$`` written as the escape ``\\u0024``, so that Spark's variable substitution
    (``spark.sql.variable.substitute``, on by default, which replaces ``${name}`` in SQL text before
    it is parsed) never reads a value's ``${...}`` as a variable. The escapes are those of Spark's
    default parser (``spark.sql.parser.escapedStringLiterals`` false).

    >>> print(sql_literal("it's ${x}"))
    'it\\'s \\u0024{x}'
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("$", "\\u0024") + "'"


def quoted_name(name: str) -> str:
    """``name`` as a Spark SQL identifier: in backticks, a backtick inside doubled.

    >>> print(quoted_name("p(late)"), quoted_name("a`b"))
    `p(late)` `a``b`
    """
    return "`" + name.replace("`", "``") + "`"


def schema_ddl(schema: Any) -> str:
    """The column list of ``CREATE TABLE <table> (<columns>)`` for a Spark ``StructType``: each
    field's quoted name (:func:`quoted_name`), its type (nested field names quoted too) and
    ``NOT NULL`` where the field is not nullable.

    Parameters
    ----------
    schema : pyspark.sql.types.StructType

    Returns
    -------
    str
        For example ``flight_id`` (not nullable) and ``probability`` give the text
        ``"`flight_id` bigint NOT NULL, `probability` double"``.
    """
    return ", ".join(f"{quoted_name(f.name)} {_ddl_type(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
                     for f in schema.fields)


def _ddl_type(kind: Any) -> str:
    """A Spark ``DataType`` in DDL: atomic types by their simple string, nested ones spelled out."""
    from pyspark.sql import types as T  # noqa: N812  (Spark only where a table is created)

    if isinstance(kind, T.StructType):
        return "struct<" + ", ".join(f"{quoted_name(f.name)}: {_ddl_type(f.dataType)}" for f in kind.fields) + ">"
    if isinstance(kind, T.ArrayType):
        return f"array<{_ddl_type(kind.elementType)}>"
    if isinstance(kind, T.MapType):
        return f"map<{_ddl_type(kind.keyType)}, {_ddl_type(kind.valueType)}>"
    return str(kind.simpleString())
