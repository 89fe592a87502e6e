"""A canonical SHA-256 of a Python value's content, stable across processes and save/load.

Fingerprints seal a fitted model in its certificate, and every Spark worker recomputes them after
loading the artifact, so the digest may depend only on content: never on ``repr``, ``id``, a memory
address, hash randomisation or dict insertion order. Every value is fed as a typed,
length-prefixed record:

- ``None``, ``bool``, ``int``, ``float`` (``float.hex``, so ``-0.0`` and each NaN payload differ
  from their neighbours), ``complex``, ``str`` and ``bytes`` by their exact content;
- numpy scalars, dtypes (``dtype.descr``) and arrays (dtype, shape and C-order bytes; object
  arrays element by element; structured arrays field by field, because the padding bytes between
  fields are uninitialised memory: scikit-learn's ``Tree.nodes`` has 7 such bytes per node);
- ``dict`` entries sorted by the digest of their key, ``set`` elements sorted by their digest,
  ``list`` and ``tuple`` in order;
- classes and functions by ``module.qualname``;
- anything else by what pickle would save of it (``__reduce_ex__(4)``: the constructor's name, its
  arguments and its state), the rule that makes scikit-learn's Cython ``Tree`` and
  ``KDTree`` objects, loss objects and random states digestible by content. The one exception:
  a KDTree/BallTree's query counters, which grow with every prediction, are left out.

A value that pickle itself cannot describe raises :class:`~lakescore.errors.FingerprintError`
naming where in the value it sits, instead of falling back to text that might hold an address.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import Any

from lakescore.errors import FingerprintError

# ensembles and estimators nest; a model deeper than this is a cycle, not a model
_MAX_DEPTH = 64


def content_digest(value: Any, *, special: Callable[[Any], bytes | None] | None = None) -> str:
    """SHA-256 (hex, 64 characters) of ``value``'s content under the rules of the module docstring.

    Parameters
    ----------
    value : any
        The value to digest (a fitted estimator, its state, plain data).
    special : callable, optional
        Called on every nested value first; when it returns bytes, those bytes stand for the value
        (used for native boosters, whose saved model is their content).

    Raises
    ------
    FingerprintError
        A nested value that pickle cannot describe (for example an open file or a lock), naming its
        path in ``value`` and its type.
    """
    digest = hashlib.sha256()
    _Feeder(digest, special).feed(value, "model", 0)
    return digest.hexdigest()


class _Feeder:
    def __init__(self, digest: Any, special: Callable[[Any], bytes | None] | None) -> None:
        self.digest = digest
        self.special = special

    def record(self, tag: str, payload: bytes) -> None:
        self.digest.update(tag.encode() + b":" + struct.pack("<Q", len(payload)) + payload)

    def feed(self, value: Any, path: str, depth: int) -> None:
        import numpy as np  # arrays are the bulk of a fitted model

        if depth > _MAX_DEPTH:
            raise FingerprintError(f"{path} nests deeper than {_MAX_DEPTH} levels (a reference cycle?); "
                                   "models with cyclic state cannot be fingerprinted", path=path)
        if self.special is not None:
            native = self.special(value)
            if native is not None:
                self.record("native", native)
                return
        if value is None or isinstance(value, bool):
            self.record("const", repr(value).encode())  # None / True / False: fixed literals
        elif isinstance(value, int):
            self.record("int", str(int(value)).encode())
        elif isinstance(value, float):
            self.record("float", float(value).hex().encode())
        elif isinstance(value, complex):
            self.record("complex", f"{value.real.hex()},{value.imag.hex()}".encode())
        elif isinstance(value, str):
            self.record("str", value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, (bytes, bytearray, memoryview)):
            self.record("bytes", bytes(value))
        elif isinstance(value, np.dtype):
            self.record("dtype", str(value.descr).encode())
        elif isinstance(value, np.generic):
            self.record("npscalar", str(value.dtype.descr).encode() + b"|" + value.tobytes())
        elif isinstance(value, np.ndarray):
            self._array(value, path, depth)
        elif isinstance(value, dict):
            self._dict(value, path, depth)
        elif isinstance(value, (list, tuple)):
            self.record(type(value).__name__, str(len(value)).encode())
            for i, item in enumerate(value):
                self.feed(item, f"{path}[{i}]", depth + 1)
        elif isinstance(value, (set, frozenset)):
            self.record("set", b"".join(sorted(bytes.fromhex(self._sub(v, f"{path}{{}}", depth)) for v in value)))
        elif isinstance(value, type) or _is_function(value):
            self.record("named", _qualified(value).encode())
        else:
            self._reduced(value, path, depth)

    def _sub(self, value: Any, path: str, depth: int) -> str:
        sub = hashlib.sha256()
        _Feeder(sub, self.special).feed(value, path, depth + 1)
        return sub.hexdigest()

    def _array(self, value: Any, path: str, depth: int) -> None:
        import numpy as np

        self.record("ndarray", f"{value.dtype.descr}|{value.shape}".encode())
        if value.dtype.names:  # structured: field by field, never the padding bytes between them
            for name in value.dtype.names:
                self.record("field", name.encode())
                self._array(np.ascontiguousarray(value[name]), f"{path}.{name}", depth + 1)
        elif value.dtype.hasobject:
            for i, item in enumerate(value.ravel(order="C").tolist()):
                self.feed(item, f"{path}[{i}]", depth + 1)
        else:
            self.record("data", value.tobytes(order="C"))

    def _dict(self, value: dict[Any, Any], path: str, depth: int) -> None:
        self.record("dict", str(len(value)).encode())
        keyed = sorted(((self._sub(k, f"{path}.<key>", depth), k) for k in value), key=lambda pair: pair[0])
        for key_digest, key in keyed:
            self.record("key", bytes.fromhex(key_digest))
            self.feed(value[key], f"{path}[{key!r}]" if isinstance(key, (str, int)) else f"{path}[...]", depth + 1)

    def _reduced(self, value: Any, path: str, depth: int) -> None:
        try:
            reduced = value.__reduce_ex__(4)
        except Exception as err:  # any failure means pickle could not save it either
            raise FingerprintError(
                f"{path} holds a {type(value).__module__}.{type(value).__qualname__} that cannot be saved, so it "
                "cannot be fingerprinted; keep only data (arrays, numbers, text) in fitted state",
                path=path) from err
        if isinstance(reduced, str):  # a module-level singleton saved by name
            self.record("global", f"{type(value).__module__}.{reduced}".encode())
            return
        self.record("object", _qualified(type(value)).encode())
        constructor, args, *rest = tuple(reduced) + (None,) * (6 - len(reduced))
        self.feed(constructor, f"{path}.<constructor>", depth + 1)
        self.feed(args, f"{path}.<args>", depth + 1)
        state, list_items, dict_items = _without_counters(value, rest[0]), rest[1], rest[2]
        self.feed(state, f"{path}.<state>", depth + 1)
        if list_items is not None:
            self.feed(list(list_items), f"{path}.<items>", depth + 1)
        if dict_items is not None:
            self.feed(dict(dict_items), f"{path}.<entries>", depth + 1)


def _is_function(value: Any) -> bool:
    import types

    return isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                              types.BuiltinMethodType)) or type(value).__name__ in _CYTHON_FUNCTIONS


_CYTHON_FUNCTIONS = {"cython_function_or_method", "fused_cython_function"}

# scikit-learn's KDTree/BallTree save their query statistics (n_trims, n_leaves, n_splits, n_calls)
# at these positions of their 13-item state; they count predictions, they are not the model
_BINARY_TREE_COUNTERS = range(7, 11)


def _without_counters(value: Any, state: Any) -> Any:
    """``state`` with the fields that change when the model predicts set to None."""
    is_binary_tree = type(value).__module__.startswith("sklearn.neighbors.") and hasattr(value, "get_tree_stats")
    if is_binary_tree and isinstance(state, tuple) and len(state) == 13:
        return tuple(None if i in _BINARY_TREE_COUNTERS else item for i, item in enumerate(state))
    return state


def _qualified(value: Any) -> str:
    return f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', getattr(value, '__name__', '?'))}"
