"""Small shared helpers: lazy weights, batched draws, batching errors, unit flattening."""

from __future__ import annotations

from typing import Any, Iterable

from genlm.control.draw import DRAW_METHODS, Draw, counting_readbacks, draw_from, set_draw_method
from genlm.control.weights import LazyWeights, logsumexp
from genlm.control.window import BatchAbandoned


def flatten_units(context: Iterable[Any]) -> list:
    """Flatten a context of units (lists of tokens) into one token list; tokens pass through."""
    out: list = []
    for unit in context:
        if isinstance(unit, list):
            out.extend(flatten_units(unit))
        else:
            out.append(unit)
    return out


__all__ = [
    "BatchAbandoned",
    "DRAW_METHODS",
    "Draw",
    "counting_readbacks",
    "LazyWeights",
    "draw_from",
    "flatten_units",
    "logsumexp",
    "set_draw_method",
]
