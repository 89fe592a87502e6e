"""Models made of fitted chains, a model set's components or a pasting ensemble's slice chains,
answer part of :class:`lakescore.chain.FittedChain`'s surface with their first member's value:
what every member holds the same (eligibility rules, feature lookups, engine), and, for a pasting
ensemble, what a single chain's output looks like.

Core: no Spark, MLflow or Delta here.
"""

from __future__ import annotations

from typing import Any


class FromFirst:
    """A read-only attribute whose value is the first member's attribute of the same name.

    Written in a class body as ``engine = FromFirst("The members' frame library.")``.
    """

    def __init__(self, doc: str = "") -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:  # on the class: the descriptor itself (help(), introspection)
            return self
        return getattr(obj.first, self.name)


class FirstMemberDelegation:
    """Mixin of a model whose ``components`` are ``(name, FittedChain)`` pairs in declared order:
    ``first`` is the first member, and what every member holds the same is read from it."""

    components: tuple[tuple[str, Any], ...]

    @property
    def first(self) -> Any:
        """The first member's :class:`lakescore.chain.FittedChain`."""
        return self.components[0][1]

    engine = FromFirst("The members' frame library (``pandas`` or ``polars``; every member holds the same).")
    rules = FromFirst("The eligibility rules (every member holds the same).")
    lookups = FromFirst("The feature lookups, joined once before every member (each holds the same).")
    lookup_versions = FromFirst("The feature tables' versions the members were trained on.")
