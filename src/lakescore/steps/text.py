"""Text steps: ``tokenizer``, ``count_vectorizer``, ``hashing_vectorizer``, ``tfidf_vectorizer``.

Every step reads text by scikit-learn's word analyzer (``CountVectorizer.build_analyzer``): strip
accents (optional), lowercase (default), tokens by ``token_pattern`` (default ``(?u)\\b\\w\\w+\\b``,
words of two or more word characters), stop words removed (none by default; ``english`` is stored
as scikit-learn's list, resolved at training), then word n-grams of ``ngram_range``. A value is read
as :func:`lakescore.columns.text_values` gives it; a missing text is an empty document.

- ``tokenizer`` rewrites each of its ``columns`` in place as its tokens joined by one space (the
  words of an n-gram joined by ``_``), a ``string`` column; a missing value stays missing. Learns
  nothing.
- ``count_vectorizer`` and ``tfidf_vectorizer`` replace their one column by one column per token
  of the vocabulary, ``<prefix>__<token>`` (``prefix`` defaults to the step's name) in vocabulary
  order (scikit-learn's: sorted). The vocabulary (after ``min_df``, ``max_df``, ``max_features``)
  and the IDF weights are learned at training by scikit-learn's ``CountVectorizer`` /
  ``TfidfVectorizer`` and saved in the state; scoring only reads them. A token the vocabulary lacks
  is ignored. tf-idf of a row: counts (or 1 with ``binary``), ``1 + ln(tf)`` with ``sublinear_tf``,
  times the token's IDF (``ln((1 + n) / (1 + df)) + 1`` with ``smooth_idf``), then the row divided
  by its l2 (or l1) norm: every number reads only the row and the state.
- ``hashing_vectorizer`` replaces its column by ``<prefix>__0`` ... ``<prefix>__<n_features-1>``:
  scikit-learn's ``HashingVectorizer`` (signed MurmurHash3 of each token, row norm). Nothing is
  learned, so any token, seen or not, lands in the same column in every batch.

The vectorizers' columns are ``Sparse[float64, 0]`` (pandas ``SparseDtype``): wide, mostly zero,
the same columns and dtypes for a batch of one row, an empty or all-missing batch, or a batch of
tokens training never saw. Their kinds carry the ``sparse_output`` trait, from which training
chooses the model's input container (:mod:`lakescore.model_input`).

Refused when the recipe is read (training's preflight, ``lakescore preview``), naming the key and
the value: ``min_df`` / ``max_df`` outside scikit-learn's range (a whole number of documents >= 1,
or a fraction in [0.0, 1.0]). Refused at training, each with the setting and a fix: ``vocabulary: batch`` (a vocabulary learned
from each scored batch), ``min_df`` / ``max_df`` / ``max_features`` beside a declared vocabulary
(scikit-learn ignores them silently), a learned vocabulary wider than 16,384 tokens, an empty one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from lakescore.columns import Columns, Kernel, text_values
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, register

TOKEN_PATTERN = r"(?u)\b\w\w+\b"
MAX_WIDTH = 16_384
"""Most columns a vectorizer may add (vocabulary size or ``n_features``)."""
SPARSE_DTYPE = pd.SparseDtype("float64", 0)


class TextParams(StepParams):
    """The analyzer's settings, shared by every text step (scikit-learn's names and defaults)."""

    lowercase: bool = True
    token_pattern: str = TOKEN_PATTERN
    ngram_range: tuple[int, int] = (1, 1)
    stop_words: Literal["english"] | list[str] | None = None
    strip_accents: Literal["ascii", "unicode"] | None = None

    @field_validator("token_pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        try:
            groups = re.compile(value).groups
        except re.error as err:
            raise ValueError(f"not a regular expression ({err}); use e.g. {TOKEN_PATTERN!r}") from None
        if groups > 1:
            raise ValueError("has more than one capturing group; keep at most one (the token)")
        return value

    @field_validator("ngram_range")
    @classmethod
    def _ngrams(cls, value: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= value[0] <= value[1] <= 3:
            raise ValueError("must be [min_n, max_n] with 1 <= min_n <= max_n <= 3, e.g. [1, 2]")
        return value


class VectorizerParams(TextParams):
    columns: list[str] = Field(min_length=1, max_length=1)  # one text column: the document
    prefix: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    binary: bool = False


class CountParams(VectorizerParams):
    vocabulary: Literal["learned", "batch"] | list[str] = "learned"
    min_df: int | float = 1
    max_df: int | float = 1.0
    max_features: int | None = Field(default=None, ge=1, le=MAX_WIDTH)

    @field_validator("min_df", "max_df", mode="before")
    @classmethod
    def _document_frequency(cls, value: Any) -> Any:
        """scikit-learn's rule for ``min_df`` / ``max_df`` (``CountVectorizer._parameter_constraints``):
        a whole number of documents >= 1, or a fraction of the documents in [0.0, 1.0]."""
        documents = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        fraction = isinstance(value, float) and 0.0 <= value <= 1.0
        if not (documents or fraction):
            raise ValueError("must be a whole number of documents >= 1 (e.g. 2) or a fraction of the documents "
                             "in [0.0, 1.0] (e.g. 0.95), as scikit-learn's CountVectorizer allows")
        return value


class TfidfParams(CountParams):
    norm: Literal["l1", "l2"] | None = "l2"
    use_idf: bool = True
    smooth_idf: bool = True
    sublinear_tf: bool = False


class HashingParams(VectorizerParams):
    n_features: int = Field(default=1024, ge=1, le=MAX_WIDTH)
    alternate_sign: bool = True
    norm: Literal["l1", "l2"] | None = "l2"


# --- the analyzer and the documents -----------------------------------------------------------

def _analyzer_settings(params: Any) -> dict[str, Any]:
    """The analyzer part of the state: scikit-learn keyword arguments, stop words resolved to a list."""
    from sklearn.feature_extraction.text import CountVectorizer  # sklearn only where a step learns

    stop = CountVectorizer(stop_words=params.stop_words).get_stop_words()
    return {"lowercase": params.lowercase, "token_pattern": params.token_pattern,
            "ngram_range": list(params.ngram_range), "strip_accents": params.strip_accents,
            "stop_words": sorted(stop) if stop is not None else None}


def _sklearn_kwargs(settings: dict[str, Any]) -> dict[str, Any]:
    return {**settings, "ngram_range": tuple(settings["ngram_range"])}


def documents(texts: np.ndarray) -> list[str]:
    """Each text as a document: a missing value (None) is the empty document."""
    return ["" if t is None else t for t in texts]


def analyzer(settings: dict[str, Any]) -> Callable[[str], list[str]]:
    """scikit-learn's word analyzer for the saved ``settings``: document -> its tokens and n-grams."""
    from sklearn.feature_extraction.text import CountVectorizer

    return CountVectorizer(**_sklearn_kwargs(settings)).build_analyzer()


def _names(params: Any, tokens: list[Any]) -> list[str]:
    return [f"{params.prefix or params.name}__{t}" for t in tokens]


def _refuse_clash(params: Any, frame: pd.DataFrame, names: list[str]) -> None:
    clash = sorted(n for n in names if n in frame.columns and n not in params.columns)
    if clash:
        raise StepError(f"step '{params.name}' ({params.step}): new column(s) {clash[:5]} already exist in the "
                        "frame; set prefix: to another name", step=params.name)


# --- the sparse columns -----------------------------------------------------------------------

def sparse_frame(matrix: Any, index: pd.Index, names: list[str]) -> pd.DataFrame:
    """A scipy sparse matrix (n_rows, len(names)) as a frame of ``Sparse[float64, 0]`` columns.

    ``from_spmatrix`` gives every column one dtype, the matrix's with fill value 0: that is
    ``SPARSE_DTYPE`` for a float64 matrix, so the cast (about 1 ms for 250 columns, even when it
    changes nothing) runs only where pandas would give another."""
    frame = pd.DataFrame.sparse.from_spmatrix(matrix.astype("float64"), index=index, columns=names)
    if len(names) and frame.dtypes.iloc[0] == SPARSE_DTYPE:
        return frame
    return frame.astype(SPARSE_DTYPE, copy=False)


def _replace(frame: pd.DataFrame, column: str, new: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([frame.drop(columns=[column]), new], axis=1, copy=False)


def _set_sparse(batch: Columns, column: str, matrix: Any, names: list[str]) -> None:
    new = sparse_frame(matrix, batch.index, names)
    batch.drop([column])
    for j, name in enumerate(names):
        batch.set(name, new.iloc[:, j].array)


class _Vectorizer(StepKind):
    """Shared apply and kernel: ``transform(state) -> (documents -> scipy CSR)``, built once per kernel."""

    sparse_output: ClassVar[bool] = True

    @staticmethod
    def transform(state: dict[str, Any]) -> Callable[[list[str]], Any]:
        raise NotImplementedError

    @classmethod
    def matrix(cls, state: dict[str, Any]) -> Callable[[np.ndarray], Any]:
        """Texts (object array, None where missing) -> CSR (n_rows, len(names)); an empty batch
        gives a (0, len(names)) matrix without calling scikit-learn (which refuses 0 samples)."""
        from scipy import sparse  # the vectorizers' container

        transform, width = cls.transform(state), len(state["names"])
        return lambda texts: transform(documents(texts)) if len(texts) else sparse.csr_matrix((0, width))

    @classmethod
    def apply(cls, frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        column = state["columns"][0]
        matrix = cls.matrix(state)(text_values(frame, column))
        return _replace(frame, column, sparse_frame(matrix, frame.index, state["names"]))

    @classmethod
    def kernel(cls, state: dict[str, Any]) -> Kernel:
        """scikit-learn's transform for the saved state, built once; its columns set as sparse arrays."""
        matrix, column = cls.matrix(state), state["columns"][0]

        def apply(batch: Columns) -> None:
            _set_sparse(batch, column, matrix(batch.texts(column)), state["names"])

        return Kernel(apply)


# --- the steps --------------------------------------------------------------------------------

@register
class Tokenizer(StepKind):
    """Rewrite each of ``columns`` as its tokens joined by single spaces (see the module docstring)."""

    kind = "tokenizer"
    Params = TextParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        return {"settings": _analyzer_settings(params)}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        analyze = analyzer(state["settings"])
        for column in state["columns"]:
            frame[column] = tokenized(text_values(frame, column), analyze)
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """The same analyzer, built once, on each column's texts."""
        analyze = analyzer(state["settings"])

        def apply(batch: Columns) -> None:
            for column in state["columns"]:
                batch.set(column, tokenized(batch.texts(column), analyze))

        return Kernel(apply)


def tokenized(texts: np.ndarray, analyze: Callable[[str], list[str]]) -> Any:
    """``string`` array of shape (n_rows,): each text's tokens joined by " " (an n-gram's words by
    "_"); missing stays missing."""
    out = [None if t is None else " ".join(token.replace(" ", "_") for token in analyze(t)) for t in texts]
    return pd.array(out, dtype="string")


def _learn_vocabulary(frame: pd.DataFrame, params: Any, estimator: Any) -> dict[str, Any]:
    """Fit ``estimator`` (a CountVectorizer or TfidfVectorizer) on the training documents and
    return the state: settings, vocabulary, column names (and IDF weights when it has them)."""
    if params.vocabulary == "batch":
        raise StepError(f"step '{params.name}' ({params.step}): vocabulary: batch would learn the vocabulary "
                        "from each scored batch, so a row's columns would depend on its batch; use "
                        "vocabulary: learned (learned at training and saved) or list the tokens",
                        step=params.name)
    declared = isinstance(params.vocabulary, list)
    trims = [k for k in ("min_df", "max_df", "max_features") if k in params.model_fields_set]
    if declared and trims:
        raise StepError(f"step '{params.name}' ({params.step}): {', '.join(trims)} cannot trim a declared "
                        "vocabulary (scikit-learn would ignore it); remove it, or use vocabulary: learned",
                        step=params.name)
    try:
        estimator.fit(documents(text_values(frame, params.columns[0])))
    except ValueError as err:  # sklearn: empty vocabulary, min_df/max_df leave no token, duplicate terms
        raise StepError(f"step '{params.name}' ({params.step}) could not learn a vocabulary from column "
                        f"'{params.columns[0]}': {err}. Lower min_df / raise max_df, list each declared "
                        "token once, or check the column holds text", step=params.name) from err
    tokens = estimator.get_feature_names_out().tolist()
    if len(tokens) > MAX_WIDTH:
        raise StepError(f"step '{params.name}' ({params.step}) learned {len(tokens):,} tokens, more than "
                        f"{MAX_WIDTH:,} columns; set max_features: (at most {MAX_WIDTH}) or raise min_df",
                        step=params.name)
    names = _names(params, tokens)
    _refuse_clash(params, frame, names)
    state: dict[str, Any] = {"settings": _analyzer_settings(params), "vocabulary": tokens, "names": names,
                             "binary": params.binary}
    return state


def _vectorizer_kwargs(params: Any) -> dict[str, Any]:
    vocabulary = params.vocabulary if isinstance(params.vocabulary, list) else None
    kwargs = {**_sklearn_kwargs(_analyzer_settings(params)), "binary": params.binary, "vocabulary": vocabulary,
              "dtype": np.float64}
    if vocabulary is None:
        kwargs.update(min_df=params.min_df, max_df=params.max_df, max_features=params.max_features)
    return kwargs


def _counts(state: dict[str, Any]) -> Callable[[list[str]], Any]:
    """Documents -> CSR counts over the saved vocabulary (scikit-learn's transform, nothing refitted)."""
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer(**_sklearn_kwargs(state["settings"]), vocabulary=state["vocabulary"],
                                 binary=state["binary"], dtype=np.float64)
    return vectorizer.transform


@register
class CountVectorizerStep(_Vectorizer):
    """Token counts over the vocabulary learned at training (see the module docstring)."""

    kind = "count_vectorizer"
    Params = CountParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.feature_extraction.text import CountVectorizer

        estimator = CountVectorizer(**_vectorizer_kwargs(params)) if params.vocabulary != "batch" else None
        return _learn_vocabulary(frame, params, estimator)

    @staticmethod
    def transform(state: dict[str, Any]) -> Callable[[list[str]], Any]:
        return _counts(state)


@register
class TfidfVectorizerStep(_Vectorizer):
    """tf-idf weights over the vocabulary and IDF learned at training (see the module docstring)."""

    kind = "tfidf_vectorizer"
    Params = TfidfParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.feature_extraction.text import TfidfVectorizer

        estimator = None if params.vocabulary == "batch" else TfidfVectorizer(
            **_vectorizer_kwargs(params), norm=params.norm, use_idf=params.use_idf,
            smooth_idf=params.smooth_idf, sublinear_tf=params.sublinear_tf)
        state = _learn_vocabulary(frame, params, estimator)
        state.update(norm=params.norm, sublinear_tf=params.sublinear_tf,
                     idf=np.asarray(estimator.idf_, dtype="float64") if params.use_idf else None)  # type: ignore[union-attr]  # _learn_vocabulary refused vocabulary: batch, the one case without estimator
        return state

    @staticmethod
    def transform(state: dict[str, Any]) -> Callable[[list[str]], Any]:
        counts = _counts(state)
        return lambda docs: tfidf(counts(docs), state)


def tfidf(counts: Any, state: dict[str, Any]) -> Any:
    """scikit-learn's ``TfidfTransformer.transform`` on a CSR count matrix (n_rows, n_tokens) with
    the saved ``idf``, ``sublinear_tf`` and ``norm``: row by row, nothing from the batch."""
    from sklearn.preprocessing import normalize

    matrix = counts.astype("float64", copy=True)
    if state["sublinear_tf"]:
        np.log(matrix.data, matrix.data)
        matrix.data += 1.0
    if state["idf"] is not None:
        matrix.data *= state["idf"][matrix.indices]
    return normalize(matrix, norm=state["norm"], copy=False) if state["norm"] else matrix


@register
class HashingVectorizerStep(_Vectorizer):
    """scikit-learn's ``HashingVectorizer`` into ``n_features`` columns; nothing learned."""

    kind = "hashing_vectorizer"
    Params = HashingParams
    fixed = True

    @classmethod
    def outputs(cls, params: Any) -> list[str]:
        """``<prefix>__0`` ... ``<prefix>__<n_features - 1>``."""
        return _names(params, list(range(params.n_features)))

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        names = _names(params, list(range(params.n_features)))
        _refuse_clash(params, frame, names)
        return {"settings": _analyzer_settings(params), "names": names, "binary": params.binary,
                "alternate_sign": params.alternate_sign, "norm": params.norm}

    @staticmethod
    def transform(state: dict[str, Any]) -> Callable[[list[str]], Any]:
        from sklearn.feature_extraction.text import HashingVectorizer

        return HashingVectorizer(**_sklearn_kwargs(state["settings"]), n_features=len(state["names"]),
                                 binary=state["binary"], alternate_sign=state["alternate_sign"],
                                 norm=state["norm"], dtype=np.float64).transform
