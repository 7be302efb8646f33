"""Token types: what kind of object a potential's tokens are.

A token type is inferred from a vocabulary so that `p1 * p2` and `p.coerce(...)` can
refuse to combine potentials whose tokens are of different kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from genlm.control.constant import EndOfSequence


class TokenType:
    """Base class of token types."""

    def check(self, value: Any) -> bool:
        """Whether `value` is a token of this type."""
        raise NotImplementedError


@dataclass(frozen=True)
class Atomic(TokenType):
    """Tokens that are single values of a Python type (bytes, int, str, ...)."""

    type: type

    def check(self, value: Any) -> bool:
        return isinstance(value, self.type)

    def __repr__(self) -> str:
        return f"Atomic({self.type.__name__})"


@dataclass(frozen=True)
class Sequence(TokenType):
    """Tokens that are sequences (tuples or lists) of an element type."""

    element_type: TokenType

    def check(self, value: Any) -> bool:
        return isinstance(value, (list, tuple)) and all(
            self.element_type.check(v) for v in value
        )

    def __repr__(self) -> str:
        return f"Sequence({self.element_type!r})"


def _base_type(value: Any) -> type:
    # Subclasses such as genlm.backend's `Token` (a bytes subclass) count as their base.
    for base in (bytes, str, bool, int, float):
        if isinstance(value, base):
            return base
    return type(value)


def infer_type(value: Any) -> TokenType:
    """The token type of one token."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("cannot infer the token type of an empty sequence")
        return Sequence(infer_vocabulary_type(value))
    return Atomic(_base_type(value))


def infer_vocabulary_type(vocabulary: Iterable[Any]) -> TokenType:
    """The common token type of a vocabulary.

    Raises:
        ValueError: if the vocabulary is empty.
        TypeError: if its tokens are of different types, or a token is an end marker.
    """
    vocabulary = list(vocabulary)
    if not vocabulary:
        raise ValueError("vocabulary is empty")
    first = infer_type(vocabulary[0])
    for token in vocabulary:
        if isinstance(token, EndOfSequence):
            raise TypeError(f"vocabulary must not contain the end marker {token!r}")
        if not first.check(token):
            raise TypeError(
                f"vocabulary mixes token types: {vocabulary[0]!r} is {first!r} "
                f"but {token!r} is {infer_type(token)!r}"
            )
    return first


__all__ = ["TokenType", "Atomic", "Sequence", "infer_type", "infer_vocabulary_type"]
