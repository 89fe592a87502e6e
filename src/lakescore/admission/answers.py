"""A part's answers on its own sample, computed once per admission and shared between its checks.

Every check of a part compares something against the part's answer on the whole sample, and some
checks of different parts score the very same frames: the ``chain`` part and the ``compiled`` part
both run ``FittedChain.predict`` on the raw sample, so ``chunks:1`` of the chain and ``agree:rows``
of the plan score the same one-row frames. :class:`Answers` keeps each such answer the first time a
check asks for it, keyed by the part's function and sample, so an admission computes it once.

What each check proves is unchanged: it compares the same frames in the same way. ``repeat`` still
scores the sample a second time (that second run is the check); a part whose answer changes from
one call to the next fails it. A call that raises is not kept: the next check that asks runs it
again and fails with that error, as it would on its own.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from lakescore.admission.parts import Part


class Answers:
    """The answers of the parts of one admission on their samples (whole, and in chunks)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[Hashable, ...], object] = {}

    @staticmethod
    def _key(part: Part, *what: Hashable) -> tuple[Hashable, ...]:
        # the function (a bound method compares by its object and function) and the sample itself
        return (part.run, id(part.sample), *what)

    def whole(self, part: Part) -> pd.DataFrame:
        """``part.run(part.sample)``, computed on the first call.

        Raises
        ------
        Exception
            Whatever ``part.run`` raises (the answer is then not kept).
        """
        key = self._key(part, "whole")
        if key not in self._kept:
            self._kept[key] = (part.sample, part.run(part.sample))  # the sample kept alive: its id stays its own
        return self._kept[key][1]  # type: ignore[index]  # a (sample, answer) pair

    def pieces(self, part: Part, size: int) -> list[pd.DataFrame]:
        """``part.run`` on each consecutive chunk of ``size`` rows of the sample (one empty chunk
        when the sample has no rows), computed on the first call.

        Raises
        ------
        Exception
            Whatever ``part.run`` raises on a chunk (the answers are then not kept).
        """
        key = self._key(part, "pieces", size)
        if key not in self._kept:
            sample = part.sample
            found = [part.run(sample.iloc[i:i + size]) for i in range(0, len(sample), size)] \
                or [part.run(sample.iloc[:0])]
            self._kept[key] = (sample, found)
        return self._kept[key][1]  # type: ignore[index]  # a (sample, answers) pair
