"""References to user functions: saved by ``module:qualname`` with their source and its SHA-256.

User code lives in the project's ``src/lakescore_project`` package (:data:`PROJECT_PACKAGE`), which
the project's wheel installs beside lakescore, so a worker imports it by name. Lambdas and nested
functions are refused: they have no stable name to reload by.

The package was once called ``features`` (:data:`FORMER_PROJECT_PACKAGE`), a generic name that
another library, a notebook's ``features.py`` or a Git folder on ``sys.path`` can shadow on a shared
cluster. A model saved then names its functions ``features.<module>``: :meth:`FunctionRef.load`
loads them from ``lakescore_project.<module>`` (never from whatever ``features`` a cluster has), so
registered models keep scoring without being re-saved. A config that still names the old package
is refused by :func:`former_package_problem`, naming the new reference.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakescore.errors import LakescoreError

PROJECT_PACKAGE = "lakescore_project"
"""The top-level package of the project's own code (``src/lakescore_project``)."""
FORMER_PROJECT_PACKAGE = "features"
"""The project package's former name, still named by models saved before the rename."""


def current_module(module: str) -> str:
    """The module a saved reference's ``module`` is imported from today.

    ``features`` and ``features.<sub>`` (the project package's former name) map to
    ``lakescore_project`` and ``lakescore_project.<sub>``; every other module is itself.

    Parameters
    ----------
    module : str
        Dotted module name as saved, e.g. ``"features.preprocessing"``.

    Returns
    -------
    str
        E.g. ``"lakescore_project.preprocessing"``.
    """
    top, dot, rest = module.partition(".")
    return PROJECT_PACKAGE + dot + rest if top == FORMER_PROJECT_PACKAGE else module


def former_package_problem(ref: str) -> str | None:
    """Why a configured reference that names the former project package cannot be used, or None.

    Parameters
    ----------
    ref : str
        ``module:attribute`` or a dotted module, as written in a config file.

    Returns
    -------
    str or None
        E.g. ``"'features.scoring' names the project package by its former name 'features'; write
        'lakescore_project.scoring' (the code lives in src/lakescore_project)"``.
    """
    module = ref.partition(":")[0]
    if module.partition(".")[0] != FORMER_PROJECT_PACKAGE:
        return None
    new = current_module(module) + ref[len(module):]
    return (f"'{ref}' names the project package by its former name '{FORMER_PROJECT_PACKAGE}'; write "
            f"'{new}' (the code lives in src/{PROJECT_PACKAGE})")


def refuse_former_package(ref: str) -> str:
    """Config validator: return ``ref`` unchanged, or raise ``ValueError`` (collected into the
    config file's :class:`~lakescore.errors.ConfigError`) when it names the former project package
    (message: :func:`former_package_problem`)."""
    problem = former_package_problem(ref)
    if problem:
        raise ValueError(problem)
    return ref


class UserCodeError(LakescoreError):
    """A user function cannot be saved or found again by name."""

    code = "user_code_invalid"


@dataclass(frozen=True)
class FunctionRef:
    """A saved user function: where it lives and exactly what its source was."""

    module: str
    qualname: str
    source: str
    source_sha256: str

    @classmethod
    def of(cls, fn: Callable[..., Any], *, what: str) -> FunctionRef:
        """Reference ``fn`` by name.

        Raises
        ------
        UserCodeError
            For a lambda or a nested function ("define a named function at module level").
        """
        qualname = getattr(fn, "__qualname__", "")
        if getattr(fn, "__name__", "") == "<lambda>" or "<locals>" in qualname or not qualname:
            raise UserCodeError(
                f"{what} is given a lambda or nested function ({qualname or fn!r}); lakescore saves "
                "functions by name. Define a named function at module level and pass it instead."
            )
        source = inspect.getsource(fn)
        return cls(fn.__module__, qualname, source, hashlib.sha256(source.encode()).hexdigest())

    @classmethod
    def resolve_name(cls, dotted: str, *, what: str) -> FunctionRef:
        """Reference the function named ``module:qualname`` (or ``module.function``)."""
        return cls.of(_import(dotted, what=what), what=what)

    def load(self) -> Callable[..., Any]:
        """Import the function again (a worker does this once per process).

        A reference saved under the former package name (``features.<module>``) is imported from
        :data:`PROJECT_PACKAGE` (see :func:`current_module`).

        Raises
        ------
        UserCodeError
            When the module or function is missing (naming the saved reference and, for the former
            package name, the module it was looked for in).
        """
        module = current_module(self.module)
        what = f"function {self.module}:{self.qualname}"
        if module != self.module:
            what += f" (saved under the project package's former name; loaded from {module})"
        return _import(f"{module}:{self.qualname}", what=what)

    def to_json(self) -> dict[str, str]:
        return {"module": self.module, "qualname": self.qualname, "source": self.source,
                "source_sha256": self.source_sha256}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> FunctionRef:
        return cls(data["module"], data["qualname"], data["source"], data["source_sha256"])


def import_object(dotted: str, *, what: str) -> Any:
    """Import the object named ``module:qualname`` (or ``module.name``).

    Raises
    ------
    UserCodeError
        Naming ``what`` and the reference, when the module or attribute is missing.
    """
    module_name, sep, qualname = dotted.partition(":")
    if not sep:
        module_name, _, qualname = dotted.rpartition(".")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as err:
        raise UserCodeError(
            f"{what}: cannot import '{dotted}' ({err}). Check the module and attribute name, and "
            "that the project package is installed (make install)."
        ) from err
    return obj


def _import(dotted: str, *, what: str) -> Callable[..., Any]:
    obj = import_object(dotted, what=what)
    if not callable(obj):
        raise UserCodeError(f"{what}: '{dotted}' is a {type(obj).__name__}, not a function")
    return obj
