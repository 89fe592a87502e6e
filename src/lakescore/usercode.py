"""References to user functions: saved by ``module:qualname`` with their source and its SHA-256.

User code lives in the project's ``src/features`` package, which the project's wheel installs
beside lakescore, so a worker imports it by name. Lambdas and nested functions are refused: they
have no stable name to reload by.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakescore.errors import LakescoreError


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
        """Import the function again (a worker does this once per process)."""
        return _import(f"{self.module}:{self.qualname}", what=f"function {self.module}:{self.qualname}")

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
