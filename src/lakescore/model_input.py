"""The model's input container, sealed in the chain: ``dense`` or ``sparse``.

``dense`` is a float64 numpy array (n_rows, n_features), missing values NaN. ``sparse`` is a scipy
CSR matrix of the same shape and values in canonical form: sorted column indices, no stored zeros
(a 0.0 is always an implicit entry, a NaN always a stored one). Some libraries predict differently
on the two containers of equal values (XGBoost and LightGBM read an implicit entry of a sparse
matrix as *missing*, a dense 0.0 as the value zero), so training chooses one, fits the model on it,
and saves it in ``chain.json`` (``model_input``); every later call of the model — the compiled plan
and the reference walk, on every route and at every batch size — gets a matrix built here by the
same rule, and :func:`require` refuses any other.

The choice (:func:`choose`): training.yml ``model.input: dense | sparse`` when declared; with
``auto`` (the default), ``sparse`` when a step of the recipe writes sparse columns (the trait
``sparse_output``: the text vectorizers) and the model takes sparse input (scikit-learn's tag
``input_tags.sparse``), else ``dense``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from lakescore.errors import ConfigError, InputError

if TYPE_CHECKING:  # annotations only: a worker imports no pydantic
    from lakescore.config import ModelInputSetting

ModelInput = Literal["dense", "sparse"]
MODEL_INPUTS: tuple[str, ...] = ("dense", "sparse")


def takes_sparse(model: Any) -> bool:
    """True when the model accepts a scipy sparse matrix (scikit-learn tag ``input_tags.sparse``;
    a model without scikit-learn tags is taken not to)."""
    tags = getattr(model, "__sklearn_tags__", None)
    return bool(tags().input_tags.sparse) if tags is not None else False


def choose(declared: ModelInputSetting, steps: Iterable[Any], model: Any) -> ModelInput:
    """The container training seals for ``model`` after the fitted ``steps``.

    Parameters
    ----------
    declared : {"auto", "dense", "sparse"}
        training.yml ``model.input``.
    steps : iterable of FittedStep
        The recipe's steps (their kind's ``sparse_output`` trait is read).
    model : estimator
        The unfitted model.

    Raises
    ------
    ConfigError
        ``sparse`` declared for a model that does not take sparse input, or an unknown value.
    """
    if declared not in ("auto", *MODEL_INPUTS):
        raise ConfigError([f"config/training.yml: model.input must be auto, dense or sparse; got {declared!r}"])
    if declared == "sparse" and not takes_sparse(model):
        raise ConfigError([f"config/training.yml: model.input is sparse but {type(model).__name__} does not take "
                           "sparse input (scikit-learn tag input_tags.sparse); set model.input: dense or auto"])
    if declared != "auto":
        return declared
    wide = any(getattr(step.impl, "sparse_output", False) for step in steps)
    return "sparse" if wide and takes_sparse(model) else "dense"


def _is_sparse(values: Any) -> bool:
    return isinstance(values, pd.arrays.SparseArray)


def build(columns: Sequence[Any], n_rows: int, container: str) -> Any:
    """The model matrix from its feature columns, in order.

    Parameters
    ----------
    columns : sequence of arrays of shape (n_rows,)
        Each a pandas ``SparseArray`` (fill value 0) or a float64 numpy array (missing as NaN).
    n_rows : int
    container : {"dense", "sparse"}

    Returns
    -------
    float64 ndarray (Fortran order) or scipy CSR matrix of shape (n_rows, len(columns)), canonical
    (sorted indices, no stored zeros).
    """
    if container == "dense":
        matrix = np.empty((n_rows, len(columns)), dtype="float64", order="F")  # column by column
        for j, values in enumerate(columns):
            matrix[:, j] = np.asarray(values, dtype="float64")
        return matrix
    from scipy import sparse  # only chains sealed sparse need scipy here

    indices, data, indptr = [], [], [0]
    for values in columns:
        if _is_sparse(values) and values.fill_value == 0:
            rows = values.sp_index.to_int_index().indices
            vals = np.asarray(values.sp_values, dtype="float64")
        else:
            dense = np.asarray(values, dtype="float64")
            rows = np.arange(n_rows)
            vals = dense
        stored = vals != 0  # NaN != 0: a missing value stays a stored NaN
        indices.append(np.asarray(rows[stored], dtype="int64"))
        data.append(vals[stored])
        indptr.append(indptr[-1] + int(stored.sum()))
    csc = sparse.csc_matrix((np.concatenate(data) if data else np.empty(0),
                             np.concatenate(indices) if indices else np.empty(0, dtype="int64"),
                             np.asarray(indptr, dtype="int64")), shape=(n_rows, len(columns)))
    matrix = csc.tocsr()
    matrix.sort_indices()
    return matrix


def from_frame(frame: pd.DataFrame, names: Sequence[str], container: str) -> Any:
    """:func:`build` of ``frame``'s columns ``names`` (numeric or ``Sparse[float64, 0]``); dense is
    ``frame[names].astype("float64").to_numpy()``, as training always fitted on."""
    if container == "dense":
        return frame[list(names)].astype("float64").to_numpy()
    columns = [frame[n].array if _is_sparse(frame[n].array)
               else frame[n].to_numpy(dtype="float64", na_value=np.nan) for n in names]
    return build(columns, len(frame), container)


def n_rows(matrix: Any) -> int:
    """Rows of a dense or sparse model matrix."""
    return int(matrix.shape[0])


def all_finite(matrix: Any) -> bool:
    """True only when every value of the dense or sparse model matrix is finite: the sum of its
    values is (NaN or an infinity anywhere makes the sum NaN or infinite). One pass without a
    boolean matrix; a matrix of finite values whose sum overflows (beyond 1.8e308) gives False,
    so a caller takes the path that checks each value."""
    values = matrix if isinstance(matrix, np.ndarray) else matrix.data
    return bool(np.isfinite(np.sum(values)))


def nan_features(matrix: Any) -> tuple[np.ndarray, np.ndarray]:
    """Rows holding NaN and, for each such row, its first NaN feature.

    Returns
    -------
    bad : bool array of shape (n_rows,)
    first : int array of shape (bad.sum(),)
        Column position of the first NaN of each bad row, in row order.
    """
    if all_finite(matrix):  # no NaN: no row is bad
        return np.zeros(matrix.shape[0], dtype=bool), np.empty(0, dtype=np.intp)
    if isinstance(matrix, np.ndarray):
        nan = np.isnan(matrix)
        bad = nan.any(axis=1)
        return bad, nan[bad].argmax(axis=1)  # type: ignore[return-value]  # numpy's stub: any(axis=1) of a 2-D array is an array
    coo = matrix.tocoo()
    at = np.isnan(coo.data)
    first = np.full(matrix.shape[0], np.iinfo("int64").max)
    np.minimum.at(first, coo.row[at], coo.col[at])
    bad = first < np.iinfo("int64").max
    return bad, first[bad]


def require(matrix: Any, container: str, *, model: str) -> None:
    """Refuse a matrix that is not the sealed container (the model must get what it was fitted on).

    Raises
    ------
    InputError
        Naming the container the chain sealed and the one handed over.
    """
    got = "dense" if isinstance(matrix, np.ndarray) else "sparse" if hasattr(matrix, "tocsr") else type(matrix).__name__
    if got != container:
        raise InputError(f"the chain's model {model} was fitted on model_input={container!r} but was handed a "
                         f"{got} matrix; build the matrix with lakescore.model_input.build(..., {container!r}) "
                         "(FittedChain.model_matrix)", model_input=container, got=got)
