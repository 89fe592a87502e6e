"""Lint of user code: the saved source of a custom step's ``apply`` (or a scoring rule), and the
helpers it calls in the same file, read with ``ast``.

It rejects what makes a row's answer depend on its batch or on the process:

- whole-batch calls on the input frame: ``.mean() .sum() .max() .min() .std() .median()`` without
  ``axis=1`` (or a positional ``1``), and always ``.groupby() .sort_values() .value_counts()
  .duplicated() .quantile() .nunique()``;
- calls that read other (neighbouring) rows: fills by position (``.ffill() .bfill() .pad()
  .backfill()``, ``.fillna(method=...)``), ``.interpolate()``, cumulative ``.cumsum() .cumprod()
  .cummax() .cummin()``, windows ``.rolling() .expanding() .ewm()``, ``.shift() .diff()
  .pct_change() .rank()``;
- ``.any()``/``.all()``/``len(df)``/``df.shape[0]``, except in an ``if`` whose body only raises or
  returns (the usual empty-input guard);
- reads of ``df.index``;
- writes to shared process state: ``global``, attributes of module-level objects (classes,
  functions, modules), items of module-level variables (``CACHE[key] = ...``) and their mutating
  methods (``CACHE.setdefault(...)``, ``.update``, ``.append``, ...), ``os.environ``, mutated
  default arguments, ``globals()``.

Row-wise forms pass: ``.str``/``.dt`` methods, ``axis=1``, ``df.shape[1]``, and ``index=df.index``
as a keyword (aligning a new Series with the frame, which reads no index value). ``learn()`` is not
linted. There is no switch to turn the lint off.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AXIS_OK = {"mean", "sum", "max", "min", "std", "median", "any", "all", "var", "prod", "count"}
ALWAYS = {"groupby", "sort_values", "value_counts", "duplicated", "quantile", "nunique", "drop_duplicates",
          "sample", "nlargest", "nsmallest", "mode"}
NEIGHBOURS = {"ffill", "bfill", "pad", "backfill", "interpolate", "cumsum", "cumprod", "cummax", "cummin",
              "rolling", "expanding", "ewm", "shift", "diff", "pct_change", "rank", "cumcount"}
FILL_BY_POSITION = {"fillna", "replace", "reindex"}  # with method=... they copy a neighbour's value
GUARD_ONLY = {"any", "all"}
MUTATORS = {"append", "extend", "update", "add", "insert", "setdefault", "pop", "clear", "remove"}
ROW_ACCESSORS = {"str", "dt"}
COLUMN_ATTRS = {"columns", "dtypes"}  # len(df.columns) counts columns, not rows

FIX_STATISTIC = "Compute it in learn() and read it from state in apply()."
FIX_ORDER = "Read column values only; never the row order, the index or the batch size."
FIX_RULE_STATISTIC = "Pass it to the rule in its params (scoring.yml), computed once from training data."
FIX_STATE = "Keep state in learn()'s return value; apply() must not write anything outside the frame."
FIX_NEIGHBOURS = ("Read only the row's own values: fill a gap with a value learned in learn() and read from "
                  "state (e.g. fillna(state['dep_delay'])), never from the rows around it.")


@dataclass(frozen=True)
class LintFinding:
    """One lint failure: where, what, and the fix."""

    part: str
    file: str
    line: int
    call: str
    rule: str
    fix: str

    @property
    def message(self) -> str:
        what = {"batch_statistic": "reads a batch statistic", "batch_order": "depends on the batch",
                "index": "reads the index", "shared_state": "writes shared process state",
                "other_rows": "reads other rows"}[self.rule]
        return f"{self.part} {what} ({self.file} line {self.line}: {self.call}). {self.fix}"


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _through_accessor(node: ast.AST) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Attribute) and node.attr in ROW_ACCESSORS:
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _fills_by_position(call: ast.Call) -> bool:
    """``fillna``/``replace``/``reindex`` with ``method=`` (other than None) copy a neighbour's value."""
    return any(kw.arg == "method" and not (isinstance(kw.value, ast.Constant) and kw.value.value is None)
               for kw in call.keywords)


def _after_window(node: ast.AST) -> bool:
    """``df['x'].rolling(3).mean()``: the window call is the finding; its aggregate is not another."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in NEIGHBOURS


def _row_wise(call: ast.Call) -> bool:
    for kw in call.keywords:
        if kw.arg == "axis" and isinstance(kw.value, ast.Constant) and kw.value.value in (1, "columns"):
            return True
    return bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value in (1, "columns")


class _Visitor(ast.NodeVisitor):
    def __init__(self, fn: ast.FunctionDef, *, part: str, file: str, offset: int, module_names: set[str],
                 module_variables: set[str]):
        self.part, self.file, self.offset = part, file, offset
        self.module_names, self.module_variables = module_names, module_variables
        args = fn.args.posonlyargs + fn.args.args
        self.frames = {args[0].arg} if args else set()
        defaults = fn.args.defaults
        self.mutable_defaults = {
            a.arg for a, d in zip(args[len(args) - len(defaults):], defaults)
            if isinstance(d, (ast.List, ast.Dict, ast.Set, ast.Call))
        }
        self.locals = {a.arg for a in args + fn.args.kwonlyargs}
        self.guards: set[int] = set()
        self.aligned: set[int] = set()  # df.index passed as index=...: alignment, not a read
        self.findings: list[LintFinding] = []
        self._collect_locals_and_guards(fn)

    def _collect_locals_and_guards(self, fn: ast.FunctionDef) -> None:
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
                for target in targets:
                    for name in ast.walk(target) if target is not None else []:
                        if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                            self.locals.add(name.id)
                if isinstance(node, ast.Assign) and isinstance(_root(node.value), ast.Name) \
                        and _root(node.value).id in self.frames:  # type: ignore[attr-defined]  # _root() is an ast.Name here: checked on the line above
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.frames.add(target.id)
            if isinstance(node, ast.If) and all(isinstance(s, (ast.Return, ast.Raise)) for s in node.body):
                self.guards.update(id(n) for n in ast.walk(node.test))

    def _add(self, node: ast.AST, rule: str, fix: str) -> None:
        if fix == FIX_STATISTIC and self.part.startswith("Scoring rule"):
            fix = FIX_RULE_STATISTIC  # rules have no learn()/apply()
        self.findings.append(LintFinding(self.part, self.file, self.offset + node.lineno - 1,  # type: ignore[attr-defined]  # the nodes reported are expressions or statements: they carry lineno
                                         ast.unparse(node), rule, fix))

    def _shared(self, node: ast.AST) -> bool:
        """``node`` is a mutable default argument, a module-level variable or ``os.environ``."""
        if isinstance(node, ast.Name):
            return node.id in self.mutable_defaults or (node.id in self.module_variables
                                                        and node.id not in self.locals)
        return ast.unparse(node) == "os.environ"

    def _on_frame(self, node: ast.AST) -> bool:
        root = _root(node)
        return isinstance(root, ast.Name) and root.id in self.frames

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.aligned.update(id(kw.value) for kw in node.keywords if kw.arg == "index")
        if isinstance(func, ast.Attribute) and self._on_frame(func.value) and not _through_accessor(func.value):
            name = func.attr
            if name in NEIGHBOURS or (name in FILL_BY_POSITION and _fills_by_position(node)):
                self._add(node, "other_rows", FIX_NEIGHBOURS)
            elif name in ALWAYS:
                self._add(node, "batch_order" if name == "sort_values" else "batch_statistic",
                          FIX_ORDER if name == "sort_values" else FIX_STATISTIC)
            elif name in AXIS_OK and not _row_wise(node) and not _after_window(func.value):
                if not (name in GUARD_ONLY and id(node) in self.guards):
                    self._add(node, "batch_statistic", FIX_STATISTIC)
        if isinstance(func, ast.Name) and func.id == "len" and node.args and self._on_frame(node.args[0]) \
                and not (isinstance(node.args[0], ast.Attribute) and node.args[0].attr in COLUMN_ATTRS) \
                and id(node) not in self.guards:
            self._add(node, "batch_order", FIX_ORDER)
        if isinstance(func, ast.Name) and func.id == "globals":
            self._add(node, "shared_state", FIX_STATE)
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS and self._shared(func.value):
            self._add(node, "shared_state", FIX_STATE)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == "index" and isinstance(node.ctx, ast.Load) and self._on_frame(node.value) \
                and id(node) not in self.aligned:
            self._add(node, "index", FIX_ORDER)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        value = node.value
        if isinstance(value, ast.Attribute) and value.attr == "shape" and self._on_frame(value.value) \
                and isinstance(node.slice, ast.Constant) and node.slice.value == 0 and id(node) not in self.guards:
            self._add(node, "batch_order", FIX_ORDER)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self._add(node, "shared_state", FIX_STATE)

    def _check_target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root(target)
            text = ast.unparse(target)
            if text.startswith("os.environ"):
                self._add(node, "shared_state", FIX_STATE)
            elif isinstance(root, ast.Name) and (root.id in self.mutable_defaults or (
                    isinstance(target, ast.Subscript) and self._shared(root))):
                self._add(node, "shared_state", FIX_STATE)
            elif isinstance(target, ast.Attribute) and isinstance(root, ast.Name) \
                    and (root.id in self.module_names or root.id not in self.locals):
                self._add(node, "shared_state", FIX_STATE)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node)
        self.generic_visit(node)



def _module_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _module_variables(tree: ast.Module) -> set[str]:
    """Names bound by assignments at module level (the objects a mutating call would share)."""
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def lint_source(source: str, function: str, *, part: str, file: str = "<source>", first_line: int = 1,
                module_source: str | None = None) -> list[LintFinding]:
    """Lint ``function`` in ``source`` and the same-file helpers it calls.

    Parameters
    ----------
    source : str
        Source text of the function (as saved with the model).
    function : str
        Its name.
    part : str
        How findings name it, e.g. ``"Custom step 'fill_values'"``.
    file, first_line : str, int
        Where the function starts, so findings give real line numbers.
    module_source : str, optional
        The whole file, to find and lint helpers the function calls.

    Returns
    -------
    list of LintFinding (empty when clean).
    """
    tree = ast.parse(module_source) if module_source else ast.parse(textwrap.dedent(source))
    functions = _module_functions(tree)
    names, variables = _module_names(tree), _module_variables(tree)
    if function not in functions:
        tree = ast.parse(textwrap.dedent(source))
        functions.update(_module_functions(tree))
        first_line = first_line if module_source is None else first_line
    todo, seen, findings = [function], set(), []
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        fn = functions[name]
        offset = 1 if module_source else first_line - fn.lineno + 1
        visitor = _Visitor(fn, part=part, file=file, offset=offset, module_names=names,
                           module_variables=variables)
        visitor.visit(fn)
        findings += visitor.findings
        todo += [n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    return findings


def lint_function(fn: Callable[..., Any], *, part: str) -> list[LintFinding]:
    """Lint a live user function (its file is read to find helpers and real line numbers)."""
    path = inspect.getsourcefile(fn) or "<unknown>"
    module_source = Path(path).read_text() if Path(path).exists() else None
    return lint_source(inspect.getsource(fn), fn.__name__, part=part, file=Path(path).name,
                       first_line=fn.__code__.co_firstlineno, module_source=module_source)
