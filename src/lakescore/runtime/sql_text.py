"""Values written into Spark SQL text as string literals.

Where lakescore builds Spark SQL text around a value (a code table's literal array, a phase
record), the value is written by :func:`sql_literal`: a parsed literal that is the value again,
whatever characters it holds. Identifiers are quoted elsewhere (with backticks).
"""

from __future__ import annotations


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
