"""The deliberately broken user code that each admission check must catch.

``broken_steps.py`` and ``broken_user_code.py`` sit beside these tests and are imported by name, as
a project's own ``lakescore_project`` package is: pytest puts this folder on the import path for its test
modules (the default ``prepend`` import mode), so a fresh subprocess of the probe finds them too.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def broken() -> ModuleType:
    """The ``broken_steps`` module: steps with module state, batch statistics, shared caches."""
    return importlib.import_module("broken_steps")
